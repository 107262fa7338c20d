#!/usr/bin/env bash
# Copy throughput of a snapshot backfill next to a plain COPY pipe of the same
# table, on the same private cluster, in one run.
#
#   scripts/bench-copy.sh [ROWS]     (default 1000000)
#
# Baseline: COPY orders TO STDOUT | COPY orders_copy FROM STDIN, into a table
# with the same columns and primary key. walfill: `backfill --no-swap` of an
# identity transform (select = "*") and of a computing one; the copy phase's
# time comes from walfill's own state (copy_started_at .. copy_finished_at).
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-1000000}"
DB=walfill_bench
DIR="$WALFILL_PG_HOME/bench"
mkdir -p "$DIR"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill (release)"
cargo build --quiet --release --bin walfill
WALFILL="$WALFILL_ROOT/target/release/walfill"

log "creating $DB with $ROWS rows"
fresh_bench_db "$DB"
create_bench_orders "$DB" "$ROWS"

now() { date +%s.%N; }

log "baseline: COPY TO STDOUT | COPY FROM STDIN"
start=$(now)
pg_psql -d "$DB" -c "COPY orders TO STDOUT" | pg_psql -d "$DB" -c "COPY orders_copy FROM STDIN"
pipe=$(awk -v a="$(now)" -v b="$start" 'BEGIN { print a - b }')

run_walfill() { # name select
  cat >"$DIR/$1.toml" <<TOML
[source]
url = "$(pg_url "$DB")"
[[target]]
name = "$1"
source = "public.orders"
select = "$2"
version = "v1"
TOML
  WALFILL_CONFIG="$DIR/$1.toml" "$WALFILL" setup >/dev/null
  WALFILL_CONFIG="$DIR/$1.toml" "$WALFILL" backfill "$1" --no-swap 2>/dev/null
  pg_psql -d "$DB" -At -c "SELECT extract(epoch FROM copy_finished_at - copy_started_at)
                    FROM walfill.versions WHERE target = '$1'"
}
log "walfill: identity transform"
identity=$(run_walfill bench_identity "*")
log "walfill: computing transform"
computed=$(run_walfill bench_computed \
  "id, customer_id, upper(status) AS status, total_cents / 100.0 AS total, date_trunc('day', created_at) AS day")

printf '\n%-44s %10s %12s %8s\n' "copy of $ROWS rows" "seconds" "rows/s" "ratio"
for line in "COPY TO STDOUT | COPY FROM STDIN:$pipe" \
            "walfill backfill, select *:$identity" \
            "walfill backfill, computing select:$computed"; do
  name="${line%%:*}"; secs="${line##*:}"
  awk -v n="$name" -v s="$secs" -v r="$ROWS" -v p="$pipe" \
    'BEGIN { printf "%-44s %10.2f %12.0f %8.2f\n", n, s, r / s, p / s }'
done
echo "(ratio = baseline time / this time; 1.00 means as fast as the plain COPY pipe)"
