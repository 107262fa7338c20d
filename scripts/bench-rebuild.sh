#!/usr/bin/env bash
# Rebuilding a target from archived WAL (replay) next to copying it
# (snapshot) and next to a plain COPY pipe of the same rows, on the same
# private cluster, in one run.
#
#   scripts/bench-rebuild.sh [ROWS] [UPDATES]   (default 1000000 200000)
#
# KEEP=1 keeps the database (and its slots) afterwards to look at.
#
# Workload: `walfill setup` installs the catalog journal, then a table is
# created, loaded with ROWS rows in transactions of 50000, then UPDATES
# updates of scattered rows (transactions of 1000) and ROWS/100 deletes.
# The WAL is archived by the cluster's archive_command.
#
# Baseline: COPY (SELECT transform FROM orders WHERE filter) TO STDOUT |
# COPY FROM STDIN into a table with the same key: the cost of moving the
# final rows once. walfill: `backfill --no-swap --path replay` (decodes the
# whole history of the table from the archive, never reads it), then the
# same transform as a new version with `--path snapshot` (copies the table
# and writes a base snapshot into the archive). Times are whole commands;
# the fill phase alone comes from walfill's own state.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-1000000}"
UPDATES="${2:-200000}"
DB=walfill_bench_rebuild
DIR="$WALFILL_PG_HOME/bench-rebuild"
rm -rf "$DIR"
mkdir -p "$DIR"
SELECT_LIST="id, customer_id, upper(status) AS status, total_cents / 100.0 AS total, date_trunc('day', created_at) AS day"
FILTER="status <> 'test'"
OUT_COLUMNS="id, customer_id, status, total, day"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill (release)"
cargo build --quiet --release --bin walfill
WALFILL="$WALFILL_ROOT/target/release/walfill"

fresh_bench_db "$DB"
value() { pg_psql -d "$DB" -At -c "$1"; }

config() { # version
  cat <<TOML
[source]
url = "$(pg_url "$DB")"
[archive]
url = "file://$WALFILL_PG_ARCHIVE"
[[target]]
name = "bench"
source = "public.orders"
select = "$SELECT_LIST"
where = "$FILTER"
version = "$1"
schema = "derived"
TOML
}
config v1 >"$DIR/v1.toml"
config v2 >"$DIR/v2.toml"
# Set up before the table exists, so the journal records its creation.
sed '/^\[\[target\]\]/,$d' "$DIR/v1.toml" >"$DIR/journal.toml"
WALFILL_CONFIG="$DIR/journal.toml" "$WALFILL" setup >/dev/null

start_lsn=$(value "SELECT pg_current_wal_lsn()")
log "creating orders with $ROWS rows, $UPDATES updates and $((ROWS / 100)) deletes"
pg_psql -d "$DB" -q <<SQL
CREATE TABLE orders (
    id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
    total_cents bigint NOT NULL, created_at timestamptz NOT NULL, note text);
SELECT format('INSERT INTO orders
  SELECT g, g %% 5000, (ARRAY[''open'', ''paid'', ''shipped'', ''test''])[1 + g %% 4], (g * 37) %% 100000,
         timestamptz ''2024-01-01'' + g * interval ''1 second'',
         CASE WHEN g %% 7 = 0 THEN NULL ELSE ''order number '' || g END
    FROM generate_series(%s, %s) g', s, least(s + 49999, $ROWS))
  FROM generate_series(1, $ROWS, 50000) s \gexec
SELECT format('UPDATE orders SET status = ''paid'', total_cents = total_cents + 1
                WHERE id IN (SELECT (x * 7919) %% $ROWS + 1 FROM generate_series(%s, %s) x)',
              s, least(s + 999, $UPDATES))
  FROM generate_series(1, $UPDATES, 1000) s \gexec
SELECT format('DELETE FROM orders WHERE id BETWEEN %s AND %s AND id %% 100 = 3', s, s + 99999)
  FROM generate_series(1, $ROWS, 100000) s \gexec
SQL
value "CHECKPOINT" >/dev/null
end_lsn=$(value "SELECT pg_current_wal_lsn()")
wal_mib=$(value "SELECT round(pg_wal_lsn_diff('$end_lsn', '$start_lsn') / 1048576.0)")
live=$(value "SELECT count(*) FROM orders WHERE $FILTER")

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { print a - b }'; }

log "baseline: COPY (transform) TO STDOUT | COPY FROM STDIN"
value "CREATE TABLE orders_copy AS SELECT $SELECT_LIST FROM orders LIMIT 0;
       ALTER TABLE orders_copy ADD PRIMARY KEY (id)" >/dev/null
start=$(now)
pg_psql -d "$DB" -c "COPY (SELECT $SELECT_LIST FROM orders WHERE $FILTER) TO STDOUT" |
  pg_psql -d "$DB" -c "COPY orders_copy FROM STDIN"
pipe=$(since "$start")

# walfill_run NAME VERSION PATH: whole-command seconds and peak RSS (kB)
walfill_run() {
  WALFILL_CONFIG="$DIR/$2.toml" "$WALFILL" setup >/dev/null
  /usr/bin/time -f '%e %M' -o "$DIR/$1.time" \
    env WALFILL_CONFIG="$DIR/$2.toml" "$WALFILL" backfill bench --no-swap --path "$3" \
    >"$DIR/$1.out" 2>"$DIR/$1.err" || {
    tail -20 "$DIR/$1.err" >&2
    die "walfill backfill --path $3 failed (log: $DIR/$1.err)"
  }
  [ "$(value "SELECT path FROM walfill.versions WHERE version = '$2'")" = "$3" ] ||
    die "version $2 was not built by $3"
}
log "walfill: backfill --path replay"
walfill_run replay v1 replay
log "walfill: backfill --path snapshot (a new version)"
walfill_run snapshot v2 snapshot

# The versions hold tombstones of deleted and filtered-out rows too.
for v in v1 v2; do
  n=$(value "SELECT count(*) FROM derived.bench__$v WHERE NOT _walfill_deleted")
  [ "$n" = "$live" ] || die "version $v holds $n rows, the table $live"
  diff=$(value "SELECT count(*) FROM (
                  (SELECT * FROM orders_copy EXCEPT SELECT $OUT_COLUMNS FROM derived.bench__$v WHERE NOT _walfill_deleted)
                  UNION ALL
                  (SELECT $OUT_COLUMNS FROM derived.bench__$v WHERE NOT _walfill_deleted EXCEPT SELECT * FROM orders_copy)) d")
  [ "$diff" = 0 ] || die "version $v differs from the table in $diff rows"
done
fill() { value "SELECT round(extract(epoch FROM copy_finished_at - copy_started_at)::numeric, 2)
                  FROM walfill.versions WHERE version = '$1'"; }

printf '\n%s rows in the target (%s in history: %s MiB of WAL)\n' "$live" "$ROWS rows, $UPDATES updates" "$wal_mib"
printf '%-40s %9s %9s %10s %8s\n' "" "seconds" "fill s" "peak RSS" "ratio"
awk -v s="$pipe" 'BEGIN { printf "%-40s %9.2f %9s %10s %8.2f\n", "COPY (transform) | COPY FROM STDIN", s, "", "", 1 }'
for run in replay:v1 snapshot:v2; do
  name="${run%%:*}"; version="${run##*:}"
  read -r secs kb <"$DIR/$name.time"
  awk -v n="walfill backfill --path $name" -v s="$secs" -v f="$(fill "$version")" -v kb="$kb" -v p="$pipe" \
    'BEGIN { printf "%-40s %9.2f %9.2f %7.0f MiB %8.2f\n", n, s, f, kb / 1024, p / s }'
done
echo "(ratio = baseline time / this time; seconds are whole commands, fill s the fill phase alone)"
