#!/usr/bin/env bash
# Live apply: `walfill sync --once` catching a version up on a backlog, next
# to PostgreSQL's own logical replication (a subscription into a plain copy
# of the table) catching up on the same backlog, in one run.
#
#   scripts/bench-apply.sh [TRANSACTIONS] [ROWS] [ROUNDS]   (default 60000 200000 3)
#
# A keyed table of ROWS rows; a subscription (in another database of the
# cluster) and a walfill version of it (an identity transform) are both
# built and caught up, then stopped. Each round, pgbench writes
# TRANSACTIONS small transactions (each updating two random rows) while
# both consumers are stopped; then each catches up in turn (the order
# alternates between rounds) and is timed from start to the source's WAL
# position after pgbench. Printed: each round's times and the medians,
# and the ratio (subscription time / walfill time: 1.00 means as fast).
# Afterwards the version's view and the subscriber's copy are compared
# with the source.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

TXNS="${1:-60000}"
ROWS="${2:-200000}"
ROUNDS="${3:-3}"
DB=walfill_bench_apply
SUB=walfill_bench_apply_sub
DIR="$WALFILL_PG_HOME/bench-apply"
rm -rf "$DIR"
mkdir -p "$DIR"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill (release)"
cargo build --quiet --release --bin walfill
WALFILL="$WALFILL_ROOT/target/release/walfill"
value() { pg_psql -d "$DB" -At -c "$1"; }
sub_value() { pg_psql -d "$SUB" -At -c "$1"; }

drop_all() {
  pg_psql -d "$SUB" -q -c "ALTER SUBSCRIPTION bench_apply DISABLE" 2>/dev/null || true
  pg_psql -d "$SUB" -q -c "ALTER SUBSCRIPTION bench_apply SET (slot_name = NONE)" 2>/dev/null || true
  pg_psql -d "$SUB" -q -c "DROP SUBSCRIPTION IF EXISTS bench_apply" 2>/dev/null || true
  drop_bench_db "$SUB"
  drop_bench_db "$DB"
}
drop_all
pg_psql -d postgres -q -c "CREATE DATABASE $DB" -c "CREATE DATABASE $SUB"
[ -n "${KEEP:-}" ] || trap drop_all EXIT

log "creating $DB with $ROWS rows, a subscription and a walfill version of it"
pg_psql -d "$DB" -q <<SQL
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, note text);
INSERT INTO accounts SELECT g, g * 10, 'account ' || g FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE accounts;
CREATE PUBLICATION bench_native FOR TABLE accounts;
SELECT pg_create_logical_replication_slot('bench_apply', 'pgoutput');
SQL
pg_psql -d "$SUB" -q <<SQL
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, note text);
CREATE SUBSCRIPTION bench_apply CONNECTION '$(pg_url "$DB")' PUBLICATION bench_native
  WITH (create_slot = false, slot_name = 'bench_apply', copy_data = true);
SQL
cat >"$DIR/walfill.toml" <<TOML
[source]
url = "$(pg_url "$DB")"
[[target]]
name = "accounts_v"
source = "public.accounts"
select = "*"
version = "v1"
TOML
export WALFILL_CONFIG="$DIR/walfill.toml"
"$WALFILL" setup >/dev/null
"$WALFILL" backfill accounts_v 2>"$DIR/backfill.log" || die "backfill failed; see $DIR/backfill.log"

# Waits until the subscription has confirmed $1; prints nothing.
sub_caught_up() {
  until [ "$(value "SELECT confirmed_flush_lsn >= '$1' FROM pg_replication_slots
                     WHERE slot_name = 'bench_apply'")" = t ]; do
    sleep 0.05
  done
}
log "waiting for the subscription's first copy"
until [ "$(sub_value "SELECT bool_and(srsubstate = 'r') FROM pg_subscription_rel")" = t ]; do
  sleep 0.2
done
sub_caught_up "$(value "SELECT pg_current_wal_lsn()")"

cat >"$DIR/writes.sql" <<SQL
\set a random(1, $ROWS)
\set b random(1, $ROWS)
BEGIN;
UPDATE accounts SET balance = balance + 1 WHERE id = :a;
UPDATE accounts SET balance = balance - 1 WHERE id = :b;
END;
SQL
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { print a - b }'; }

time_subscription() { # until
  local start
  start=$(now)
  pg_psql -d "$SUB" -q -c "ALTER SUBSCRIPTION bench_apply ENABLE"
  sub_caught_up "$1"
  since "$start"
  pg_psql -d "$SUB" -q -c "ALTER SUBSCRIPTION bench_apply DISABLE"
}
time_walfill() {
  local start
  start=$(now)
  "$WALFILL" sync --once 2>>"$DIR/sync.log" || die "sync failed; see $DIR/sync.log"
  since "$start"
}

pg_psql -d "$SUB" -q -c "ALTER SUBSCRIPTION bench_apply DISABLE"
sleep 1
native=() walfill=()
for round in $(seq 1 "$ROUNDS"); do
  log "round $round: $TXNS transactions by pgbench, both consumers stopped"
  "$(pg_bindir)/pgbench" -n -c 1 -t "$TXNS" -f "$DIR/writes.sql" "$(pg_url "$DB")" \
    >"$DIR/pgbench.log" 2>&1 || die "pgbench failed; see $DIR/pgbench.log"
  until=$(value "SELECT pg_current_wal_lsn()")
  if [ $((round % 2)) -eq 1 ]; then
    n=$(time_subscription "$until"); w=$(time_walfill)
  else
    w=$(time_walfill); n=$(time_subscription "$until")
  fi
  log "round $round: subscription ${n}s, walfill ${w}s"
  native+=("$n") walfill+=("$w")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mn=$(median "${native[@]}") mw=$(median "${walfill[@]}")

log "comparing both copies with the source"
pg_psql -d "$SUB" -q -c "ALTER SUBSCRIPTION bench_apply ENABLE"
sub_caught_up "$(value "SELECT pg_current_wal_lsn()")"
"$WALFILL" sync --once 2>>"$DIR/sync.log"
SUMMARY="count(*) || ' rows, hash sum ' || coalesce(sum(hashtext(t::text)::numeric), 0)"
source=$(value "SELECT $SUMMARY FROM (SELECT * FROM accounts) t")
view=$(value "SELECT $SUMMARY FROM (SELECT * FROM public.accounts_v) t")
copy=$(sub_value "SELECT $SUMMARY FROM (SELECT * FROM accounts) t")

printf '\n%-48s %10s %12s\n' "catching up on $TXNS transactions ($ROUNDS rounds)" "median s" "txns/s"
printf '%-48s %10.2f %12.0f\n' "native subscription (pgoutput, apply worker)" "$mn" \
  "$(awk -v t="$TXNS" -v s="$mn" 'BEGIN { print t / s }')"
printf '%-48s %10.2f %12.0f\n' "walfill sync --once" "$mw" \
  "$(awk -v t="$TXNS" -v s="$mw" 'BEGIN { print t / s }')"
echo "rounds: subscription ${native[*]} s; walfill ${walfill[*]} s"
awk -v n="$mn" -v w="$mw" 'BEGIN { printf "walfill apply rate / subscription apply rate: %.2f\n", n / w }'
echo "source: $source"
echo "view:   $view"
echo "copy:   $copy"
[ "$source" = "$view" ] || die "the walfill view differs from the source"
[ "$source" = "$copy" ] || die "the subscriber's copy differs from the source"
