#!/usr/bin/env bash
# Regenerates the WAL decoder fixtures under fixtures/wal/pg15/<case>/ from a
# fresh private PostgreSQL 15 cluster with 1 MiB WAL segments:
#
#   fixtures/wal/pg15/basic/wal/<segment>.zst  archived segments (zstd -19), laid
#                                            out as a walfill archive
#   fixtures/wal/pg15/basic/waldump.txt.zst  pg_waldump's record list for them
#   fixtures/wal/pg15/basic/expected.txt.zst what a test_decoding slot printed
#   fixtures/wal/pg15/basic/catalog.json     `walfill catalog` of the database
#   fixtures/wal/pg15/basic/case.toml        the LSN range decoded
#   fixtures/wal/pg15/basic/workload.sql     the SQL that produced the WAL
#
# The cluster lives in a new directory (WALFILL_PG_HOME, default: a fresh
# temporary directory; it must not exist yet or be empty) on WALFILL_PG_PORT
# (default 54392) and is stopped and deleted at the end.
#
# Usage: scripts/gen-wal-fixtures.sh
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OWN_TMP=""
if [ -z "${WALFILL_PG_HOME:-}" ]; then
  OWN_TMP="$(mktemp -d)"
  # The server may run as another user (root runs it as `postgres`).
  chmod 755 "$OWN_TMP"
  WALFILL_PG_HOME="$OWN_TMP/pg"
fi
if [ -e "$WALFILL_PG_HOME" ] && [ -n "$(ls -A "$WALFILL_PG_HOME")" ]; then
  echo "gen-wal-fixtures: $WALFILL_PG_HOME is not empty; the fixtures need a fresh cluster" >&2
  exit 1
fi
export WALFILL_PG_HOME
export WALFILL_PG_PORT="${WALFILL_PG_PORT:-54392}"
export WALFILL_PG_SEGSIZE=1
. "$ROOT/scripts/lib.sh"

CASE_DIR="$ROOT/fixtures/wal/pg15/basic"
WORK="$(mktemp -d)"
cleanup() {
  "$ROOT/scripts/pg-down.sh" --purge >/dev/null 2>&1 || true
  rm -rf "$WORK" ${OWN_TMP:+"$OWN_TMP"}
}
trap cleanup EXIT

command -v zstd >/dev/null || die "the zstd command is needed"
"$ROOT/scripts/pg-up.sh" >/dev/null
BIN="$(pg_bindir)"

sql() { pg_psql -d postgres "$@"; }
value() { pg_psql -d postgres -At -c "$1"; }

# Tables the workload uses; created before the recorded range.
sql <<'SQL'
CREATE TABLE kv (id int PRIMARY KEY, v text, n int);
CREATE TABLE full_ri (id int, v text);
ALTER TABLE full_ri REPLICA IDENTITY FULL;
INSERT INTO full_ri SELECT g, 'row ' || g FROM generate_series(1, 5) g;
CREATE TABLE copy_t (id int, v text);
CREATE TABLE toast_t (id int PRIMARY KEY, ext text, cmp text);
ALTER TABLE toast_t ALTER COLUMN ext SET STORAGE EXTERNAL;
CREATE TABLE trunc_a (id int);
CREATE TABLE trunc_b (id serial, a int);
INSERT INTO trunc_a VALUES (1), (2);
INSERT INTO trunc_b (a) VALUES (1);
CHECKPOINT;
SQL

# Start the recorded range at a fresh segment.
value "SELECT pg_switch_wal()" >/dev/null
first_seg="$(value "SELECT pg_walfile_name(pg_current_wal_insert_lsn())")"

# The oracle: a test_decoding slot whose restart point is in the range.
value "SELECT pg_create_logical_replication_slot('fixture', 'test_decoding')" >/dev/null
restart_lsn="$(value "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'fixture'")"
from_lsn="$(value "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'fixture'")"

cat >"$WORK/workload-1.sql" <<'SQL'
-- Plain inserts, updates (HOT, non-HOT, key change), deletes.
INSERT INTO kv SELECT g, 'value ' || g, g FROM generate_series(1, 20) g;
UPDATE kv SET v = 'updated' WHERE id = 1;
UPDATE kv SET id = 1002 WHERE id = 2;
UPDATE kv SET n = n + 1 WHERE id > 10;
DELETE FROM kv WHERE id = 3;
-- REPLICA IDENTITY FULL.
INSERT INTO full_ri VALUES (6, 'six');
UPDATE full_ri SET v = 'changed' WHERE id = 1;
DELETE FROM full_ri WHERE id = 2;
-- COPY: multi-insert into fresh pages, then into a partly filled page.
COPY copy_t FROM STDIN;
SQL
for i in $(seq 1 400); do printf '%d\tcopied row %d\n' "$i" "$i"; done >>"$WORK/workload-1.sql"
printf '\\.\n' >>"$WORK/workload-1.sql"
echo 'COPY copy_t FROM STDIN;' >>"$WORK/workload-1.sql"
for i in $(seq 401 405); do printf '%d\tcopied row %d\n' "$i" "$i"; done >>"$WORK/workload-1.sql"
printf '\\.\n' >>"$WORK/workload-1.sql"
cat >>"$WORK/workload-1.sql" <<'SQL'
-- TOAST: an external uncompressed value and an external (possibly compressed) one.
INSERT INTO toast_t VALUES (1, repeat('x', 20000),
  (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g));
UPDATE toast_t SET cmp = 'small' WHERE id = 1;
UPDATE toast_t SET id = 2 WHERE id = 1;
-- Savepoints, one rolled back.
BEGIN;
INSERT INTO kv VALUES (100, 'top', 0);
SAVEPOINT a;
INSERT INTO kv VALUES (101, 'rolled back', 0);
ROLLBACK TO a;
SAVEPOINT b;
INSERT INTO kv VALUES (102, 'released', 0);
RELEASE b;
SAVEPOINT c;
INSERT INTO kv VALUES (103, 'kept', 0);
COMMIT;
-- First write inside a savepoint (subxact xid assigned before the top one).
BEGIN;
SAVEPOINT s;
INSERT INTO kv VALUES (110, 'in savepoint', 0);
RELEASE s;
INSERT INTO kv VALUES (111, 'after savepoint', 0);
COMMIT;
-- An aborted transaction.
BEGIN;
INSERT INTO kv VALUES (200, 'aborted', 0);
UPDATE kv SET v = 'aborted update' WHERE id = 4;
ROLLBACK;
-- Two-phase commit: prepared then committed (with a subxact), prepared then rolled back.
BEGIN;
INSERT INTO kv VALUES (300, 'prepared', 0);
SAVEPOINT x;
INSERT INTO kv VALUES (301, 'prepared sub', 0);
PREPARE TRANSACTION 'fixture-gid-1';
CHECKPOINT;
COMMIT PREPARED 'fixture-gid-1';
BEGIN;
INSERT INTO kv VALUES (400, 'prepared then aborted', 0);
PREPARE TRANSACTION 'fixture-gid-2';
ROLLBACK PREPARED 'fixture-gid-2';
-- TRUNCATE of two tables with flags.
TRUNCATE trunc_a, trunc_b RESTART IDENTITY CASCADE;
-- Logical messages.
SELECT pg_logical_emit_message(true, 'p', 'x');
SELECT pg_logical_emit_message(false, 'nontx', 'payload');
-- Speculative insertion: confirmed insert, then an update of an existing row.
INSERT INTO kv VALUES (500, 'speculative', 0) ON CONFLICT (id) DO NOTHING;
INSERT INTO kv VALUES (500, 'conflict', 0) ON CONFLICT (id) DO UPDATE SET v = 'upserted';
-- A relation created and dropped (smgr create, commit dropping files).
CREATE TABLE late (id int);
DROP TABLE late;
SQL
sql -f "$WORK/workload-1.sql" >/dev/null

# A clean restart writes a shutdown checkpoint.
"$ROOT/scripts/pg-down.sh" >/dev/null
"$ROOT/scripts/pg-up.sh" >/dev/null

cat >"$WORK/workload-2.sql" <<'SQL'
-- Full-page images compressed with each method (the first change of a page
-- after a checkpoint carries an image).
SET wal_compression = 'pglz';
CHECKPOINT;
UPDATE kv SET n = n + 1 WHERE id = 5;
SET wal_compression = 'lz4';
CHECKPOINT;
UPDATE kv SET n = n + 1 WHERE id = 6;
SET wal_compression = 'zstd';
CHECKPOINT;
UPDATE kv SET n = n + 1 WHERE id = 7;
RESET wal_compression;
-- Fill the segment with compressible messages, then write a record that
-- crosses into the next segment.
DO $$
DECLARE
  seg int8 := 1024 * 1024;
BEGIN
  WHILE (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8 % seg < seg - 6000 LOOP
    PERFORM pg_logical_emit_message(false, 'pad', repeat('p', 3000));
  END LOOP;
  PERFORM pg_logical_emit_message(false, 'span', repeat('s', 20000));
END $$;
INSERT INTO kv VALUES (600, 'after the boundary', 0);
SQL
sql -f "$WORK/workload-2.sql" >/dev/null

to_lsn="$(value "SELECT pg_current_wal_lsn()")"
value "SELECT string_agg(data, E'\\n' ORDER BY n) FROM pg_logical_slot_peek_changes('fixture', '$to_lsn', NULL) WITH ORDINALITY AS c(lsn, xid, data, n)" >"$WORK/expected.txt"
(cd "$ROOT" && cargo run --quiet --bin walfill -- catalog --source "$(pg_url postgres)") >"$WORK/catalog.json"
value "SELECT pg_drop_replication_slot('fixture')" >/dev/null
last_seg="$(value "SELECT pg_walfile_name(pg_current_wal_insert_lsn())")"
value "SELECT pg_switch_wal()" >/dev/null

# Wait for the archiver to copy the last segment.
for _ in $(seq 1 120); do
  [ -f "$WALFILL_PG_ARCHIVE/wal/$last_seg" ] && break
  sleep 0.5
done
[ -f "$WALFILL_PG_ARCHIVE/wal/$last_seg" ] || die "segment $last_seg was not archived"

rm -rf "$CASE_DIR"
mkdir -p "$CASE_DIR/wal"
TZ=UTC "$BIN/pg_waldump" -p "$WALFILL_PG_ARCHIVE/wal" "$first_seg" "$last_seg" >"$WORK/waldump.txt"
for seg in $(cd "$WALFILL_PG_ARCHIVE/wal" && ls | sort); do
  if [[ "$seg" > "$first_seg" || "$seg" == "$first_seg" ]] && [[ "$seg" < "$last_seg" || "$seg" == "$last_seg" ]]; then
    zstd -q -19 -c "$WALFILL_PG_ARCHIVE/wal/$seg" >"$CASE_DIR/wal/$seg.zst"
  fi
done
zstd -q -19 -c "$WORK/waldump.txt" >"$CASE_DIR/waldump.txt.zst"
cat "$WORK/workload-1.sql" "$WORK/workload-2.sql" >"$CASE_DIR/workload.sql"
zstd -q -19 -c "$WORK/expected.txt" >"$CASE_DIR/expected.txt.zst"
cp "$WORK/catalog.json" "$CASE_DIR/"
cat >"$CASE_DIR/case.toml" <<TOML
# Decode with: walfill decode --archive file://<this directory> --catalog catalog.json \\
#   --restart-from $restart_lsn --from $from_lsn --to $to_lsn --format test_decoding
restart_from = "$restart_lsn"
from = "$from_lsn"
to = "$to_lsn"
TOML
version="$("$BIN/postgres" --version)"
cat >"$CASE_DIR/README.md" <<README
# WAL fixture \`basic\` (PostgreSQL 15)

Produced by \`scripts/gen-wal-fixtures.sh\` with $version on a fresh cluster
with 1 MiB WAL segments and \`wal_level = logical\`:

- \`wal/<segment>.zst\`: the archived segments $first_seg to $last_seg,
  compressed with \`zstd -19\` (the directory is a walfill archive). The first
  one starts right after a \`pg_switch_wal()\`, the last one ends with one.
- \`expected.txt.zst\`: what a \`test_decoding\` slot, created right after the
  first switch, printed for the range in \`case.toml\`.
- \`catalog.json\`: \`walfill catalog\` of the database at the end, so the
  decoder can run without a server.
- \`waldump.txt.zst\`: the output of \`pg_waldump\` over those segments.
- \`workload.sql\`: the statements run in between (a clean restart happens
  between its two parts).
README
log "wrote $(ls "$CASE_DIR" | wc -l) files to $CASE_DIR ($(du -sh "$CASE_DIR" | cut -f1))"
