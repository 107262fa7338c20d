#!/usr/bin/env bash
# Decoding speed and memory of `walfill decode` next to PostgreSQL's own
# logical decoding and pg_waldump, on the same archived WAL, in one run.
#
#   scripts/bench-decode.sh [--pg MAJOR] [ROWS] [SMALL_TRANSACTIONS]
#                                       (default 15, 1000000, 100000)
#
# Workload: a bulk load of ROWS rows in one transaction, then
# SMALL_TRANSACTIONS small transactions of updates, deletes and inserts
# (pgbench, 2 clients). Slots made before it decode the same range: with
# test_decoding through the SQL interface (pg_logical_slot_get_changes),
# and on PostgreSQL 15 also with pg_recvlogical (test_decoding, pgoutput);
# pg_waldump (15 only) reads the same segments; walfill decodes them from
# the plain archive and from a zstd-compressed copy, which is also timed
# decompressing alone with zstd. --pg 16, 17 or 18 runs on that version's
# cluster (the one scripts/test-env.sh starts, from npm's package, which
# has no pg_recvlogical or pg_waldump).
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

MAJOR=15
if [ "${1:-}" = "--pg" ]; then
  MAJOR="$2"
  shift 2
fi
# Client tools (psql, pgbench) are PostgreSQL 15's, which talk to any newer server.
CLIENT="$(pg_bindir)"
if [ "$MAJOR" != 15 ]; then
  WALFILL_PG_HOME="$WALFILL_PG_HOME-$MAJOR"
  WALFILL_PG_PORT=$((WALFILL_PG_PORT + MAJOR - 14))
  WALFILL_PG_DATA="$WALFILL_PG_HOME/data"
  WALFILL_PG_SOCKET="$WALFILL_PG_HOME/socket"
  WALFILL_PG_ARCHIVE="$WALFILL_PG_HOME/archive"
  WALFILL_PG_LOG="$WALFILL_PG_HOME/server.log"
  WALFILL_PG_BINDIR="$("$WALFILL_ROOT/scripts/pg-dist.sh" "$MAJOR")"
  export WALFILL_PG_HOME WALFILL_PG_PORT WALFILL_PG_BINDIR
fi

ROWS="${1:-1000000}"
SMALL="${2:-100000}"
ROUNDS="${ROUNDS:-3}"
DB=walfill_bench_decode
DIR="$WALFILL_PG_HOME/bench-decode"
rm -rf "$DIR"
mkdir -p "$DIR/zst/wal"
BIN="$(pg_bindir)"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill (release)"
cargo build --quiet --release --bin walfill
WALFILL="$WALFILL_ROOT/target/release/walfill"
export PGPASSWORD="$WALFILL_PG_PASSWORD"
conn=(-h 127.0.0.1 -p "$WALFILL_PG_PORT" -U "$WALFILL_PG_SUPERUSER")
value() { pg_psql -d "$DB" -At -c "$1"; }

fresh_bench_db "$DB"
pg_psql -d "$DB" -q <<SQL >/dev/null
CREATE TABLE accounts (
    id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL,
    opened timestamptz NOT NULL, flags int NOT NULL, note text);
CREATE PUBLICATION bench FOR TABLE accounts;
SQL
for round in $(seq 1 "$ROUNDS"); do
  pg_psql -d "$DB" -q <<SQL >/dev/null
SELECT pg_create_logical_replication_slot('bench_td_$round', 'test_decoding');
SELECT pg_create_logical_replication_slot('bench_po_$round', 'pgoutput');
SELECT pg_create_logical_replication_slot('bench_sql_$round', 'test_decoding');
SQL
done
restart="$(value "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'bench_td_1'")"
from="$(value "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'bench_td_1'")"

log "workload: $ROWS rows in one transaction, then $SMALL small transactions"
value "INSERT INTO accounts
       SELECT g, 'owner ' || (g % 10000), (g % 100000) / 100.0,
              timestamptz '2020-01-01' + g * interval '1 minute', g % 7,
              CASE WHEN g % 5 = 0 THEN NULL ELSE 'note for account ' || g END
         FROM generate_series(1, $ROWS) g" >/dev/null
cat >"$DIR/small.sql" <<SQL
\set id random(1, $ROWS)
\set other random(1, $ROWS)
BEGIN;
UPDATE accounts SET balance = balance + 1, flags = flags + 1 WHERE id = :id;
DELETE FROM accounts WHERE id = :other;
INSERT INTO accounts VALUES ($ROWS + :id + 1000000 * :client_id, 'new', 0, now(), 0, NULL)
    ON CONFLICT (id) DO NOTHING;
COMMIT;
SQL
"$CLIENT/pgbench" -n "${conn[@]}" -c 2 -t $((SMALL / 2)) -f "$DIR/small.sql" "$DB" >/dev/null
to="$(value "SELECT pg_current_wal_lsn()")"
first="$(value "SELECT pg_walfile_name('$restart')")"
last="$(value "SELECT pg_walfile_name('$to')")"
value "SELECT pg_switch_wal()" >/dev/null
for _ in $(seq 1 600); do
  [ "$(value "SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")" = t ] && break
  sleep 0.2
done
segments=$(cd "$WALFILL_PG_ARCHIVE/wal" && ls | awk -v f="$first" -v l="$last" 'length($0) == 24 && $0 >= f && $0 <= l')
mkdir -p "$DIR/plain/wal"
for s in $segments; do cp "$WALFILL_PG_ARCHIVE/wal/$s" "$DIR/plain/wal/$s"; done
wal_bytes=$(value "SELECT ('$to'::pg_lsn - '$restart'::pg_lsn)::bigint")
log "range $restart .. $to: $(echo $segments | wc -w) segments, $((wal_bytes / 1048576)) MiB of WAL"
for s in $segments; do zstd -q -3 -c "$DIR/plain/wal/$s" >"$DIR/zst/wal/$s.zst"; done
catalog="$DIR/catalog.json"
"$WALFILL" catalog --source "$(pg_url "$DB")" >"$catalog"
echo "$restart $from $to" >"$DIR/range"
decode_args=(decode --catalog "$catalog" --restart-from "$restart" --from "$from" --to "$to" --format test_decoding)
# The server's own writes of the workload are done before anything is timed.
value "CHECKPOINT" >/dev/null
sync

# time_of NAME COMMAND...: wall seconds and peak RSS (kB) into $DIR/NAME.*,
# kept when this run is the fastest so far.
time_of() {
  local name=$1; shift
  /usr/bin/time -f '%e %M' -o "$DIR/$name.try" "$@" >"$DIR/$name.out" 2>"$DIR/$name.err" ||
    { cat "$DIR/$name.err" >&2; die "$name failed"; }
  if [ ! -f "$DIR/$name.time" ] ||
    awk '{ t = $1 } END { exit !(t < best) }' best="$(cut -d' ' -f1 "$DIR/$name.time")" "$DIR/$name.try"; then
    mv "$DIR/$name.try" "$DIR/$name.time"
  fi
}

for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS on PostgreSQL $MAJOR: the server's decoding, zstd -d, walfill decode (plain, zstd)"
  time_of sql_td "$CLIENT/psql" -X -At "${conn[@]}" -d "$DB" \
    -c "SELECT data FROM pg_logical_slot_get_changes('bench_sql_$round', '$to', NULL)"
  if [ "$MAJOR" = 15 ]; then
    time_of recv_td "$BIN/pg_recvlogical" "${conn[@]}" -d "$DB" --slot "bench_td_$round" --start --endpos "$to" -f - --no-loop
    time_of recv_po "$BIN/pg_recvlogical" "${conn[@]}" -d "$DB" --slot "bench_po_$round" --start --endpos "$to" -f - --no-loop \
      -o proto_version=1 -o publication_names=bench
    time_of waldump "$BIN/pg_waldump" -p "$DIR/plain/wal" "$first" "$last"
    time_of waldump_q "$BIN/pg_waldump" -q -p "$DIR/plain/wal" "$first" "$last"
  fi
  time_of unzstd sh -c "cat $DIR/zst/wal/*.zst | zstd -q -d -c"
  time_of walfill_plain "$WALFILL" "${decode_args[@]}" --archive "file://$DIR/plain"
  time_of walfill_zst "$WALFILL" "${decode_args[@]}" --archive "file://$DIR/zst"
done
cmp -s "$DIR/sql_td.out" "$DIR/walfill_plain.out" &&
  log "walfill's output is identical to PostgreSQL $MAJOR's test_decoding" ||
  log "WARNING: walfill's output differs from PostgreSQL $MAJOR's test_decoding"
changes=$(grep -c '^table ' "$DIR/walfill_plain.out" || true)

secs() { cut -d' ' -f1 "$DIR/$1.time"; }
rss() { cut -d' ' -f2 "$DIR/$1.time"; }
printf '\nPostgreSQL %s: %s MiB of WAL, %s changes (%s rows bulk-loaded, %s small transactions); fastest of %s runs\n\n' \
  "$MAJOR" "$((wal_bytes / 1048576))" "$changes" "$ROWS" "$SMALL" "$ROUNDS"
printf '%-42s %8s %10s %12s %9s %9s\n' "" "seconds" "WAL MB/s" "changes/s" "peak MiB" "walfill x"
row() { # label name [baseline-name]
  awk -v label="$1" -v s="$(secs "$2")" -v m="$(rss "$2")" -v b="$wal_bytes" -v c="$changes" \
      -v w="$(secs walfill_plain)" \
    'BEGIN { printf "%-42s %8.2f %10.1f %12.0f %9.1f %9.2f\n", label, s, b / 1048576 / s, c / s, m / 1024, s / w }'
}
row "pg_logical_slot_get_changes, test_decoding" sql_td
if [ "$MAJOR" = 15 ]; then
  row "pg_recvlogical, test_decoding" recv_td
  row "pg_recvlogical, pgoutput" recv_po
  row "pg_waldump (records printed)" waldump
  row "pg_waldump -q (records read only)" waldump_q
fi
row "zstd -d (compressed segments)" unzstd
row "walfill decode, plain segments" walfill_plain
row "walfill decode, zstd segments" walfill_zst
echo "(walfill x = that row's time / walfill's time on plain segments: above 1 means walfill is faster)"
