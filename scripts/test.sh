#!/usr/bin/env bash
# Runs every test: formatting and lints, unit tests, and the integration tests
# against private PostgreSQL clusters this script starts (one with
# wal_level=logical and WAL archiving, one with wal_level=replica for the
# tests of what walfill refuses).
#
# Then the decoder oracle and the replay and snapshot tests run again on
# PostgreSQL 16, 17 and 18 (clusters of their own, from npm's embedded
# PostgreSQL package); with --all-versions, every integration test does.
# Last, the fuzz targets in fuzz/ are type-checked and their harnesses run
# over their seeds.
#
#   scripts/test.sh [--all-versions] [nextest arguments...]
#
# Extra arguments go to `cargo nextest run` (e.g. a test name filter), which
# then runs on PostgreSQL 15 only.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

all_versions=""
if [ "${1:-}" = "--all-versions" ]; then
  all_versions=1
  shift
fi

"$WALFILL_ROOT/scripts/deps.sh"
command -v cargo >/dev/null || die "cargo not found: install a Rust toolchain"

# How much of PostgreSQL's regression suite a full run decodes (the whole
# suite: scripts/regress-oracle.sh).
REGRESS_FILES="${WALFILL_REGRESS_FILES:-60}"
# How long a full run fuzzes each fuzz target with scripts/fuzz.sh (default
# 0: the harnesses only run over their seeds, without the fuzzer).
FUZZ_SECS="${WALFILL_FUZZ_SECS:-0}"

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
  # The same tests on every other major version, against its own cluster.
  if [ -n "$all_versions" ]; then
    # All but four tests whose peers exist for PostgreSQL 15 only here:
    # Debian's pgBackRest does not know 16-18's control files, npm's
    # package has no pg_basebackup (for a standby), and the second cluster
    # (another system identifier) is 15.
    matrix="(binary(integration) | binary(tuple_oracle)) - test(replay_from_a_pgbackrest_repository)
      - test(after_pgbackrest_expires_a_tables_wal_it_replays_from_walfills_base)
      - test(replay_follows_the_source_across_a_failover)
      - test(c1_replay_refuses_the_archive_of_another_cluster)"
  else
    matrix="binary(integration) & (test(/^oracle::/) | test(/^replay::/) | test(/^snapshot::/))"
  fi
  [ $# -eq 0 ] || WALFILL_TEST_PG_MAJORS=""
  for major in ${WALFILL_TEST_PG_MAJORS:-}; do
    url="WALFILL_TEST_PG${major}_URL"
    archive="WALFILL_TEST_PG${major}_ARCHIVE_URL"
    log "PostgreSQL $major: $matrix"
    WALFILL_TEST_PG_URL="${!url}" WALFILL_TEST_ARCHIVE_URL="${!archive}" \
      WALFILL_PG_BINDIR="$("$WALFILL_ROOT/scripts/pg-dist.sh" "$major")" \
      cargo nextest run --workspace --locked --no-fail-fast -E "$matrix"
  done
  if [ $# -eq 0 ]; then
    log "the first $REGRESS_FILES files of PostgreSQL's regression suite through the decoder oracle"
    WALFILL_BIN="$WALFILL_ROOT/target/debug/walfill" \
      "$WALFILL_ROOT/scripts/regress-oracle.sh" --tests "$REGRESS_FILES" --check --outcomes
    log "the status page of walfill serve in headless Chromium"
    "$WALFILL_ROOT/scripts/page-check.sh"
    # fuzz/ is a workspace of its own, which nothing above builds. --locked:
    # when replay/ gains a dependency, fuzz/Cargo.lock must be updated too
    # (cargo update --manifest-path fuzz/Cargo.toml --workspace).
    fuzz_build="$WALFILL_ROOT/target/fuzz-check"
    log "type-checking the fuzz targets against the current replay crate"
    CARGO_TARGET_DIR="$fuzz_build" \
      cargo check --manifest-path "$WALFILL_ROOT/fuzz/Cargo.toml" --workspace --all-targets --locked
    log "every fuzz harness over its seeds (the WAL fixtures and type vectors)"
    rm -rf "$fuzz_build/seeds"
    CARGO_TARGET_DIR="$fuzz_build" \
      cargo run --quiet --manifest-path "$WALFILL_ROOT/fuzz/Cargo.toml" --locked \
      -p walfill-fuzz-seedgen -- "$WALFILL_ROOT" "$fuzz_build/seeds"
    # Fuzzing proper is opt-in: its instrumented release build of replay/
    # and its dependencies takes several minutes on two cores.
    if [ "$FUZZ_SECS" -gt 0 ]; then
      log "each fuzz target for ${FUZZ_SECS}s (no sanitizer)"
      CARGO_TARGET_DIR="$fuzz_build" FUZZ_SANITIZER=none \
        "$WALFILL_ROOT/scripts/fuzz.sh" all "$FUZZ_SECS"
    fi
  fi
else
  cargo test --workspace --locked --no-fail-fast "$@"
fi
