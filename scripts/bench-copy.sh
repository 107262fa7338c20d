#!/usr/bin/env bash
# A snapshot backfill's fill next to a plain binary COPY pipe of the same
# rows, on the same private cluster, runs alternating.
#
#   scripts/bench-copy.sh [ROWS] [RUNS]     (default 1000000 3)
#
# SNAPSHOT=exported|chunked picks how walfill reads (default: walfill's own
# choice, auto: exported up to a million rows, chunked above). KEEP=1 keeps
# the databases.
#
# The table (six columns, bigint key) is in the private cluster and the
# versions go to a second cluster (scripts/bench-lib.sh), as a destination
# would be. Each run, in turn:
#   - baseline: COPY (SELECT transform FROM orders) TO STDOUT (FORMAT binary)
#     | COPY copy FROM STDIN (FORMAT binary), into a table with the same key;
#   - walfill: `backfill --no-swap` of a new version with that transform;
#   - the same two with the identity transform (select = "*").
# Printed per line, medians of the runs: the fill's seconds (walfill's copy
# phase, from its own state; the pipe's whole time), rows per second, the
# ratio of throughputs (pipe time / walfill time), walfill's whole-command
# seconds, its peak RSS, the WAL the destination cluster wrote during the
# command and the temporary files the destination wrote.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
cd "$WALFILL_ROOT"

ROWS="${1:-1000000}"
RUNS="${2:-3}"
SRC=walfill_bench
DEST=walfill_bench_dest
DIR="$WALFILL_PG_HOME/bench"
rm -rf "$DIR"
mkdir -p "$DIR"
COMPUTED="id, customer_id, upper(status) AS status, total_cents / 100.0 AS total, date_trunc('day', created_at) AS day"

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
dest_psql -d "$DEST" -q <<SQL
CREATE TABLE copy_computed (id bigint PRIMARY KEY, customer_id int, status text, total numeric, day timestamptz);
CREATE TABLE copy_identity (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
                            total_cents bigint NOT NULL, created_at timestamptz NOT NULL, note text);
SQL

config() { # name select
  cat <<TOML
[source]
url = "$(pg_url "$SRC")"
[destination]
url = "$(dest_url "$DEST")"
[backfill]
snapshot = "${SNAPSHOT:-auto}"
[[target]]
name = "$1"
source = "public.orders"
select = "$2"
version = "v1"
TOML
}
config computed "$COMPUTED" >"$DIR/computed.toml"
config identity "*" >"$DIR/identity.toml"
for name in computed identity; do
  WALFILL_CONFIG="$DIR/$name.toml" "$WALFILL" setup >/dev/null
done

# pipe NAME SELECT: "seconds wal_mib temp_mib" on stdout
pipe() { copy_pipe "$SRC" "SELECT $2 FROM orders" "$DEST" "copy_$1"; }

# walfill NAME RUN: "fill_seconds seconds kib wal_mib temp_mib" on stdout
walfill() {
  forget_version "$1" v1 "$DEST"
  local lsn temp fill
  lsn=$(dest_wal_lsn)
  temp=$(dest_temp_bytes "$DEST")
  timed "$DIR/$1.$2.time" env WALFILL_CONFIG="$DIR/$1.toml" "$WALFILL" backfill "$1" --no-swap \
    >"$DIR/$1.$2.out" 2>"$DIR/$1.$2.err" || {
    tail -20 "$DIR/$1.$2.err" >&2
    die "walfill backfill $1 failed (log: $DIR/$1.$2.err)"
  }
  fill=$(dest "SELECT extract(epoch FROM copy_finished_at - copy_started_at) FROM walfill.versions
                WHERE target = '$1' AND version = 'v1'")
  read -r secs kib <"$DIR/$1.$2.time"
  echo "$fill $secs $kib $(dest_wal_mib_since "$lsn") $(dest_temp_mib_since "$DEST" "$temp")"
}

for run in $(seq 1 "$RUNS"); do
  log "run $run of $RUNS"
  pipe computed "$COMPUTED" >>"$DIR/pipe_computed"
  walfill computed "$run" >>"$DIR/walfill_computed"
  walfill identity "$run" >>"$DIR/walfill_identity"
  pipe identity "*" >>"$DIR/pipe_identity"
done

# Every version equals its transform of the source.
SUMMARY="count(*) || ' rows, hash sum ' || coalesce(sum(hashtext(t::text)::numeric), 0)"
for name in computed identity; do
  if [ "$name" = computed ]; then
    select="$COMPUTED" columns="id, customer_id, status, total, day"
  else
    select="*" columns="id, customer_id, status, total_cents, created_at, note"
  fi
  expected=$(src "SELECT $SUMMARY FROM (SELECT $select FROM orders) t")
  actual=$(dest "SELECT $SUMMARY FROM (SELECT $columns FROM public.${name}__v1
                                        WHERE NOT _walfill_deleted) t")
  [ "$expected" = "$actual" ] || die "version $name differs from the transform of the source: $actual, not $expected"
done

col() { awk -v c="$2" '{ print $c }' "$DIR/$1" | median; }
mode=$(grep -ho 'mode="chunked[^"]*"' "$DIR"/computed.1.err | head -1 || true)
printf '\n%s rows, %s runs each (medians); walfill %s\n' "$ROWS" "$RUNS" \
  "$([ -n "$mode" ] && echo "chunked copy" || echo "exported-snapshot copy")"
printf '%-42s %8s %10s %7s %9s %9s %9s %9s\n' "" "fill s" "rows/s" "ratio" "whole s" "peak MiB" "WAL MiB" "temp MiB"
for name in computed identity; do
  p=$(col "pipe_$name" 1)
  awk -v n="binary COPY pipe, $name" -v s="$p" -v r="$ROWS" -v w="$(col "pipe_$name" 2)" -v t="$(col "pipe_$name" 3)" \
    'BEGIN { printf "%-42s %8.2f %10.0f %7.2f %9s %9s %9.0f %9.1f\n", n, s, r / s, 1, "", "", w, t }'
  awk -v n="walfill, $name" -v s="$(col "walfill_$name" 1)" -v whole="$(col "walfill_$name" 2)" \
    -v k="$(col "walfill_$name" 3)" -v w="$(col "walfill_$name" 4)" -v t="$(col "walfill_$name" 5)" \
    -v r="$ROWS" -v p="$p" \
    'BEGIN { printf "%-42s %8.2f %10.0f %7.2f %9.2f %9.0f %9.0f %9.1f\n", n, s, r / s, p / s, whole, k / 1024, w, t }'
done
echo "(ratio = pipe seconds / walfill fill seconds, each a median; WAL: what the destination cluster"
echo " wrote during the command; temp: temporary files the destination database wrote)"
