-- walfill's state in the destination database. Idempotent: every run of
-- `walfill setup` brings an older schema up to date.
CREATE SCHEMA IF NOT EXISTS walfill;

-- One row per version of a target: its definition, its phase and its progress.
CREATE TABLE IF NOT EXISTS walfill.versions (
    target             text        NOT NULL,
    version            text        NOT NULL,
    dest_schema        text        NOT NULL,
    table_name         text        NOT NULL,
    source_table       text        NOT NULL,
    select_sql         text        NOT NULL,
    filter_sql         text,
    key_columns        text[]      NOT NULL,
    path               text        NOT NULL DEFAULT 'snapshot',
    phase              text        NOT NULL,
    slot_name          text        NOT NULL,
    -- the slot's consistent point: where the stream starts
    boundary_lsn       pg_lsn,
    -- the snapshot the copy currently reads (later than boundary_lsn after a resume)
    copy_boundary_lsn  pg_lsn,
    copy_cursor        text[],
    rows_copied        bigint      NOT NULL DEFAULT 0,
    rows_estimated     bigint      NOT NULL DEFAULT 0,
    copy_rate          float8      NOT NULL DEFAULT 0,
    -- end LSN of the last source transaction applied to this version
    applied_lsn        pg_lsn,
    changes_applied    bigint      NOT NULL DEFAULT 0,
    -- a TRUNCATE's version: rows older than it are gone for good
    truncated_lsn      pg_lsn,
    truncated_seq      integer,
    created_at         timestamptz NOT NULL DEFAULT now(),
    copy_started_at    timestamptz,
    copy_finished_at   timestamptz,
    caught_up_at       timestamptz,
    swapped_at         timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    last_error         text,
    PRIMARY KEY (target, version)
);

-- The version readers see through each target's view, and the one before it.
CREATE TABLE IF NOT EXISTS walfill.targets (
    target             text        PRIMARY KEY,
    dest_schema        text        NOT NULL,
    active_version     text,
    previous_version   text,
    swapped_at         timestamptz
);

-- A record of what happened: runs, swaps, rollbacks, resumes, errors.
CREATE TABLE IF NOT EXISTS walfill.events (
    id                 bigserial   PRIMARY KEY,
    at                 timestamptz NOT NULL DEFAULT now(),
    target             text        NOT NULL,
    version            text,
    kind               text        NOT NULL,
    detail             jsonb       NOT NULL DEFAULT '{}'
);

-- Added with replay backfills.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS restart_lsn pg_lsn;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS replay_base jsonb;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS path_reason text;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS replayed_lsn pg_lsn;
-- The archived WAL a replay read (segments, bytes), once it filled.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS segments_read bigint;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS wal_read_bytes bigint;

-- Added with relations identified by OID: the source table's OID and its
-- name as parts (the name only for people), the table as the version was
-- planned (columns by attribute number), and the columns the live stream
-- sends as of applied_lsn.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS source_relid oid;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS source_schema text;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS source_name text;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS source_desc jsonb;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS stream_desc jsonb;
-- The fencing token: raised by every process that takes the version over,
-- and checked by every transaction that stores into it.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS lease bigint NOT NULL DEFAULT 0;
-- Why the version lost changes for good (its slot is gone), when it did: it
-- cannot be published until it is rebuilt.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS lost text;
-- A table of this version that readers still see while the version is
-- rebuilt beside it (an active version that lost changes); dropped by the
-- swap that publishes the rebuilt table.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS replaced_table text;
-- How far a replay has read the archived WAL (for its progress).
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS replay_read_lsn pg_lsn;
-- Added with replays that fold to disk: the last key (in walfill's own
-- order of the merged rows) a replay's load has stored, so that a load
-- interrupted resumes after it.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS load_cursor text[];

-- Added with typed phases: a version's phase and path are one of those
-- walfill knows (state::Phase, state::Path), whoever writes the row. An
-- older state schema gets the checks here; its rows were written by
-- walfill, so they pass.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'walfill.versions'::regclass
                      AND conname = 'versions_phase_check') THEN
        ALTER TABLE walfill.versions ADD CONSTRAINT versions_phase_check
            CHECK (phase IN ('planned', 'copying', 'replaying', 'catching_up', 'ready',
                             'active', 'previous', 'retired'));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'walfill.versions'::regclass
                      AND conname = 'versions_path_check') THEN
        ALTER TABLE walfill.versions ADD CONSTRAINT versions_path_check
            CHECK (path IN ('snapshot', 'replay'));
    END IF;
END
$$;

-- Added with `walfill serve`.
--
-- Requests for backfills, from every entry point (the CLI, SQL, HTTP, a
-- schedule, a configuration change, a rebuild after a loss). A worker
-- claims one by setting state = 'running' with a lease it renews; a lease
-- that runs out (its process died) lets another worker claim it again.
CREATE TABLE IF NOT EXISTS walfill.requests (
    id                 bigserial   PRIMARY KEY,
    target             text        NOT NULL,
    -- where it came from: cli, sql, http, schedule, config, recovery
    origin             text        NOT NULL DEFAULT 'sql',
    -- the version it builds (decided when first claimed, if not given)
    version            text,
    -- a schedule's due time
    due_at             timestamptz,
    state              text        NOT NULL DEFAULT 'queued'
                       CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    requested_by       text        NOT NULL DEFAULT current_user,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,
    worker             text,
    lease_until        timestamptz,
    attempts           integer     NOT NULL DEFAULT 0,
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    last_error         text,
    -- the path the fill took and why, rows, when done
    outcome            jsonb
);
CREATE UNIQUE INDEX IF NOT EXISTS requests_schedule_due
    ON walfill.requests (target, due_at) WHERE origin = 'schedule';
CREATE INDEX IF NOT EXISTS requests_open
    ON walfill.requests (state, next_attempt_at) WHERE state IN ('queued', 'running');

-- Targets whose backfills are paused ('*': all of them).
CREATE TABLE IF NOT EXISTS walfill.paused (
    target             text        PRIMARY KEY,
    paused_at          timestamptz NOT NULL DEFAULT now(),
    paused_by          text        NOT NULL DEFAULT current_user
);

-- The last due time of each target's schedule that was handled (run, or
-- skipped because a run was still going).
CREATE TABLE IF NOT EXISTS walfill.schedules (
    target             text        PRIMARY KEY,
    schedule           text        NOT NULL,
    last_due_at        timestamptz NOT NULL
);

-- The running `walfill serve` processes, and which one leads (schedules,
-- configuration changes, recovery, retention): the leader holds a lease
-- it renews.
CREATE TABLE IF NOT EXISTS walfill.workers (
    id                 text        PRIMARY KEY,
    host               text        NOT NULL,
    pid                integer     NOT NULL,
    listen             text,
    started_at         timestamptz NOT NULL DEFAULT now(),
    seen_at            timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS walfill.leader (
    one                boolean     PRIMARY KEY DEFAULT true CHECK (one),
    worker             text        NOT NULL,
    lease_until        timestamptz NOT NULL
);

-- The targets of the running configuration, so that SQL requests can be
-- checked against them.
CREATE TABLE IF NOT EXISTS walfill.configured (
    target             text        PRIMARY KEY,
    version            text        NOT NULL,
    schedule           text,
    seen_at            timestamptz NOT NULL DEFAULT now()
);

-- Requests a backfill of `target` from SQL; returns the request's id. The
-- running service is woken at once.
-- A request with a scope (`scope`: a condition on the source's columns)
-- refreshes the matching rows in the published version instead.
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS scope text;
-- A scoped refresh's durable cursor: the key of the last source row in
-- scope it stored (in the source's key order) and the rows stored so far.
-- The next attempt of the same request goes on after that key.
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS refreshed_up_to text[];
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS refreshed_rows bigint NOT NULL DEFAULT 0;
-- Then the keys the source lost, made tombstones: the last one (in the
-- destination's key order) and how many so far.
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS tombstoned_up_to text[];
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS tombstoned_keys bigint NOT NULL DEFAULT 0;
-- A dead-letter retry's durable cursor: the version (LSN, seq) and key of
-- the last letter it settled. A retry stopped part way goes on after it; one that
-- ends clears it.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS letters_retried_lsn pg_lsn;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS letters_retried_seq integer;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS letters_retried_key text[];
DROP FUNCTION IF EXISTS walfill.request_backfill(text);
CREATE OR REPLACE FUNCTION walfill.request_backfill(target text, scope text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM walfill.configured c WHERE c.target = request_backfill.target)
       AND EXISTS (SELECT 1 FROM walfill.configured) THEN
        RAISE EXCEPTION 'walfill has no target named %', request_backfill.target
            USING HINT = 'the configured targets are: ' ||
                (SELECT string_agg(c.target, ', ' ORDER BY c.target) FROM walfill.configured c);
    END IF;
    INSERT INTO walfill.requests (target, origin, scope)
        VALUES (request_backfill.target, 'sql', request_backfill.scope)
        RETURNING requests.id INTO id;
    PERFORM pg_notify('walfill', 'request ' || id);
    RETURN id;
END
$fn$;

-- Rows whose transform failed (a division by zero on one row, a cast that
-- fails on one value): their key is absent from the version (a tombstone),
-- never a stale row. `walfill dead-letters TARGET --retry` applies them again.
CREATE TABLE IF NOT EXISTS walfill.dead_letters (
    target             text        NOT NULL,
    version            text        NOT NULL,
    key                text[]      NOT NULL,
    key_columns        text[]      NOT NULL,
    -- the change's version (a copied row's: its chunk's snapshot, seq 0)
    lsn                pg_lsn      NOT NULL,
    seq                integer     NOT NULL,
    error              text        NOT NULL,
    -- the source row, as the transform read it
    source_row         jsonb,
    created_at         timestamptz NOT NULL DEFAULT now(),
    attempts           integer     NOT NULL DEFAULT 1,
    PRIMARY KEY (target, version, key)
);

-- Seconds between a source commit and its apply to the version, as of the
-- last batch of the live stream applied.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS apply_lag_seconds double precision;

-- Why the throttle holds the version's fill now, if it does.
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS throttled text;

-- The snapshot of each chunk a chunked snapshot copy read, each in a short
-- transaction of its own: its rows are stored with the version
-- (lsn, seq = id - 2147483648), a negative seq that names the chunk, and
-- a change from the stream replaces such a row only if the chunk's
-- snapshot could not see the change's transaction (`chunk_sees`). See the
-- README's section on chunked copies.
CREATE TABLE IF NOT EXISTS walfill.chunk_snapshots (
    id                 serial      PRIMARY KEY,
    version_table      text        NOT NULL,
    -- pg_current_wal_insert_lsn() read under the chunk's snapshot
    lsn                pg_lsn      NOT NULL,
    -- the snapshot: pg_current_snapshot() as 64-bit xids
    snap_xmin          bigint      NOT NULL,
    snap_xmax          bigint      NOT NULL,
    snap_xip           bigint[]    NOT NULL,
    read_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS chunk_snapshots_of ON walfill.chunk_snapshots (version_table);

-- Whether chunk `chunk`'s snapshot sees transaction `xid` (32 bits, as the
-- stream sends it; widened with the epoch closest to the snapshot's),
-- by PostgreSQL's own rule.
CREATE OR REPLACE FUNCTION walfill.chunk_sees(chunk integer, xid bigint)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT w.full_xid < c.snap_xmin
           OR (w.full_xid < c.snap_xmax AND w.full_xid <> ALL (c.snap_xip))
      FROM walfill.chunk_snapshots AS c,
           LATERAL (SELECT c.snap_xmax + CASE WHEN d.d >= 2147483648 THEN d.d - 4294967296
                                         WHEN d.d < -2147483648 THEN d.d + 4294967296
                                         ELSE d.d END AS full_xid
                      FROM (SELECT chunk_sees.xid - c.snap_xmax % 4294967296 AS d) AS d) AS w
     WHERE c.id = chunk_sees.chunk
$fn$;

-- The key ranges of a chunked copy made by several workers (`workers`):
-- the range's bounds on the key's first column (NULL: open), the last key
-- stored (each range resumes after its own) and whether it is done.
CREATE TABLE IF NOT EXISTS walfill.chunk_ranges (
    version_table      text        NOT NULL,
    range_no           integer     NOT NULL,
    above              text,
    up_to              text,
    cursor             text[],
    rows_copied        bigint      NOT NULL DEFAULT 0,
    done               boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (version_table, range_no)
);

-- Why the view shows a version that does not follow its source (published
-- with --force), NULL when it does.
ALTER TABLE walfill.targets ADD COLUMN IF NOT EXISTS stale text;

-- The meaning of its transform a version was built under (see the README,
-- "What a transform means"); NULL: built before meanings were recorded (1).
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS meaning smallint;

-- The cut-over gate of a request: build the version and keep it caught up
-- without publishing it (no_swap), publish it at a time (swap_at), and
-- compare it with its source first (verify_before_swap; NULL: the
-- target's or [backfill]'s setting).
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS no_swap boolean NOT NULL DEFAULT false;
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS swap_at timestamptz;
ALTER TABLE walfill.requests ADD COLUMN IF NOT EXISTS verify_before_swap boolean;
-- A version built and held back from publication by its request's gate:
-- until `walfill swap` (no swap_at), or until swap_at, when the leading
-- `walfill serve` publishes it (verified first when verify_before_swap).
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS held boolean NOT NULL DEFAULT false;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS swap_at timestamptz;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS verify_before_swap boolean;
-- Why the last planned swap of a held version failed, and when it was
-- tried (it is tried again a minute later).
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS swap_error text;
ALTER TABLE walfill.versions ADD COLUMN IF NOT EXISTS swap_tried_at timestamptz;

-- Requests a backfill of `target` from SQL; returns the request's id (see
-- above); `no_swap`, `swap_at` and `verify_before_swap` are its gate.
DROP FUNCTION IF EXISTS walfill.request_backfill(text, text);
CREATE OR REPLACE FUNCTION walfill.request_backfill(
    target text, scope text DEFAULT NULL, no_swap boolean DEFAULT false,
    swap_at timestamptz DEFAULT NULL, verify_before_swap boolean DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM walfill.configured c WHERE c.target = request_backfill.target)
       AND EXISTS (SELECT 1 FROM walfill.configured) THEN
        RAISE EXCEPTION 'walfill has no target named %', request_backfill.target
            USING HINT = 'the configured targets are: ' ||
                (SELECT string_agg(c.target, ', ' ORDER BY c.target) FROM walfill.configured c);
    END IF;
    IF request_backfill.scope IS NOT NULL
       AND (request_backfill.no_swap OR request_backfill.swap_at IS NOT NULL) THEN
        RAISE EXCEPTION 'a scoped refresh (scope) changes the published version in place: it has no swap to hold'
            USING HINT = 'give either scope or no_swap/swap_at';
    END IF;
    INSERT INTO walfill.requests (target, origin, scope, no_swap, swap_at, verify_before_swap)
        VALUES (request_backfill.target, 'sql', request_backfill.scope, request_backfill.no_swap,
                request_backfill.swap_at, request_backfill.verify_before_swap)
        RETURNING requests.id INTO id;
    PERFORM pg_notify('walfill', 'request ' || id);
    RETURN id;
END
$fn$;
