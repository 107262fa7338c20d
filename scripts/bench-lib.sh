# Shared by the benchmark scripts: building walfill, a destination cluster
# of its own, measuring a command (seconds and peak RSS), the WAL and the
# temporary files the destination writes meanwhile, and medians. Source it
# after lib.sh.

# Builds the release binary; sets WALFILL.
bench_build() {
  log "building walfill (release)"
  cargo build --quiet --release --bin walfill
  WALFILL="$WALFILL_ROOT/target/release/walfill"
}

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.3f\n", a - b }'; }

# The median of the numbers on standard input.
median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Checkpoints both clusters, so that a measured command starts with no
# dirty buffers left by the one before it to write out meanwhile (with runs
# alternating, a checkpoint would otherwise land in whichever run crossed
# max_wal_size: one run's figure could be 50% off the next one's).
settle() {
  pg_psql -d postgres -q -c "CHECKPOINT" >/dev/null
  dest_psql -d postgres -q -c "CHECKPOINT" >/dev/null
}

# Runs a command, after settle; its whole-command seconds and peak RSS (KiB)
# go to file $1 as "seconds kib".
timed() {
  local out="$1"
  shift
  settle
  /usr/bin/time -f '%e %M' -o "$out" "$@"
}

# Drops version $2 of target $1 (its table and state in the destination
# database $3, its slot in the source cluster), so that the next backfill
# builds it afresh.
forget_version() {
  dest_psql -d "$3" -q <<SQL >/dev/null 2>&1 || true
DELETE FROM walfill.versions WHERE target = '$1' AND version = '$2';
DROP TABLE IF EXISTS derived."$1__$2", public."$1__$2" CASCADE;
SQL
  pg_psql -d postgres -At -q -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                                  WHERE slot_name LIKE 'walfill\_$1\_$2\_%'" >/dev/null
}

# The destination cluster: a second private cluster of the benchmarks'
# own (wal_level=replica, no archiving), so that what walfill writes into
# the versions is not WAL the source's next replay must read.
DEST_HOME="$WALFILL_PG_HOME-bench-dest"
DEST_PORT=$((WALFILL_PG_PORT + 6))
dest_cluster_up() {
  WALFILL_PG_HOME="$DEST_HOME" WALFILL_PG_PORT="$DEST_PORT" WALFILL_PG_WAL_LEVEL=replica \
    WALFILL_PG_ARCHIVE_MODE=off "$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
}
# lib.sh's pg_url and pg_psql, for the destination cluster.
dest_url() { WALFILL_PG_PORT="$DEST_PORT" pg_url "$@"; }
dest_psql() { WALFILL_PG_PORT="$DEST_PORT" pg_psql "$@"; }
# A new, empty database $1 in the destination cluster.
fresh_dest_db() {
  dest_psql -d postgres -q -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1"
}
drop_dest_db() {
  dest_psql -d postgres -q -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null
}
# The destination cluster's WAL insert position, and MiB written since.
dest_wal_lsn() { dest_psql -d postgres -At -c "SELECT pg_current_wal_insert_lsn()"; }
dest_wal_mib_since() {
  dest_psql -d postgres -At -c "SELECT round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$1') / 1048576.0, 1)"
}
# Bytes of temporary files destination database $1 has written.
dest_temp_bytes() {
  dest_psql -d postgres -At -c "SELECT pg_stat_force_next_flush(); SELECT temp_bytes FROM pg_stat_database WHERE datname = '$1'" | tail -1
}
# MiB of temporary files destination database $1 has written since it had
# written $2 bytes, plus $3 bytes (written elsewhere) if given.
dest_temp_mib_since() {
  awk -v a="$(dest_temp_bytes "$1")" -v b="$2" -v s="${3:-0}" 'BEGIN { printf "%.1f", (a - b + s) / 1048576 }'
}

# The baseline: `COPY ($2) TO STDOUT` from source database $1 piped into
# `COPY $4 FROM STDIN` of destination database $3 (emptied first), both
# binary. Prints "seconds wal_mib temp_mib".
copy_pipe() {
  dest_psql -d "$3" -c "TRUNCATE $4" >/dev/null
  settle
  local lsn temp start secs
  lsn=$(dest_wal_lsn)
  temp=$(dest_temp_bytes "$3")
  start=$(now)
  pg_psql -d "$1" -c "COPY ($2) TO STDOUT (FORMAT binary)" |
    dest_psql -d "$3" -c "COPY $4 FROM STDIN (FORMAT binary)" >/dev/null
  secs=$(since "$start")
  echo "$secs $(dest_wal_mib_since "$lsn") $(dest_temp_mib_since "$3" "$temp")"
}

# ERROR lines in the destination cluster's server log so far.
dest_log_errors() { grep -c ' ERROR: ' "$DEST_HOME/server.log" 2>/dev/null || echo 0; }
