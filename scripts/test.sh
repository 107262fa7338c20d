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

# How much of PostgreSQL's regression suite a full run decodes (the whole
# suite: scripts/regress-oracle.sh).
REGRESS_FILES="${WALFILL_REGRESS_FILES:-60}"

# A one-off build gains nothing from incremental state, which would double
# the size of the build directory.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

log "checking formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

TEST_ENV="$("$WALFILL_ROOT/scripts/test-env.sh")"
eval "$TEST_ENV"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@"
  # nextest does not run doctests.
  cargo test --workspace --locked --doc
  if [ $# -eq 0 ]; then
    log "the first $REGRESS_FILES files of PostgreSQL's regression suite through the decoder oracle"
    WALFILL_BIN="$WALFILL_ROOT/target/debug/walfill" \
      "$WALFILL_ROOT/scripts/regress-oracle.sh" --tests "$REGRESS_FILES" --check --outcomes
  fi
else
  cargo test --workspace --locked --no-fail-fast "$@"
fi
