-- The event triggers, enabled ALWAYS so that DDL run with
-- session_replication_role = replica is journaled too. Then every journal
-- function is made the installing role's and closed to others, but the one
-- that records moved files.
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
    -- Any walfill role records moved files and reads where decoding starts.
    GRANT EXECUTE ON FUNCTION walfill.journal_sync(text) TO PUBLIC;
    GRANT SELECT ON walfill.journal_anchors, walfill.journal_files TO PUBLIC;
    IF (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'walfill')
       = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        GRANT USAGE ON SCHEMA walfill TO PUBLIC;
    END IF;
END
$do$;
