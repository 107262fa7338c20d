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

# Runs a command; its whole-command seconds and peak RSS (KiB) go to file $1
# as "seconds kib".
timed() {
  local out="$1"
  shift
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
dest_url() {
  echo "postgresql://$WALFILL_PG_SUPERUSER:$WALFILL_PG_PASSWORD@127.0.0.1:$DEST_PORT/${1:-postgres}"
}
dest_psql() {
  PGPASSWORD="$WALFILL_PG_PASSWORD" psql -X -v ON_ERROR_STOP=1 -q \
    -h 127.0.0.1 -p "$DEST_PORT" -U "$WALFILL_PG_SUPERUSER" "$@"
}
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
