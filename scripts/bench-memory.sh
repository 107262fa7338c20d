#!/usr/bin/env bash
# Peak memory of the live stream's apply under one huge source transaction,
# against the same command applying a one-row transaction, in one run.
#
#   scripts/bench-memory.sh [ROWS] [APPLY_MEMORY_MB]   (default 5000000 64)
#
# KEEP=1 keeps the database (and its slot) afterwards to look at.
#
# A version of a small table is built, then one transaction inserts ROWS
# rows (about 100 bytes each) and `walfill sync --once` applies it; its peak
# resident memory (VmHWM, polled from /proc) is printed next to that of a
# `sync --once` that applies a single row, and checked against the bound the
# issue set: 256 MiB. The view is then compared with the source.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-5000000}"
MEMORY_MB="${2:-64}"
DB=walfill_bench_memory
DIR="$WALFILL_PG_HOME/bench-memory"
BOUND_KIB=$((256 * 1024))
rm -rf "$DIR"
mkdir -p "$DIR"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill (release)"
cargo build --quiet --release --bin walfill
WALFILL="$WALFILL_ROOT/target/release/walfill"

fresh_bench_db "$DB"
value() { pg_psql -d "$DB" -At -c "$1"; }
cat >"$DIR/walfill.toml" <<TOML
[source]
url = "$(pg_url "$DB")"
[backfill]
apply_memory_mb = $MEMORY_MB
[[target]]
name = "big_view"
source = "public.big"
select = "id, payload, length(payload) AS len"
version = "v1"
TOML
export WALFILL_CONFIG="$DIR/walfill.toml"
pg_psql -d "$DB" -c "CREATE TABLE big (id bigint PRIMARY KEY, payload text);
  INSERT INTO big SELECT g, 'seed' FROM generate_series(1, 1000) g;"
"$WALFILL" setup >/dev/null
"$WALFILL" backfill big_view 2>"$DIR/backfill.log" || die "backfill failed; see $DIR/backfill.log"

# Runs a command, polling its peak RSS until it exits: KiB in $peak, exit
# status in $status.
peak_of() {
  "$@" 2>"$DIR/run.log" &
  local pid=$! kib
  peak=0
  while kill -0 "$pid" 2>/dev/null; do
    kib=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    if [ -n "$kib" ] && [ "$kib" -gt "$peak" ]; then peak=$kib; fi
    sleep 0.05
  done
  status=0
  wait "$pid" || status=$?
}

pg_psql -d "$DB" -c "INSERT INTO big VALUES (0, 'one row')"
peak_of "$WALFILL" sync --once
small=$peak
[ "$status" = 0 ] || die "sync --once (1 row) failed; see $DIR/run.log"

log "one transaction of $ROWS rows"
pg_psql -d "$DB" -c "INSERT INTO big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1001, 1000 + $ROWS) g"
start=$(date +%s.%N)
peak_of "$WALFILL" sync --once
large=$peak
[ "$status" = 0 ] || die "sync --once ($ROWS rows) failed; see $DIR/run.log"
seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')

rows=$(value "SELECT count(*) FROM public.big_view")
expected=$(value "SELECT count(*) FROM big")
differ=$(value "SELECT count(*) FROM (SELECT id, payload, length(payload) FROM big
                 EXCEPT SELECT id, payload, len FROM public.big_view) d")

printf '\n%-44s %10s\n' "sync --once applying" "peak RSS"
printf '%-44s %7d MiB\n' "1 row (baseline)" $((small / 1024))
printf '%-44s %7d MiB  (%.1f s)\n' "$ROWS rows in one transaction" $((large / 1024)) "$seconds"
printf 'growth over the baseline: %d MiB; bound 256 MiB: %s\n' $(((large - small) / 1024)) \
  "$([ "$large" -le "$BOUND_KIB" ] && echo kept || echo EXCEEDED)"
printf 'view rows: %s of %s, rows differing: %s\n' "$rows" "$expected" "$differ"
[ "$large" -le "$BOUND_KIB" ] && [ "$differ" = 0 ] && [ "$rows" = "$expected" ]
