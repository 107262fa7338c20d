#!/usr/bin/env bash
# Runs every test: formatting and lints, unit tests, and the integration tests
# against private PostgreSQL clusters this script starts (one with
# wal_level=logical and WAL archiving, one with wal_level=replica for the
# tests of what walfill refuses).
#
# Extra arguments go to `cargo nextest run` (e.g. a test name filter).
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

"$WALFILL_ROOT/scripts/deps.sh"
command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain"

# A one-off build gains nothing from incremental state, which would double
# the size of the build directory.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

log "checking formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

WALFILL_TEST_PG_URL="$("$WALFILL_ROOT/scripts/pg-up.sh")"
WALFILL_TEST_PG_REPLICA_URL="$(WALFILL_PG_HOME="$WALFILL_PG_HOME-replica" \
  WALFILL_PG_PORT=$((WALFILL_PG_PORT + 1)) WALFILL_PG_WAL_LEVEL=replica \
  "$WALFILL_ROOT/scripts/pg-up.sh")"
WALFILL_TEST_ARCHIVE_URL="file://$WALFILL_PG_ARCHIVE"
export WALFILL_TEST_PG_URL WALFILL_TEST_PG_REPLICA_URL WALFILL_TEST_ARCHIVE_URL
# A local S3-compatible server for the tests of S3 archives.
S3_ENV="$("$WALFILL_ROOT/scripts/s3-up.sh")"
eval "$S3_ENV"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@"
  # nextest does not run doctests.
  cargo test --workspace --locked --doc
else
  cargo test --workspace --locked --no-fail-fast "$@"
fi
