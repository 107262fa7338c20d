#!/usr/bin/env bash
# The demo: on a private PostgreSQL cluster, a source table under concurrent
# writes gets a derived target, run by `walfill serve`: it builds the
# configured version from a snapshot (which leaves a base snapshot in the
# WAL archive), catches it up with the live stream and publishes it by a
# view swap; a backfill requested from SQL rebuilds it by replaying the
# archived WAL from that base, without reading the table; a new version of
# the transform with a schedule, loaded on SIGHUP, is built and swapped in,
# then rebuilt by its schedule. Every version stays current: a rollback
# shows the one before again.
. "$(dirname "$0")/lib.sh"
cd "$WALFILL_ROOT"

ROWS="${WALFILL_DEMO_ROWS:-200000}"
DB=walfill_demo
DEMO="$WALFILL_PG_HOME/demo"
BIN="$(pg_bindir)"

"$WALFILL_ROOT/scripts/pg-up.sh" >/dev/null
log "building walfill"
cargo build --quiet --bin walfill
WALFILL="$WALFILL_ROOT/target/debug/walfill"

log "creating database $DB with $ROWS orders"
pg_psql -d postgres <<SQL
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '$DB';
DROP DATABASE IF EXISTS $DB WITH (FORCE);
CREATE DATABASE $DB;
SQL
pg_psql -d "$DB" <<SQL
CREATE TABLE orders (
    id          bigint PRIMARY KEY,
    customer_id int    NOT NULL,
    status      text   NOT NULL,
    total_cents bigint NOT NULL,
    note        text
);
INSERT INTO orders
SELECT g, g % 5000, (ARRAY['open', 'paid', 'shipped', 'test'])[1 + g % 4], (g * 37) % 100000,
       CASE WHEN g % 7 = 0 THEN NULL ELSE 'order ' || g END
  FROM generate_series(1, $ROWS) g;
ANALYZE orders;
SQL

mkdir -p "$DEMO"
cat >"$DEMO/walfill.toml" <<TOML
[source]
url = "$(pg_url "$DB")"

[archive]
url = "file://$WALFILL_PG_ARCHIVE"

[backfill]
chunk_rows = 10000

# The cluster's archive_command already fills the archive (walfill wal-push
# would do as well): the service need not stream WAL itself.
[serve]
archiver = false

[[target]]
name = "orders_summary"
source = "public.orders"
key = ["id"]
select = "id, customer_id, upper(status) AS status, total_cents / 100.0 AS total"
where = "status <> 'test'"
version = "v1"
schema = "derived"
TOML
export WALFILL_CONFIG="$DEMO/walfill.toml"

# Concurrent writers for the whole backfill: updates, inserts, deletes.
cat >"$DEMO/writes.sql" <<SQL
\set id random(1, $ROWS)
UPDATE orders SET status = 'paid', total_cents = total_cents + 1 WHERE id = :id;
INSERT INTO orders VALUES ($ROWS + 1000000 + :client_id * 10000000 + :id, 1, 'open', 100, 'new')
    ON CONFLICT (id) DO UPDATE SET total_cents = orders.total_cents + 1;
DELETE FROM orders WHERE id = :id + 1;
SQL
log "starting concurrent writes (pgbench, 2 clients)"
PGPASSWORD="$WALFILL_PG_PASSWORD" "$BIN/pgbench" -n -h 127.0.0.1 -p "$WALFILL_PG_PORT" \
  -U "$WALFILL_PG_SUPERUSER" -c 2 -T 600 -f "$DEMO/writes.sql" "$DB" >/dev/null 2>&1 &
WRITERS=$!
trap 'kill $WRITERS 2>/dev/null || true' EXIT

"$WALFILL" setup
PORT="${WALFILL_DEMO_PORT:-8089}"
log "starting walfill serve (status page on http://127.0.0.1:$PORT/): it builds v1, the configured version"
"$WALFILL" serve --listen "127.0.0.1:$PORT" 2>"$DEMO/serve.log" &
SERVE=$!
trap 'kill $WRITERS 2>/dev/null || true; kill $SERVE 2>/dev/null || true' EXIT

# Waits until the SQL condition holds, showing the service's log if it never does.
wait_for() {
  for _ in $(seq 1 600); do
    [ "$(pg_psql -d "$DB" -At -c "$1" 2>/dev/null)" = t ] && return 0
    kill -0 "$SERVE" 2>/dev/null || { tail -30 "$DEMO/serve.log"; die "walfill serve stopped"; }
    sleep 1
  done
  tail -30 "$DEMO/serve.log"; die "timed out waiting for: $2"
}
active_is() {
  echo "SELECT coalesce((SELECT active_version = '$1' FROM walfill.targets WHERE target = 'orders_summary'), false)"
}
wait_for "$(active_is v1)" "v1 to be published"
"$WALFILL" status

log "a backfill requested from SQL (any job scheduler or application can do this)"
ID=$(pg_psql -d "$DB" -At -c "SELECT walfill.request_backfill('orders_summary')")
log "request $ID: a new version of the same transform, from empty (replayed from the base snapshot v1 left in the archive)"
wait_for "SELECT state = 'done' FROM walfill.requests WHERE id = $ID" "request $ID"
"$WALFILL" status

log "a new version of the transform with a schedule, picked up on SIGHUP while the writes go on"
V1_SELECT="id, customer_id, upper(status) AS status, total_cents / 100.0 AS total"
V2_SELECT="id, customer_id, lower(status) AS status, total_cents AS total_cents, total_cents >= 50000 AS big"
sed -i "s/^select = .*/select = \"$V2_SELECT\"/; s/^version = .*/version = \"v2\"\nschedule = \"* * * * *\"/" "$WALFILL_CONFIG"
kill -HUP "$SERVE"
wait_for "$(active_is v2)" "v2 to be published"
log "waiting for the schedule (every minute) to rebuild v2 as a new version"
wait_for "SELECT EXISTS (SELECT 1 FROM walfill.requests WHERE origin = 'schedule' AND state = 'done')" "a scheduled run"
"$WALFILL" status

log "stopping the writers; the service applies what they committed"
kill "$WRITERS" 2>/dev/null || true; wait "$WRITERS" 2>/dev/null || true
log "stopping walfill serve (SIGTERM), then applying what is left"
kill -TERM "$SERVE"; wait "$SERVE" || die "walfill serve did not stop cleanly"
"$WALFILL" sync --once

check() {
  pg_psql -d "$DB" -At <<SQL
SELECT CASE WHEN count(*) = 0 THEN 'the view equals the transform of the source: '
                                   || (SELECT count(*) FROM derived.orders_summary) || ' rows'
            ELSE count(*) || ' rows differ' END
  FROM ((SELECT $1 FROM orders WHERE status <> 'test' EXCEPT ALL SELECT * FROM derived.orders_summary)
        UNION ALL
        (SELECT * FROM derived.orders_summary EXCEPT ALL SELECT $1 FROM orders WHERE status <> 'test')) d;
SQL
}
log "the scheduled version of v2 is published"
check "$V2_SELECT"
log "rollback: the version before it (v2) is published again, just as current"
"$WALFILL" rollback orders_summary
check "$V2_SELECT"
log "done: try 'WALFILL_CONFIG=$WALFILL_CONFIG $WALFILL status'; scripts/pg-down.sh --purge removes the cluster"
