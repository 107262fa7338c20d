#!/usr/bin/env bash
# A replay with another database's WAL in its range, next to the same
# replay without it, on the same private cluster, runs alternating.
#
#   scripts/bench-unrelated.sh [ROWS] [FACTOR] [RUNS]   (default 200000 10 3)
#
# Two source databases get the same table with the same history: ROWS rows
# loaded in five parts, each part followed by ROWS/10 updates. In the
# "noisy" one, after each part a third database writes FACTOR times the WAL
# that part wrote (inserts of 20000 rows a transaction), so the table's
# changes are spread over a range of WAL FACTOR + 1 times as long; the
# "quiet" one is loaded after, with nothing else writing. Each replays from
# its table's creation (base snapshots off) to a boundary after both, so
# the noisy replay's range also holds the quiet table's history: more WAL
# of another database.
#
# Summaries are built first, as the archiver builds them as segments
# arrive: the cluster's archive_command here is a plain copy, so one
# untimed replay of the noisy table reads every segment whole and stores
# their summaries (it is printed apart). Then RUNS runs alternate a replay
# of each; printed: median whole-command seconds of each, their ratio (the
# goal: at most 1.2), and what the noisy replay read whole and what from
# summaries (the `filled` event).
#
# KEEP=1 keeps the databases (and their slots) afterwards to look at.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-200000}"
FACTOR="${2:-10}"
RUNS="${3:-3}"
QUIET=walfill_bench_quiet
NOISY=walfill_bench_noisy
OTHER=walfill_bench_other
DEST=walfill_bench_unrelated_dest
DIR="$WALFILL_PG_HOME/bench-unrelated"
rm -rf "$DIR"
mkdir -p "$DIR"
SELECT_LIST="id, customer_id, upper(status) AS status, total_cents / 100.0 AS total"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
dest_cluster_up
bench_build
for db in $QUIET $NOISY $OTHER; do
  drop_bench_db "$db"
  pg_psql -d postgres -q -c "CREATE DATABASE $db"
done
fresh_dest_db "$DEST"
if [ -z "${KEEP:-}" ]; then
  trap 'for db in $QUIET $NOISY $OTHER; do drop_bench_db $db; done; drop_dest_db $DEST' EXIT
fi
value() { pg_psql -d "$1" -At -c "$2"; }
dest() { dest_psql -d "$DEST" -At -c "$1"; }

config() { # database version
  cat <<TOML
[source]
url = "$(pg_url "$1")"
[destination]
url = "$(dest_url "$DEST")"
[archive]
url = "file://$WALFILL_PG_ARCHIVE"
base_snapshots = false
[[target]]
name = "$1"
source = "public.orders"
select = "$SELECT_LIST"
version = "$2"
schema = "derived"
TOML
}
for db in $QUIET $NOISY; do
  config "$db" v >"$DIR/$db.toml"
  # Set up before the table exists, so the journal records its creation.
  sed '/^\[\[target\]\]/,$d' "$DIR/$db.toml" >"$DIR/$db.journal.toml"
  WALFILL_CONFIG="$DIR/$db.journal.toml" "$WALFILL" setup >/dev/null
done
value "$OTHER" "CREATE TABLE filler (id int, pad text)" >/dev/null

# load DB NOISE: the table's history; with NOISE, the other database
# writes FACTOR times each part's WAL after it.
load() {
  local db="$1" noise="$2" part=$((ROWS / 5)) from lsn written
  # A checkpoint logs the running transactions: a restart point just
  # before the table's creation, as a busy cluster's background writer
  # logs one every 15 s.
  value "$db" "CHECKPOINT" >/dev/null
  value "$db" "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL,
                 status text NOT NULL, total_cents bigint NOT NULL, note text)" >/dev/null
  for p in 0 1 2 3 4; do
    from=$((p * part + 1))
    lsn=$(value "$db" "SELECT pg_current_wal_lsn()")
    pg_psql -d "$db" -q <<SQL
INSERT INTO orders SELECT g, g % 5000, (ARRAY['open', 'paid', 'shipped'])[1 + g % 3], (g * 37) % 100000,
       'order number ' || g FROM generate_series($from, $((from + part - 1))) g;
UPDATE orders SET status = 'paid', total_cents = total_cents + 1
 WHERE id BETWEEN $from AND $((from + part - 1)) AND id % 2 = 0;
SQL
    [ -n "$noise" ] || continue
    written=$(value "$db" "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn')::bigint")
    pg_psql -d "$OTHER" -q <<SQL
DO \$\$
DECLARE
  start pg_lsn := pg_current_wal_lsn();
  n int := 0;
BEGIN
  WHILE pg_wal_lsn_diff(pg_current_wal_lsn(), start) < $FACTOR * $written LOOP
    INSERT INTO filler SELECT g, repeat(md5(g::text), 8) FROM generate_series(n, n + 19999) g;
    n := n + 20000;
    COMMIT;
  END LOOP;
END
\$\$;
SQL
  done
}
start=$(value postgres "SELECT pg_current_wal_lsn()")
log "the noisy table: $ROWS rows, each fifth followed by $FACTOR times its WAL in $OTHER"
load "$NOISY" 1
middle=$(value postgres "SELECT pg_current_wal_lsn()")
log "the quiet table: the same history, nothing else writing"
load "$QUIET" ""
value postgres "SELECT pg_switch_wal()" >/dev/null
value postgres "CHECKPOINT" >/dev/null
end=$(value postgres "SELECT pg_current_wal_lsn()")
mib() { value postgres "SELECT round(pg_wal_lsn_diff('$2', '$1') / 1048576.0)"; }
for db in $QUIET $NOISY; do
  WALFILL_CONFIG="$DIR/$db.toml" "$WALFILL" setup >/dev/null
done

# replay DB RUN: "seconds kib whole summarized"
replay() {
  forget_version "$1" v "$DEST"
  timed "$DIR/$1.$2.time" env WALFILL_CONFIG="$DIR/$1.toml" \
    "$WALFILL" backfill "$1" --no-swap --path replay >"$DIR/$1.$2.out" 2>"$DIR/$1.$2.err" || {
    tail -20 "$DIR/$1.$2.err" >&2
    die "the replay of $1 failed (log: $DIR/$1.$2.err)"
  }
  local n counts
  n=$(dest "SELECT count(*) FROM derived.\"$1__v\" WHERE NOT _walfill_deleted")
  [ "$n" = "$ROWS" ] || die "the version of $1 holds $n rows, not $ROWS"
  counts=$(dest "SELECT (detail->>'segments_read') || ' ' || (detail->>'segments_summarized')
                 FROM walfill.events WHERE target = '$1' AND kind = 'filled'
                 ORDER BY id DESC LIMIT 1")
  read -r secs kib <"$DIR/$1.$2.time"
  echo "$secs $kib $counts"
}

log "the first replay of the noisy table reads every segment whole and summarizes them"
replay "$NOISY" 0 >"$DIR/first"
for run in $(seq 1 "$RUNS"); do
  log "run $run of $RUNS"
  replay "$QUIET" "$run" >>"$DIR/quiet"
  replay "$NOISY" "$run" >>"$DIR/noisy"
done

col() { awk -v c="$2" '{ print $c }' "$DIR/$1" | median; }
q=$(col quiet 1)
printf '\n%s rows; the noisy table'"'"'s range: %s MiB of WAL (%s MiB of it its own history); the quiet one'"'"'s: %s MiB; medians of %s runs\n' \
  "$ROWS" "$(mib "$start" "$end")" "$(mib "$start" "$middle")" "$(mib "$middle" "$end")" "$RUNS"
printf '%-44s %9s %7s %9s %9s %11s\n' "" "seconds" "ratio" "peak MiB" "segments" "summarized"
for what in quiet noisy first; do
  awk -v n="replay, $what$([ "$what" = first ] && echo ' (building summaries)')" \
    -v s="$(col "$what" 1)" -v k="$(col "$what" 2)" -v w="$(col "$what" 3)" -v m="$(col "$what" 4)" -v q="$q" \
    'BEGIN { printf "%-44s %9.2f %7.2f %9.0f %9d %11d\n", n, s, s / q, k / 1024, w, m }'
done
echo "(ratio = the replay's whole-command seconds / the quiet replay's; segments: read whole;"
echo " summarized: taken from their summary alone)"
