# Shared settings for the project's scripts. Source it; do not run it.
#
# Every setting can be overridden from the environment:
#   WALFILL_PG_HOME   where the private cluster lives (data, socket, logs, archive)
#   WALFILL_PG_PORT   its TCP port (default 54329, loopback only)
#   WALFILL_PG_SEGSIZE  WAL segment size in MiB given to initdb (default 16)
#   WALFILL_PG_WAL_LEVEL  wal_level of a new cluster (default logical)
#   WALFILL_PG_ARCHIVE_MODE  archive_mode of a new cluster (default on)

set -euo pipefail

WALFILL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WALFILL_PG_HOME="${WALFILL_PG_HOME:-$WALFILL_ROOT/.pg}"
WALFILL_PG_PORT="${WALFILL_PG_PORT:-54329}"
WALFILL_PG_SEGSIZE="${WALFILL_PG_SEGSIZE:-16}"
WALFILL_PG_WAL_LEVEL="${WALFILL_PG_WAL_LEVEL:-logical}"
WALFILL_PG_DATA="$WALFILL_PG_HOME/data"
WALFILL_PG_SOCKET="$WALFILL_PG_HOME/socket"
WALFILL_PG_ARCHIVE="$WALFILL_PG_HOME/archive"
WALFILL_PG_LOG="$WALFILL_PG_HOME/server.log"
# The superuser the scripts and tests use over TCP, with password authentication.
WALFILL_PG_SUPERUSER="${WALFILL_PG_SUPERUSER:-walfill_admin}"
WALFILL_PG_PASSWORD="${WALFILL_PG_PASSWORD:-walfill}"

log() { printf '%s %s\n' "[$(basename "$0")]" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The directory holding initdb, pg_ctl, postgres, pg_waldump, pg_recvlogical.
pg_bindir() {
  local dir
  for dir in "${WALFILL_PG_BINDIR:-}" /usr/lib/postgresql/15/bin; do
    if [ -n "$dir" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

# PostgreSQL refuses to run as root: run server-side commands as the `postgres`
# system user in that case (the Debian package creates it).
as_pg_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# The URL of the private cluster's superuser for a database (default `postgres`).
pg_url() {
  echo "postgresql://$WALFILL_PG_SUPERUSER:$WALFILL_PG_PASSWORD@127.0.0.1:$WALFILL_PG_PORT/${1:-postgres}"
}

# psql against the private cluster as the superuser.
pg_psql() {
  PGPASSWORD="$WALFILL_PG_PASSWORD" psql -X -v ON_ERROR_STOP=1 -q \
    -h 127.0.0.1 -p "$WALFILL_PG_PORT" -U "$WALFILL_PG_SUPERUSER" "$@"
}

# Drops database $1 of the private cluster and the replication slots in it.
drop_bench_db() {
  pg_psql -d postgres -q <<SQL >/dev/null
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '$1';
DROP DATABASE IF EXISTS $1 WITH (FORCE);
SQL
}

# A new, empty database $1 for a benchmark. It goes with its slots when the
# script exits (slots would hold WAL back for good); KEEP=1 keeps it to look at.
fresh_bench_db() {
  drop_bench_db "$1"
  pg_psql -d postgres -q -c "CREATE DATABASE $1"
  if [ -z "${KEEP:-}" ]; then
    # shellcheck disable=SC2064 # the name is fixed now
    trap "drop_bench_db $1" EXIT
  fi
}

# Table orders in database $1 with $2 rows (bigint key, five columns, a
# seventh of the notes NULL), vacuumed and analyzed, and an empty
# orders_copy like it (the COPY pipe's destination); then a checkpoint.
create_bench_orders() {
  pg_psql -d "$1" -q <<SQL
CREATE TABLE orders (
    id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,
    total_cents bigint NOT NULL, created_at timestamptz NOT NULL, note text);
INSERT INTO orders
SELECT g, g % 5000, (ARRAY['open', 'paid', 'shipped', 'test'])[1 + g % 4], (g * 37) % 100000,
       timestamptz '2024-01-01' + g * interval '1 second',
       CASE WHEN g % 7 = 0 THEN NULL ELSE 'order number ' || g END
  FROM generate_series(1, $2) g;
VACUUM ANALYZE orders;
CREATE TABLE orders_copy (LIKE orders INCLUDING ALL);
CHECKPOINT;
SQL
}
