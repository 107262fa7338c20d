-- Installs (or replaces) the catalog journal. Runs in one transaction with
-- search_path = pg_catalog, pg_temp; journal.sql and handlers.sql follow it.
CREATE SCHEMA IF NOT EXISTS walfill;

DROP EVENT TRIGGER IF EXISTS walfill_journal_ddl;
DROP EVENT TRIGGER IF EXISTS walfill_journal_drop;

-- Every journal function goes, to be created afresh, except the truncate
-- trigger's: the triggers on the tables depend on it, so it is replaced.
DO $do$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'walfill' AND p.proname LIKE 'journal\_%'
           AND p.proname <> 'journal_truncate'
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$do$;
