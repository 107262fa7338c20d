#!/usr/bin/env bash
# Starts the private PostgreSQL cluster used by the demo, the tests and the
# benchmarks: its own data directory, port and socket, wal_level=logical,
# replication slots and senders, and WAL archiving into a local directory.
# Idempotent: creates the cluster on first use, starts it if it is stopped,
# and does nothing when it is already running.
#
# Prints nothing on stdout but the superuser URL, so callers can do
#   url=$(scripts/pg-up.sh)
. "$(dirname "$0")/lib.sh"

"$WALFILL_ROOT/scripts/deps.sh"
BIN="$(pg_bindir)"

mkdir -p "$WALFILL_PG_HOME" "$WALFILL_PG_SOCKET" "$WALFILL_PG_ARCHIVE/wal"
if [ "$(id -u)" = 0 ]; then
  chown -R postgres:postgres "$WALFILL_PG_HOME"
  # The server runs as `postgres` and must reach its directory.
  as_pg_owner test -x "$WALFILL_PG_HOME" ||
    die "user postgres cannot reach $WALFILL_PG_HOME; set WALFILL_PG_HOME to a directory it can"
fi

if [ ! -s "$WALFILL_PG_DATA/PG_VERSION" ]; then
  log "creating cluster in $WALFILL_PG_DATA (wal_level=$WALFILL_PG_WAL_LEVEL, WAL segments of ${WALFILL_PG_SEGSIZE} MiB)"
  as_pg_owner "$BIN/initdb" -D "$WALFILL_PG_DATA" -U postgres --no-locale -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256 \
    --wal-segsize="$WALFILL_PG_SEGSIZE" >/dev/null
  cat >"$WALFILL_PG_HOME/walfill.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $WALFILL_PG_PORT
unix_socket_directories = '$WALFILL_PG_SOCKET'
max_connections = 200
wal_level = $WALFILL_PG_WAL_LEVEL
max_wal_senders = 40
max_replication_slots = 40
max_prepared_transactions = 20
archive_mode = ${WALFILL_PG_ARCHIVE_MODE:-on}
archive_command = 'test ! -f $WALFILL_PG_ARCHIVE/wal/%f && cp %p $WALFILL_PG_ARCHIVE/wal/%f.tmp && mv $WALFILL_PG_ARCHIVE/wal/%f.tmp $WALFILL_PG_ARCHIVE/wal/%f'
wal_sender_timeout = 60s
max_wal_size = 2GB
fsync = off
timezone = 'UTC'
log_timezone = 'UTC'
lc_messages = 'C'
log_min_messages = warning
log_line_prefix = '%m [%p] %d '
CONF
  chown postgres:postgres "$WALFILL_PG_HOME/walfill.conf" 2>/dev/null || true
  echo "include '$WALFILL_PG_HOME/walfill.conf'" | as_pg_owner tee -a "$WALFILL_PG_DATA/postgresql.conf" >/dev/null
  as_pg_owner tee "$WALFILL_PG_DATA/pg_hba.conf" >/dev/null <<HBA
local all         all                trust
local replication all                trust
host  all         all  127.0.0.1/32  scram-sha-256
host  replication all  127.0.0.1/32  scram-sha-256
HBA
fi

if ! as_pg_owner "$BIN/pg_ctl" -D "$WALFILL_PG_DATA" status >/dev/null 2>&1; then
  log "starting cluster on 127.0.0.1:$WALFILL_PG_PORT (log: $WALFILL_PG_LOG)"
  as_pg_owner "$BIN/pg_ctl" -D "$WALFILL_PG_DATA" -l "$WALFILL_PG_LOG" -w -t 60 start >/dev/null ||
    { tail -n 20 "$WALFILL_PG_LOG" >&2; die "the cluster did not start"; }
fi

# The superuser the tools connect as over TCP, with a password.
as_pg_owner psql -X -q -h "$WALFILL_PG_SOCKET" -p "$WALFILL_PG_PORT" -U postgres -d postgres \
  -v ON_ERROR_STOP=1 >/dev/null <<SQL
SELECT format('CREATE ROLE %I SUPERUSER LOGIN REPLICATION', '$WALFILL_PG_SUPERUSER')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$WALFILL_PG_SUPERUSER') \gexec
ALTER ROLE "$WALFILL_PG_SUPERUSER" PASSWORD '$WALFILL_PG_PASSWORD';
SQL

pg_url
