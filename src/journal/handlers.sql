-- The catalog journal, part 2: the triggers that write it.
--
-- * walfill.journal_ddl (event trigger on ddl_command_end) journals every
--   table a statement created or changed, and attaches the truncate trigger to
--   new tables;
-- * walfill.journal_drop (event trigger on sql_drop) lists dropped tables and
--   journals tables that lost columns or key indexes;
-- * walfill.journal_truncate (statement-level AFTER TRUNCATE trigger on every
--   journaled table) journals the table's new relfilenode;
-- * walfill.journal_setup journals every table once and attaches the truncate
--   triggers.
--
-- The triggers must never make a user's statement fail: each step runs in its
-- own exception block, and a failure becomes a walfill.journal.error message
-- and a WARNING. The message is built inside a block but written outside it:
-- a block that writes costs a subtransaction ID, and a migration running many
-- statements in one transaction would overflow the 64 that PostgreSQL caches
-- per backend (which slows every other session's snapshots). Writing a
-- logical message in a transaction that already has an ID cannot fail short
-- of running out of memory. Attaching a truncate trigger writes, so creating a
-- table costs one subtransaction ID.
--
-- The DDL the journal runs itself (CREATE TRIGGER) runs with
-- session_replication_role = replica, so that the user's own event triggers
-- (enabled the default way) do not see it, and with walfill.journal_nested
-- on, so that the journal's own event triggers skip it.

-- Whether the journal is running its own DDL (see journal_attach).
CREATE FUNCTION walfill.journal_nested() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
BEGIN
    RETURN (
        SELECT COALESCE(current_setting('walfill.journal_nested', true), '') = 'on'
           AND current_setting('session_replication_role') = 'replica');
END
$fn$;

-- Attaches the truncate trigger to `rel` (enabled ALWAYS, so that TRUNCATEs
-- applied by logical replication are journaled too). Returns whether it had
-- to: false when the trigger is already there.
CREATE FUNCTION walfill.journal_attach(rel oid) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET session_replication_role = replica
SET walfill.journal_nested = on
SET jit = off
AS $fn$
DECLARE
    ours oid := 'walfill.journal_truncate()'::pg_catalog.regprocedure;
    found_trigger record;
BEGIN
    SELECT t.tgfoid, t.tgenabled INTO found_trigger
      FROM pg_catalog.pg_trigger t
     WHERE t.tgrelid = rel AND t.tgname = 'walfill_journal_truncate';
    IF FOUND AND found_trigger.tgfoid = ours AND found_trigger.tgenabled = 'A' THEN
        RETURN false;
    END IF;
    IF FOUND THEN
        EXECUTE format('DROP TRIGGER walfill_journal_truncate ON %s',
                       rel::pg_catalog.regclass);
    END IF;
    EXECUTE format('CREATE TRIGGER walfill_journal_truncate AFTER TRUNCATE ON %s '
                   'FOR EACH STATEMENT EXECUTE FUNCTION walfill.journal_truncate()',
                   rel::pg_catalog.regclass);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER walfill_journal_truncate',
                   rel::pg_catalog.regclass);
    RETURN true;
END
$fn$;

-- Removes the truncate trigger from `rel` (a table that became unlogged).
CREATE FUNCTION walfill.journal_detach(rel oid) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET session_replication_role = replica
SET walfill.journal_nested = on
SET jit = off
AS $fn$
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS walfill_journal_truncate ON %s',
                   rel::pg_catalog.regclass);
END
$fn$;

-- The tables (of any persistence but temporary) a ddl_command_end touched:
-- relations the commands name (an index stands for its table), the
-- inheritance descendants of a table an ALTER TABLE names (ALTER TABLE
-- recurses to them), the tables of a schema a command names, and every table
-- with a column of a type a command names (or of the row type of a relation
-- it names), directly, as an array element, through a domain, a range, a
-- multirange or a composite's attribute, or whose row type it is (typed
-- tables). Runs on every DDL statement, so the common case (a command naming
-- a table) only looks rows up by OID; the scans for schemas and types run
-- only for them.
CREATE FUNCTION walfill.journal_ddl_targets() RETURNS oid[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    class_ids oid[];
    altered oid[];
    type_ids oid[];
    namespace_ids oid[];
    rels oid[];
BEGIN
    SELECT array_agg(objid) FILTER (WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass),
           array_agg(objid) FILTER (WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                                      AND command_tag = 'ALTER TABLE'),
           array_agg(objid) FILTER (WHERE classid = 'pg_catalog.pg_type'::pg_catalog.regclass),
           array_agg(objid) FILTER (WHERE classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass)
      INTO class_ids, altered, type_ids, namespace_ids
      FROM pg_catalog.pg_event_trigger_ddl_commands();
    IF class_ids IS NULL AND type_ids IS NULL AND namespace_ids IS NULL THEN
        RETURN NULL;
    END IF;
    IF class_ids IS NOT NULL THEN
        -- A relation's row type counts when some column, domain, range or
        -- composite uses it or its array (an index lookup in pg_depend):
        -- a column added to a table changes the values of such a column.
        SELECT array_agg(CASE WHEN c.relkind IN ('i', 'I') THEN i.indrelid ELSE c.oid END),
               type_ids || array_agg(c.reltype) FILTER (
                   WHERE c.relkind = 'c'
                      OR EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                  WHERE d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
                                    AND d.refobjid IN (c.reltype, ty.typarray)
                                    AND d.deptype = 'n'))
          INTO rels, type_ids
          FROM pg_catalog.pg_class c
          LEFT JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
          LEFT JOIN pg_catalog.pg_type ty ON ty.oid = c.reltype
         WHERE c.oid = ANY (class_ids);
    END IF;
    IF altered IS NOT NULL THEN
        WITH RECURSIVE descendant(relid) AS (
            SELECT unnest(altered)
            UNION
            SELECT inh.inhrelid
              FROM descendant
              JOIN pg_catalog.pg_inherits inh ON inh.inhparent = descendant.relid
        )
        SELECT rels || array_agg(relid) INTO rels FROM descendant;
    END IF;
    IF namespace_ids IS NOT NULL THEN
        SELECT rels || array_agg(c.oid) INTO rels
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = ANY (namespace_ids) AND c.relkind IN ('r', 'p', 'm');
    END IF;
    IF type_ids IS NOT NULL THEN
        WITH RECURSIVE reaching(typid) AS (
            SELECT unnest(type_ids)
            UNION
            SELECT next.typid
              FROM reaching
             CROSS JOIN LATERAL (
                   SELECT ty.oid FROM pg_catalog.pg_type ty
                    WHERE ty.typelem = reaching.typid OR ty.typbasetype = reaching.typid
                   UNION ALL
                   SELECT r.rngtypid FROM pg_catalog.pg_range r
                    WHERE r.rngsubtype = reaching.typid
                   UNION ALL
                   SELECT r.rngmultitypid FROM pg_catalog.pg_range r
                    WHERE r.rngtypid = reaching.typid
                   UNION ALL
                   -- Row types with an attribute of the type (pg_depend is
                   -- indexed by the type; pg_attribute is not).
                   SELECT c.reltype FROM pg_catalog.pg_depend d
                     JOIN pg_catalog.pg_class c ON c.oid = d.objid
                    WHERE d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
                      AND d.refobjid = reaching.typid
                      AND d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                      AND d.objsubid > 0) AS next(typid)
        )
        SELECT rels || array_agg(t.relid) INTO rels
          FROM (SELECT a.attrelid AS relid
                  FROM pg_catalog.pg_attribute a
                 WHERE a.atttypid IN (SELECT typid FROM reaching)
                   AND a.attnum > 0 AND NOT a.attisdropped
                UNION
                SELECT c.oid FROM pg_catalog.pg_class c
                 WHERE c.reloftype IN (SELECT typid FROM reaching)) AS t;
    END IF;
    SELECT array_agg(c.oid ORDER BY c.oid) INTO rels
      FROM pg_catalog.pg_class c
     WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p', 'm') AND c.relpersistence <> 't';
    RETURN rels;
END
$fn$;

-- The tables an sql_drop dropped (`dropped`), and the tables that lost a
-- column, a constraint or a replica identity index in it (`changed`). Column
-- and constraint losses of an ALTER TABLE are left to its ddl_command_end,
-- which journals the table anyway.
CREATE FUNCTION walfill.journal_drop_targets(tag text, OUT changed oid[], OUT dropped oid[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    constrained oid[];  -- tables that lost a constraint (NULL: the table went too)
    index_schemas text[];
BEGIN
    SELECT array_agg(DISTINCT objid)
               FILTER (WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                         AND objsubid = 0 AND NOT is_temporary
                         AND object_type IN ('table', 'materialized view')
                         AND schema_name NOT IN ('pg_catalog', 'information_schema',
                                                 'pg_toast', 'walfill')),
           array_agg(DISTINCT objid)
               FILTER (WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                         AND objsubid > 0),
           array_agg(DISTINCT pg_catalog.to_regclass(
                         format('%I.%I', address_names[1], address_names[2]))::oid)
               FILTER (WHERE object_type = 'table constraint'
                         AND cardinality(address_names) = 3),
           -- A dropped index names no table; a dropped replica identity
           -- index leaves a table of the same schema without one.
           array_agg(DISTINCT schema_name) FILTER (WHERE object_type = 'index' AND original)
      INTO dropped, changed, constrained, index_schemas
      FROM pg_catalog.pg_event_trigger_dropped_objects();
    IF tag = 'ALTER TABLE' THEN
        changed := NULL;
        RETURN;
    END IF;
    changed := changed || constrained;
    IF index_schemas IS NOT NULL THEN
        SELECT changed || array_agg(c.oid) INTO changed
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = ANY (index_schemas) AND c.relreplident = 'i'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                            WHERE i.indrelid = c.oid AND i.indisreplident);
    END IF;
    SELECT array_agg(c.oid) INTO changed
      FROM pg_catalog.pg_class c
     WHERE c.oid = ANY (changed) AND NOT c.oid = ANY (COALESCE(dropped, '{}'));
END
$fn$;

-- Attaches the truncate trigger to the journaled tables among `rels` that lack
-- it, and detaches it from those that left the journal (became unlogged).
-- Returns the tables that left. Calls journal_attach only when there is work:
-- changing session_replication_role empties the session's plan cache.
CREATE FUNCTION walfill.journal_maintain(rels oid[]) RETURNS oid[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    rel record;
    left_journal oid[] := '{}';
BEGIN
    FOR rel IN
        SELECT c.oid, walfill.journal_is_journaled(c.oid) AS journaled, t.tgfoid, t.tgenabled
          FROM pg_catalog.pg_class c
          LEFT JOIN pg_catalog.pg_trigger t
            ON t.tgrelid = c.oid AND t.tgname = 'walfill_journal_truncate'
         WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p')
         ORDER BY c.oid
    LOOP
        IF rel.journaled THEN
            IF rel.tgfoid IS DISTINCT FROM 'walfill.journal_truncate()'::pg_catalog.regprocedure
               OR rel.tgenabled <> 'A' THEN
                PERFORM walfill.journal_attach(rel.oid);
            END IF;
        ELSIF rel.tgfoid IS NOT NULL THEN
            left_journal := left_journal || rel.oid;
            PERFORM walfill.journal_detach(rel.oid);
        END IF;
    END LOOP;
    RETURN left_journal;
END
$fn$;

-- The ddl_command_end event trigger.
CREATE FUNCTION walfill.journal_ddl() RETURNS event_trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    rels oid[];
    left_journal oid[];
    doc text;
    failure text;
BEGIN
    BEGIN
        IF walfill.journal_nested() THEN
            RETURN;
        END IF;
        rels := walfill.journal_ddl_targets();
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;
    IF failure IS NULL AND rels IS NULL THEN
        RETURN;
    END IF;
    IF failure IS NULL THEN
        BEGIN
            left_journal := walfill.journal_maintain(rels);
        EXCEPTION WHEN OTHERS THEN
            failure := 'attaching the truncate trigger: ' || SQLERRM;
        END;
        BEGIN
            doc := walfill.journal_message('ddl', TG_TAG, rels, left_journal);
        EXCEPTION WHEN OTHERS THEN
            failure := concat_ws('; ', failure, SQLERRM);
        END;
    END IF;
    IF doc IS NOT NULL THEN
        PERFORM pg_logical_emit_message(true, 'walfill.journal', doc);
    END IF;
    IF failure IS NOT NULL THEN
        BEGIN
            PERFORM walfill.journal_failed(failure, rels);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'walfill catalog journal: %; reporting it failed too: %',
                failure, SQLERRM;
        END;
    END IF;
END
$fn$;

-- The sql_drop event trigger.
CREATE FUNCTION walfill.journal_drop() RETURNS event_trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    targets record;
    doc text;
    failure text;
BEGIN
    BEGIN
        IF walfill.journal_nested() THEN
            RETURN;
        END IF;
        targets := walfill.journal_drop_targets(TG_TAG);
        doc := walfill.journal_message('ddl', TG_TAG, targets.changed, targets.dropped);
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;
    IF doc IS NOT NULL THEN
        PERFORM pg_logical_emit_message(true, 'walfill.journal', doc);
    END IF;
    IF failure IS NOT NULL THEN
        BEGIN
            PERFORM walfill.journal_failed(failure, NULL);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'walfill catalog journal: %; reporting it failed too: %',
                failure, SQLERRM;
        END;
    END IF;
END
$fn$;

-- The statement-level AFTER TRUNCATE trigger: the table's new relfilenode.
CREATE OR REPLACE FUNCTION walfill.journal_truncate() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    doc text;
    failure text;
BEGIN
    BEGIN
        doc := walfill.journal_message('truncate', 'TRUNCATE', ARRAY[TG_RELID], NULL);
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;
    IF doc IS NOT NULL THEN
        PERFORM pg_logical_emit_message(true, 'walfill.journal', doc);
    END IF;
    IF failure IS NOT NULL THEN
        BEGIN
            PERFORM walfill.journal_failed(failure, ARRAY[TG_RELID]);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'walfill catalog journal: %; reporting it failed too: %',
                failure, SQLERRM;
        END;
    END IF;
    RETURN NULL;
END
$fn$;

-- Records that the journal described `rel` (its files) at `at`.
CREATE FUNCTION walfill.journal_record_files(rel oid, at pg_lsn) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
BEGIN
    INSERT INTO walfill.journal_files
    SELECT c.oid,
           CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END,
           pg_catalog.pg_relation_filenode(c.oid),
           CASE WHEN t.oid IS NULL THEN NULL
                WHEN t.reltablespace = 0 THEN d.dattablespace
                ELSE t.reltablespace END,
           pg_catalog.pg_relation_filenode(t.oid),
           at
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_database d ON d.datname = pg_catalog.current_database()
      LEFT JOIN pg_catalog.pg_class t ON t.oid = c.reltoastrelid
     WHERE c.oid = rel AND c.relkind IN ('r', 'm')
    ON CONFLICT DO NOTHING;
END
$fn$;

-- Journals every table (one `setup` message per table, in relid order),
-- attaches the truncate triggers and records the install as an anchor (an
-- LSN before every message, from which decoding finds every table described).
-- Returns the number of tables journaled, of triggers attached, and the LSN
-- of the last message (NULL with no table).
CREATE FUNCTION walfill.journal_setup(OUT tables integer, OUT attached integer, OUT last_lsn pg_lsn)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    rel record;
BEGIN
    tables := 0;
    attached := 0;
    INSERT INTO walfill.journal_anchors (lsn, event)
    VALUES (pg_catalog.pg_current_wal_insert_lsn(), 'setup')
    ON CONFLICT DO NOTHING;
    FOR rel IN
        SELECT c.oid, c.relkind
          FROM walfill.journal_tables() AS j(oid)
          JOIN pg_catalog.pg_class c ON c.oid = j.oid
         ORDER BY c.oid
    LOOP
        IF rel.relkind IN ('r', 'p') AND walfill.journal_attach(rel.oid) THEN
            attached := attached + 1;
        END IF;
        last_lsn := pg_logical_emit_message(
            true, 'walfill.journal',
            walfill.journal_message('setup', 'SETUP', ARRAY[rel.oid], NULL));
        PERFORM walfill.journal_record_files(rel.oid, last_lsn);
        tables := tables + 1;
    END LOOP;
END
$fn$;

-- Journals again every table whose files are not among those the journal
-- recorded for it: CLUSTER and VACUUM FULL give a table new files without
-- firing any trigger (and a TRUNCATE's or a rewrite's own message is not
-- recorded here, so such a table is described once more, harmlessly). Each
-- table (not a materialized view) is locked (ACCESS SHARE, waiting at most
-- `wait`) before it is described, so that no rewrite commits between the
-- description and the message; a table that cannot be locked in time is
-- left for the next run. (The decoder also infers most moves from the WAL
-- alone; this record names the rest.)
-- Returns the tables journaled, those skipped, and the last message's LSN.
CREATE FUNCTION walfill.journal_sync(wait text DEFAULT '2s', OUT tables integer,
                                     OUT skipped integer, OUT last_lsn pg_lsn)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    rel oid;
BEGIN
    tables := 0;
    skipped := 0;
    PERFORM pg_catalog.set_config('lock_timeout', wait, true);
    FOR rel IN
        SELECT c.oid
          FROM walfill.journal_tables() AS j(oid)
          JOIN pg_catalog.pg_class c ON c.oid = j.oid
          JOIN pg_catalog.pg_database d ON d.datname = pg_catalog.current_database()
         WHERE c.relkind IN ('r', 'm')
           AND NOT EXISTS (
               SELECT 1 FROM walfill.journal_files f
                WHERE f.relid = c.oid
                  AND f.spc = CASE c.reltablespace WHEN 0 THEN d.dattablespace
                              ELSE c.reltablespace END
                  AND f.relfilenode = pg_catalog.pg_relation_filenode(c.oid))
         ORDER BY c.oid
    LOOP
        -- LOCK TABLE refuses materialized views: their rewrites (REFRESH)
        -- are journaled, and a CLUSTER of one racing this is left to chance.
        IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = rel) = 'r' THEN
            BEGIN
                EXECUTE pg_catalog.format('LOCK TABLE %s IN ACCESS SHARE MODE',
                                          rel::pg_catalog.regclass);
            EXCEPTION WHEN lock_not_available OR undefined_table THEN
                skipped := skipped + 1;
                CONTINUE;
            END;
        END IF;
        CONTINUE WHEN NOT walfill.journal_is_journaled(rel);
        last_lsn := pg_logical_emit_message(
            true, 'walfill.journal',
            walfill.journal_message('files', 'FILES', ARRAY[rel], NULL));
        PERFORM walfill.journal_record_files(rel, last_lsn);
        tables := tables + 1;
    END LOOP;
END
$fn$;
