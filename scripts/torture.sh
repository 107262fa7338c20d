#!/usr/bin/env bash
# The long randomized differential run: seeded random tables, workloads and
# schema changes; a transform drawn per run (collation-dependent text
# functions, settings-dependent values, expressions that fail on some rows,
# filters), databases of drawn locale providers and column collations, maybe
# a separate destination, and settings of the databases and of walfill's
# role; versions built by snapshot (the transform evaluated on the source or
# in the destination), by replay from the table's creation and by replay
# from a base snapshot, with kill -9 in every phase; then every view
# compared with the transform of its source, row by row (the rows it fails
# on are the expected dead letters), and walfill verify checked on the
# right version and on wrong ones in every run. Larger than the suite's
# short run, with a transaction of a million rows.
#
#   scripts/torture.sh [--runs N] [--minutes M] [--first-seed S] [--large-rows R]
#
# Defaults: 500 runs, at most 240 minutes, seeds from 1000, 1000000 rows.
# The cluster's WAL archive is pruned of segments older than an hour while
# it runs. Each run's seed is logged; WALFILL_TORTURE_SEED=S scripts/test.sh torture::short
# replays one. The log goes to .torture/torture-<time>.log as well.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

runs=500 minutes=240 first=1000 large=1000000
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --first-seed) first="$2"; shift 2 ;;
    --large-rows) large="$2"; shift 2 ;;
    *) die "unknown argument $1 (see the comment at the top of $0)" ;;
  esac
done

"$WALFILL_ROOT/scripts/deps.sh"
TEST_ENV="$("$WALFILL_ROOT/scripts/test-env.sh")"
eval "$TEST_ENV"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# A build directory of its own: the run takes hours, and other builds must
# not replace the binary it runs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WALFILL_ROOT/target/torture}"
export WALFILL_TORTURE_RUNS="$runs" WALFILL_TORTURE_MINUTES="$minutes"
export WALFILL_TORTURE_FIRST_SEED="$first" WALFILL_TORTURE_LARGE_ROWS="$large"
# The private cluster archives every segment the runs write (gigabytes over
# hours); runs need only their own recent WAL: prune segments older than an
# hour while the run goes on.
(
  while sleep 300; do
    find "$WALFILL_PG_ARCHIVE/wal" -type f -mmin +60 -delete 2>/dev/null || true
  done
) &
pruner=$!
trap 'kill $pruner 2>/dev/null || true' EXIT
mkdir -p .torture
logfile=".torture/torture-$(date -u +%Y%m%dT%H%M%SZ).log"
log "running $runs runs from seed $first (at most $minutes minutes); log: $logfile"
set +e
cargo nextest run --locked --test integration --run-ignored only --no-capture \
  --no-tests=fail -E 'test(=torture::long)' 2>&1 | tee "$logfile" | grep --line-buffered '^torture:'
status=${PIPESTATUS[0]}
set -e
[ "$status" = 0 ] || die "the torture run failed; see $logfile"
log "passed; see $logfile"
