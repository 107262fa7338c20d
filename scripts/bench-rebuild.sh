#!/usr/bin/env bash
# Rebuilding a target from archived WAL (replay) next to copying it
# (snapshot) and next to a plain binary COPY pipe of the same final rows,
# on the same private cluster, runs alternating.
#
#   scripts/bench-rebuild.sh [--from-base] [ROWS] [UPDATES] [RUNS]   (default 1000000 200000 3)
#
# --from-base: the table is loaded, then a base snapshot of it is taken
# (a snapshot backfill in the exported snapshot, which leaves one in the
# archive), then the updates and deletes are written: each replay starts
# from that base and decodes only the WAL after it (the replays themselves
# leave no base, so every run starts from the same one). Last, `walfill
# compact` rolls that base forward, timed, with its peak RSS, checked to
# read no source row and to create no slot.
#
# KEEP=1 keeps the databases (and their slots) afterwards to look at.
#
# Workload: `walfill setup` installs the catalog journal, then a table is
# created, loaded with ROWS rows in transactions of 50000, then UPDATES
# updates of scattered rows (transactions of 1000) and ROWS/100 deletes.
# The WAL is archived by the cluster's archive_command. The versions go to
# a second cluster (scripts/bench-lib.sh), as a destination would be, so
# that one run's writes are not WAL the next run's replay must read.
#
# Baseline: COPY (SELECT transform FROM orders WHERE filter) TO STDOUT
# (FORMAT binary) | COPY FROM STDIN (FORMAT binary) into a table with the
# same key: the cost of moving the final rows once. walfill, each run: a
# new version by `backfill --no-swap --path replay` (decodes the table's
# whole history from the archive and never reads it; base snapshots are
# off, so every replay starts from the table's creation), then one by
# `--path snapshot`. Printed per line, medians of the runs: whole-command
# seconds and the ratio of the pipe's time to it (the goal for replay:
# at most 1.2 times the pipe's), the fill phase alone (walfill's own
# state), peak RSS, the WAL the destination wrote during the command, and
# temporary disk (the replay's spilled runs at their peak, and the
# destination's temporary files).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
cd "$WALFILL_ROOT"

FROM_BASE=""
if [ "${1:-}" = "--from-base" ]; then
  FROM_BASE=1
  shift
fi
ROWS="${1:-1000000}"
UPDATES="${2:-200000}"
RUNS="${3:-3}"
DB=walfill_bench_rebuild
DEST=walfill_bench_rebuild_dest
DIR="$WALFILL_PG_HOME/bench-rebuild"
rm -rf "$DIR"
mkdir -p "$DIR"
SELECT_LIST="id, customer_id, upper(status) AS status, total_cents / 100.0 AS total, date_trunc('day', created_at) AS day"
FILTER="status <> 'test'"
OUT_COLUMNS="id, customer_id, status, total, day"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
dest_cluster_up
bench_build
fresh_dest_db "$DEST"
fresh_bench_db "$DB"
if [ -z "${KEEP:-}" ]; then
  trap 'drop_bench_db $DB; drop_dest_db $DEST' EXIT
fi
value() { pg_psql -d "$DB" -At -c "$1"; }
dest() { dest_psql -d "$DEST" -At -c "$1"; }

config() { # version
  cat <<TOML
[source]
url = "$(pg_url "$DB")"
[destination]
url = "$(dest_url "$DEST")"
[archive]
url = "file://$WALFILL_PG_ARCHIVE"
base_snapshots = false
[[target]]
name = "bench"
source = "public.orders"
select = "$SELECT_LIST"
where = "$FILTER"
version = "$1"
schema = "derived"
TOML
}
config replay >"$DIR/replay.toml"
config snapshot >"$DIR/snapshot.toml"
# The version whose exported-snapshot copy leaves the base (--from-base).
config base | sed 's/^base_snapshots = false/base_snapshots = true/' >"$DIR/base.toml"
printf '[backfill]\nsnapshot = "exported"\n' >>"$DIR/base.toml"
# Set up before the table exists, so the journal records its creation.
sed '/^\[\[target\]\]/,$d' "$DIR/replay.toml" >"$DIR/journal.toml"
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
SQL
if [ -n "$FROM_BASE" ]; then
  log "taking a base snapshot of the $ROWS rows (a snapshot backfill in the exported snapshot)"
  WALFILL_CONFIG="$DIR/base.toml" "$WALFILL" setup >/dev/null
  WALFILL_CONFIG="$DIR/base.toml" "$WALFILL" backfill bench --no-swap --path snapshot \
    >"$DIR/base.out" 2>"$DIR/base.err" || die "the base-taking backfill failed (log: $DIR/base.err)"
  grep -q "base snapshot written" "$DIR/base.err" || die "no base snapshot written (log: $DIR/base.err)"
  # The base stays in the archive; the version and its slot go.
  WALFILL_CONFIG="$DIR/base.toml" "$WALFILL" retire bench base >/dev/null
  start_lsn=$(value "SELECT pg_current_wal_lsn()")
fi
pg_psql -d "$DB" -q <<SQL
SELECT format('UPDATE orders SET status = ''paid'', total_cents = total_cents + 1
                WHERE id IN (SELECT (x::bigint * 7919) %% $ROWS + 1 FROM generate_series(%s, %s) x)',
              s, least(s + 999, $UPDATES))
  FROM generate_series(1, $UPDATES, 1000) s \gexec
SELECT format('DELETE FROM orders WHERE id BETWEEN %s AND %s AND id %% 100 = 3', s, s + 99999)
  FROM generate_series(1, $ROWS, 100000) s \gexec
VACUUM ANALYZE orders;
SQL
value "CHECKPOINT" >/dev/null
end_lsn=$(value "SELECT pg_current_wal_lsn()")
wal_mib=$(value "SELECT round(pg_wal_lsn_diff('$end_lsn', '$start_lsn') / 1048576.0)")
live=$(value "SELECT count(*) FROM orders WHERE $FILTER")
dest "CREATE TABLE orders_copy (id bigint PRIMARY KEY, customer_id int, status text, total numeric, day timestamptz)" >/dev/null
for v in replay snapshot; do
  WALFILL_CONFIG="$DIR/$v.toml" "$WALFILL" setup >/dev/null
done

# pipe: "seconds wal_mib temp_mib"
pipe() { copy_pipe "$DB" "SELECT $SELECT_LIST FROM orders WHERE $FILTER" "$DEST" orders_copy; }

# walfill PATH RUN: "seconds fill_seconds kib wal_mib temp_mib"
walfill() {
  forget_version bench "$1" "$DEST"
  local lsn temp
  lsn=$(dest_wal_lsn)
  temp=$(dest_temp_bytes "$DEST")
  timed "$DIR/$1.$2.time" env WALFILL_CONFIG="$DIR/$1.toml" \
    "$WALFILL" backfill bench --no-swap --path "$1" >"$DIR/$1.$2.out" 2>"$DIR/$1.$2.err" || {
    tail -20 "$DIR/$1.$2.err" >&2
    die "walfill backfill --path $1 failed (log: $DIR/$1.$2.err)"
  }
  [ "$(dest "SELECT path FROM walfill.versions WHERE version = '$1'")" = "$1" ] ||
    die "version $1 was not built by $1"
  if [ -n "$FROM_BASE" ] && [ "$1" = replay ]; then
    [ "$(dest "SELECT replay_base->>'kind' FROM walfill.versions WHERE version = 'replay'")" = snapshot ] ||
      die "the replay did not start from the base snapshot"
  fi
  local fill spilled
  fill=$(dest "SELECT extract(epoch FROM copy_finished_at - copy_started_at)
                 FROM walfill.versions WHERE version = '$1'")
  spilled=$(dest "SELECT coalesce(max((detail->>'spilled_peak_bytes')::bigint), 0) FROM walfill.events
                   WHERE version = '$1' AND kind = 'filled'")
  read -r secs kib <"$DIR/$1.$2.time"
  echo "$secs $fill $kib $(dest_wal_mib_since "$lsn") $(dest_temp_mib_since "$DEST" "$temp" "$spilled")"
  # The version holds the table's rows, transformed (tombstones aside).
  local n diff
  n=$(dest "SELECT count(*) FROM derived.bench__$1 WHERE NOT _walfill_deleted")
  [ "$n" = "$live" ] || die "version $1 holds $n rows, the table $live"
  diff=$(dest "SELECT count(*) FROM (
                 (SELECT * FROM orders_copy EXCEPT SELECT $OUT_COLUMNS FROM derived.bench__$1 WHERE NOT _walfill_deleted)
                 UNION ALL
                 (SELECT $OUT_COLUMNS FROM derived.bench__$1 WHERE NOT _walfill_deleted EXCEPT SELECT * FROM orders_copy)) d")
  [ "$diff" = 0 ] || die "version $1 differs from the table in $diff rows"
}

for run in $(seq 1 "$RUNS"); do
  log "run $run of $RUNS"
  pipe >>"$DIR/pipe"
  walfill replay "$run" >>"$DIR/replay"
  walfill snapshot "$run" >>"$DIR/snapshot"
done

col() { awk -v c="$2" '{ print $c }' "$DIR/$1" | median; }
p=$(col pipe 1)
printf '\n%s rows in the target (%s rows, %s updates in history: %s MiB of WAL%s); medians of %s runs\n' \
  "$live" "$ROWS" "$UPDATES" "$wal_mib" "${FROM_BASE:+ after the base, which the replay starts from}" "$RUNS"
printf '%-40s %9s %7s %9s %9s %9s %9s\n' "" "seconds" "ratio" "fill s" "peak MiB" "WAL MiB" "temp MiB"
awk -v s="$p" -v w="$(col pipe 2)" -v t="$(col pipe 3)" \
  'BEGIN { printf "%-40s %9.2f %7.2f %9s %9s %9.0f %9.1f\n", "binary COPY (transform) | COPY", s, 1, "", "", w, t }'
for path in replay snapshot; do
  awk -v n="walfill backfill --path $path" -v s="$(col "$path" 1)" -v f="$(col "$path" 2)" \
    -v k="$(col "$path" 3)" -v w="$(col "$path" 4)" -v t="$(col "$path" 5)" -v p="$p" \
    'BEGIN { printf "%-40s %9.2f %7.2f %9.2f %9.0f %9.0f %9.1f\n", n, s, s / p, f, k / 1024, w, t }'
done
if [ -n "$FROM_BASE" ]; then
  # Compaction of the same base: its rows and the WAL since, folded into a
  # new base from the archive alone (no source row read, no slot made).
  value "SELECT pg_switch_wal()" >/dev/null
  value "CHECKPOINT" >/dev/null
  value "SELECT pg_switch_wal()" >/dev/null
  sleep 2
  scans="SELECT seq_scan + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'orders'"
  scans_before=$(value "$scans")
  slots_before=$(value "SELECT count(*) FROM pg_replication_slots")
  timed "$DIR/compact.time" env WALFILL_CONFIG="$DIR/base.toml" "$WALFILL" compact bench \
    >"$DIR/compact.out" 2>"$DIR/compact.err" || die "walfill compact failed (log: $DIR/compact.err)"
  grep -q "a new base at" "$DIR/compact.out" || die "no new base: $(cat "$DIR/compact.out")"
  [ "$(value "$scans")" = "$scans_before" ] || die "the compaction read the source table"
  [ "$(value "SELECT count(*) FROM pg_replication_slots")" = "$slots_before" ] ||
    die "the compaction created a slot"
  read -r secs kib <"$DIR/compact.time"
  awk -v s="$secs" -v k="$kib" -v p="$p" \
    'BEGIN { printf "%-40s %9.2f %7.2f %9s %9.0f   (no source row read, no slot)\n", "walfill compact (the base + WAL since)", s, s / p, "", k / 1024 }'
fi
echo "(ratio = walfill's whole-command seconds / the pipe's; seconds are whole commands, fill s the"
echo " fill phase alone; WAL: what the destination cluster wrote during the command; temp: spilled runs at their"
echo " peak and the destination's temporary files)"
