-- Removes the catalog journal: its event triggers, the truncate triggers
-- earlier versions attached to every table, its functions, and the schema
-- walfill when nothing else is in it (walfill's state tables keep it). Runs in one transaction with
-- search_path = pg_catalog, pg_temp.
DROP EVENT TRIGGER IF EXISTS walfill_journal_ddl;
DROP EVENT TRIGGER IF EXISTS walfill_journal_drop;
DROP TABLE IF EXISTS walfill.journal_anchors, walfill.journal_files;

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
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'walfill') THEN
        BEGIN
            DROP SCHEMA walfill;
        EXCEPTION WHEN dependent_objects_still_exist THEN
            NULL;
        END;
    END IF;
END
$do$;
