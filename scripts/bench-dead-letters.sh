#!/usr/bin/env bash
# Dead letters at a realistic density: the same snapshot backfill with a
# transform that fails on no row and with one that fails on 1 row in 7,
# both evaluated in the destination (`transform_on = "destination"`, where
# failing rows are set aside), runs alternating.
#
#   scripts/bench-dead-letters.sh [ROWS] [RUNS]     (default 500000 3)
#
# The transforms: `total_cents / (id % 7 + 1)` (never fails) and
# `total_cents / (id % 7)` (division by zero on every 7th id). Printed,
# medians of the runs: the fill's seconds (the copy phase, from walfill's
# own state), rows per second, the ratio to the run without failures, the
# dead letters recorded, the WARN lines walfill logged and the ERROR lines
# the destination's server log gained. Each version is checked: the rows
# that do not fail equal the transform of the source, and the failing ones
# are dead letters. KEEP=1 keeps the databases.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-500000}"
RUNS="${2:-3}"
SRC=walfill_bench_dl
DEST=walfill_bench_dl_dest
DIR="$WALFILL_PG_HOME/bench-dead-letters"
rm -rf "$DIR"
mkdir -p "$DIR"
CLEAN="id, status, total_cents / (id % 7 + 1) AS share"
FAILING="id, status, total_cents / (id % 7) AS share"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
dest_cluster_up
bench_build
fresh_dest_db "$DEST"
fresh_bench_db "$SRC"
if [ -z "${KEEP:-}" ]; then
  trap 'drop_bench_db $SRC; drop_dest_db $DEST' EXIT
fi
log "creating $SRC with $ROWS rows"
create_bench_orders "$SRC" "$ROWS"
src() { pg_psql -d "$SRC" -At -c "$1"; }
dest() { dest_psql -d "$DEST" -At -c "$1"; }

config() { # name select
  cat <<TOML
[source]
url = "$(pg_url "$SRC")"
[destination]
url = "$(dest_url "$DEST")"
[backfill]
snapshot = "exported"
transform_on = "destination"
allow_dead_letters = true
[[target]]
name = "$1"
source = "public.orders"
select = "$2"
version = "v1"
TOML
}
config clean "$CLEAN" >"$DIR/clean.toml"
config failing "$FAILING" >"$DIR/failing.toml"
for name in clean failing; do
  WALFILL_CONFIG="$DIR/$name.toml" "$WALFILL" setup >/dev/null
done

# walfill NAME RUN: "fill_seconds dead_letters warn_lines server_errors" on stdout
walfill() {
  forget_version "$1" v1 "$DEST"
  dest "DELETE FROM walfill.dead_letters WHERE target = '$1'" >/dev/null
  local errors_before fill
  errors_before=$(dest_log_errors)
  env WALFILL_CONFIG="$DIR/$1.toml" "$WALFILL" backfill "$1" --no-swap \
    >"$DIR/$1.$2.out" 2>"$DIR/$1.$2.err" || {
    tail -20 "$DIR/$1.$2.err" >&2
    die "walfill backfill $1 failed (log: $DIR/$1.$2.err)"
  }
  fill=$(dest "SELECT extract(epoch FROM copy_finished_at - copy_started_at) FROM walfill.versions
                WHERE target = '$1' AND version = 'v1'")
  echo "$fill $(dest "SELECT count(*) FROM walfill.dead_letters WHERE target = '$1'") \
$(grep -c ' WARN ' "$DIR/$1.$2.err" || true) $(($(dest_log_errors) - errors_before))"
}

for run in $(seq 1 "$RUNS"); do
  log "run $run of $RUNS"
  walfill clean "$run" >>"$DIR/walfill_clean"
  walfill failing "$run" >>"$DIR/walfill_failing"
done

# Each version equals its transform over the rows it does not fail on;
# the failing rows are its dead letters.
SUMMARY="count(*) || ' rows, hash sum ' || coalesce(sum(hashtext(t::text)::numeric), 0)"
for name in clean failing; do
  if [ "$name" = clean ]; then select="$CLEAN" where="true"; else select="$FAILING" where="id % 7 <> 0"; fi
  expected=$(src "SELECT $SUMMARY FROM (SELECT $select FROM orders WHERE $where) t")
  actual=$(dest "SELECT $SUMMARY FROM (SELECT id, status, share FROM public.${name}__v1
                                        WHERE NOT _walfill_deleted) t")
  [ "$expected" = "$actual" ] || die "version $name differs from the transform of the source: $actual, not $expected"
done
expected_dead=$(src "SELECT count(*) FROM orders WHERE id % 7 = 0")
actual_dead=$(dest "SELECT count(*) FROM walfill.dead_letters WHERE target = 'failing'")
[ "$expected_dead" = "$actual_dead" ] || die "$actual_dead dead letters, not $expected_dead"

col() { awk -v c="$2" '{ print $c }' "$DIR/$1" | median; }
clean=$(col walfill_clean 1)
printf '\n%s rows, %s runs each (medians), transform evaluated in the destination\n' "$ROWS" "$RUNS"
printf '%-34s %8s %10s %7s %13s %10s %14s\n' "" "fill s" "rows/s" "ratio" "dead letters" "WARN lines" "server ERRORs"
for name in clean failing; do
  awk -v n="$name" -v s="$(col "walfill_$name" 1)" -v r="$ROWS" -v c="$clean" \
    -v d="$(col "walfill_$name" 2)" -v w="$(col "walfill_$name" 3)" -v e="$(col "walfill_$name" 4)" \
    'BEGIN { printf "%-34s %8.2f %10.0f %7.2f %13d %10d %14d\n", n, s, r / s, s / c, d, w, e }'
done
echo "(ratio = fill seconds / the fill seconds without failures; server ERRORs: lines the"
echo " destination cluster's log gained during the backfill)"
