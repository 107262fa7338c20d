-- The event triggers, enabled ALWAYS so that DDL run with
-- session_replication_role = replica is journaled too. Then every journal
-- function is made the installing role's and closed to others.
CREATE EVENT TRIGGER walfill_journal_ddl ON ddl_command_end
    EXECUTE FUNCTION walfill.journal_ddl();
ALTER EVENT TRIGGER walfill_journal_ddl ENABLE ALWAYS;
CREATE EVENT TRIGGER walfill_journal_drop ON sql_drop
    EXECUTE FUNCTION walfill.journal_drop();
ALTER EVENT TRIGGER walfill_journal_drop ENABLE ALWAYS;

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
        EXECUTE format('ALTER FUNCTION %s OWNER TO CURRENT_USER', f);
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$do$;
