#!/usr/bin/env bash
# A snapshot backfill of a large table with writes going on: the chunked copy
# (a short transaction per chunk) next to the exported-snapshot copy (one
# transaction for the whole copy) and a plain COPY pipe, in one run.
#
#   scripts/bench-chunked.sh [ROWS] [CHUNK_ROWS] [WORKERS]   (default 1000000 50000 2)
#
# While each copy runs, pgbench updates random rows (one small transaction
# at a time) and the oldest open transaction of every client backend on the
# source (now() - xact_start) is sampled every second. The chunked copy runs
# twice: one worker, then WORKERS workers on key ranges. Printed per copy:
# seconds, rows/s, ratio to the pipe, walfill's peak RSS (VmHWM), the
# oldest transaction seen, and how long one chunk took on average. The
# versions go to another database of the cluster (as a destination would
# be), so the sampled transactions are the source's. The chunked version is
# then compared with the transform of the source (row count and a sum of
# row hashes on both sides).
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-1000000}"
CHUNK_ROWS="${2:-50000}"
WORKERS="${3:-2}"
DB=walfill_bench_chunked
DEST=walfill_bench_chunked_dest
DIR="$WALFILL_PG_HOME/bench-chunked"
rm -rf "$DIR"
mkdir -p "$DIR"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill (release)"
cargo build --quiet --release --bin walfill
WALFILL="$WALFILL_ROOT/target/release/walfill"
value() { pg_psql -d "$DB" -At -c "$1"; }
dest_value() { pg_psql -d "$DEST" -At -c "$1"; }

# The cluster archives every segment the run writes (tens of GB at 10M
# rows); the run needs none of them: they go a minute after they arrive.
touch "$DIR/start"
( while sleep 10; do
    find "$WALFILL_PG_HOME/archive" -type f -newer "$DIR/start" -mmin +1 -delete 2>/dev/null || true
  done ) &
PRUNER=$!
log "creating $DB with $ROWS rows"
fresh_bench_db "$DEST"
fresh_bench_db "$DB"
if [ -n "${KEEP:-}" ]; then
  trap 'kill $PRUNER 2>/dev/null || true' EXIT
else
  trap 'kill $PRUNER 2>/dev/null || true; drop_bench_db $DB; drop_bench_db $DEST' EXIT
fi
create_bench_orders "$DB" "$ROWS"
cat >"$DIR/writes.sql" <<SQL
\set id random(1, $ROWS)
UPDATE orders SET total_cents = total_cents + 1, status = 'paid' WHERE id = :id;
SQL

now() { date +%s.%N; }

log "baseline: COPY TO STDOUT | COPY FROM STDIN"
start=$(now)
pg_psql -d "$DB" -c "COPY orders TO STDOUT" | pg_psql -d "$DB" -c "COPY orders_copy FROM STDIN" >/dev/null
pipe=$(awk -v a="$(now)" -v b="$start" 'BEGIN { print a - b }')

SELECT="id, customer_id, upper(status) AS status, total_cents / 100.0 AS total, date_trunc('day', created_at) AS day"

# Runs one backfill (name, snapshot mode, workers) under writes; prints
# "seconds peak_kib oldest_s chunk_s".
run_walfill() {
  cat >"$DIR/$1.toml" <<TOML
[source]
url = "$(pg_url "$DB")"
[destination]
url = "$(pg_url "$DEST")"
[backfill]
snapshot = "$2"
workers = $3
chunk_rows = $CHUNK_ROWS
[[target]]
name = "$1"
source = "public.orders"
select = "$SELECT"
version = "v1"
TOML
  export WALFILL_CONFIG="$DIR/$1.toml"
  "$WALFILL" setup >/dev/null
  "$(pg_bindir)/pgbench" -n -c 1 -T 100000 -f "$DIR/writes.sql" "$(pg_url "$DB")" \
    >"$DIR/$1.pgbench.log" 2>&1 &
  local writer=$!
  : >"$DIR/$1.oldest"
  ( while sleep 1; do
      value "SELECT coalesce(max(extract(epoch FROM now() - xact_start)), 0)
               FROM pg_stat_activity
              WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
                AND datname = current_database()" >>"$DIR/$1.oldest" 2>/dev/null
    done ) &
  local sampler=$!
  "$WALFILL" backfill "$1" --no-swap 2>"$DIR/$1.log" &
  local pid=$! kib peak=0
  while kill -0 "$pid" 2>/dev/null; do
    kib=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    if [ -n "$kib" ] && [ "$kib" -gt "$peak" ]; then peak=$kib; fi
    sleep 0.1
  done
  wait "$pid" || die "backfill $1 failed; see $DIR/$1.log"
  kill "$sampler" "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  local secs chunks oldest
  secs=$(dest_value "SELECT extract(epoch FROM copy_finished_at - copy_started_at)
                  FROM walfill.versions WHERE target = '$1'")
  chunks=$(dest_value "SELECT count(*) FROM walfill.chunk_snapshots
                   WHERE version_table LIKE '%$1%'")
  oldest=$(sort -g "$DIR/$1.oldest" | tail -1)
  awk -v s="$secs" -v k="$peak" -v o="${oldest:-0}" -v c="$chunks" -v r="$ROWS" -v n="$CHUNK_ROWS" \
    'BEGIN { if (c == 0) c = r / n; printf "%s %s %s %s\n", s, k, o, s / c }'
}

log "walfill: chunked copy under writes"
chunked=$(run_walfill bench_chunked chunked 1)
log "walfill: chunked copy, $WORKERS workers, under writes"
parallel=$(run_walfill bench_parallel chunked "$WORKERS")
log "walfill: exported-snapshot copy under writes"
exported=$(run_walfill bench_exported exported 1)

log "checking the chunked version against the source"
WALFILL_CONFIG="$DIR/bench_chunked.toml" "$WALFILL" sync --once 2>>"$DIR/bench_chunked.log"
SUMMARY="count(*) || ' rows, hash sum ' || coalesce(sum(hashtext(t::text)::numeric), 0)"
expected=$(value "SELECT $SUMMARY FROM (SELECT $SELECT FROM orders) t")
actual=$(dest_value "SELECT $SUMMARY FROM (SELECT id, customer_id, status, total, day
                       FROM public.bench_chunked__v1 WHERE NOT _walfill_deleted) t")

printf '\n%-36s %8s %10s %7s %9s %11s %9s\n' "copy of $ROWS rows, writes going on" \
  seconds rows/s ratio "peak MiB" "oldest xact" "chunk s"
printf '%-36s %8.2f %10.0f %7.2f %9s %11s %9s\n' "COPY TO STDOUT | COPY FROM STDIN" \
  "$pipe" "$(awk -v r="$ROWS" -v p="$pipe" 'BEGIN { print r / p }')" 1 - - -
for line in "walfill, chunked:$chunked" "walfill, chunked, $WORKERS workers:$parallel" \
            "walfill, exported snapshot:$exported"; do
  name="${line%%:*}"
  read -r secs kib oldest chunk <<<"${line##*:}"
  awk -v n="$name" -v s="$secs" -v k="$kib" -v o="$oldest" -v c="$chunk" -v r="$ROWS" -v p="$pipe" \
    'BEGIN { printf "%-36s %8.2f %10.0f %7.2f %9.0f %10.1fs %8.2fs\n", n, s, r / s, p / s, k / 1024, o, c }'
done
echo "(ratio = pipe time / this time; oldest xact = the oldest open transaction on the source,"
echo " sampled every second during the copy; chunk s = copy time / chunks)"
echo "transform of the source: $expected"
echo "chunked version:         $actual"
[ "$expected" = "$actual" ] || die "the chunked version differs from the transform of the source"
