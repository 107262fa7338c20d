-- Removes the truncate trigger earlier versions of the journal attached to
-- every table (TRUNCATE is now followed from the WAL alone). Runs first in
-- both the install and the uninstall.
DO $do$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT tg.tgrelid::regclass AS rel, tg.tgname
          FROM pg_catalog.pg_trigger tg
          JOIN pg_catalog.pg_proc p ON p.oid = tg.tgfoid
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'walfill' AND p.proname = 'journal_truncate'
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
    END LOOP;
END
$do$;
