-- Installs (or replaces) the catalog journal. Runs in one transaction with
-- search_path = pg_catalog, pg_temp; journal.sql and handlers.sql follow it.
CREATE SCHEMA IF NOT EXISTS walfill;

DROP EVENT TRIGGER IF EXISTS walfill_journal_ddl;
DROP EVENT TRIGGER IF EXISTS walfill_journal_drop;

-- Every journal function goes, to be created afresh (old_triggers.sql ran
-- first).
DO $do$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'walfill' AND p.proname LIKE 'journal\_%'
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$do$;

-- Where decoding can start reading the journal (`anchors`: an install, from
-- which every table is described again), and which files the journal last
-- described for each table (`files`: rows are added, never changed, so a
-- file a table had once can still be named after it moved on). Kept across
-- reinstalls; the uninstall drops them.
CREATE TABLE IF NOT EXISTS walfill.journal_anchors (
    lsn pg_lsn PRIMARY KEY,
    event text NOT NULL,
    recorded timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE TABLE IF NOT EXISTS walfill.journal_files (
    relid oid NOT NULL,
    spc oid NOT NULL,
    relfilenode oid NOT NULL,
    toast_spc oid,
    toast_relfilenode oid,
    lsn pg_lsn NOT NULL,
    PRIMARY KEY (relid, spc, relfilenode)
);
