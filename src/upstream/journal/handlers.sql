-- The catalog journal, part 2: the triggers that write it.
--
-- * walfill.journal_ddl (event trigger on ddl_command_end) journals every
--   table a statement created or changed;
-- * walfill.journal_drop (event trigger on sql_drop) lists dropped tables and
--   journals tables that lost columns or key indexes;
-- * walfill.journal_setup journals every table once.
--
-- Nothing is attached to the tables themselves: TRUNCATE, which fires no
-- event trigger, is followed from the WAL by the decoder (its heap record
-- names the tables, and their new files are created just before it).
--
-- The triggers must never make a user's statement fail: each step runs in its
-- own exception block, and a failure becomes a walfill.journal.error message
-- and a WARNING. The message is built inside a block but written outside it:
-- a block that writes costs a subtransaction ID, and a migration running many
-- statements in one transaction would overflow the 64 that PostgreSQL caches
-- per backend (which slows every other session's snapshots). Writing a
-- logical message in a transaction that already has an ID cannot fail short
-- of running out of memory. The journal runs no DDL of its own.

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
                         AND (schema_name NOT IN ('pg_catalog', 'information_schema',
                                                  'pg_toast', 'walfill')
                              OR (schema_name IN ('pg_catalog', 'information_schema')
                                  AND objid >= 16384))),
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
    at pg_lsn;
    rel oid;
BEGIN
    BEGIN
        rels := walfill.journal_ddl_targets();
        -- An unlogged table is not journaled: one an ALTER TABLE made
        -- unlogged leaves the journal (naming one that was unlogged before
        -- is harmless).
        IF TG_TAG = 'ALTER TABLE' THEN
            left_journal := ARRAY(SELECT c.oid FROM pg_catalog.pg_class c
                                   WHERE c.oid = ANY (rels) AND c.relpersistence = 'u');
        END IF;
        IF rels IS NOT NULL THEN
            doc := walfill.journal_message('ddl', TG_TAG, rels, left_journal);
        END IF;
    EXCEPTION WHEN OTHERS THEN
        failure := SQLERRM;
    END;
    IF doc IS NOT NULL THEN
        at := pg_logical_emit_message(true, 'walfill.journal', doc);
        -- The files the message described, recorded as a setup records
        -- them: a table's first row then says where its creation is.
        -- Never at the cost of the statement.
        BEGIN
            FOREACH rel IN ARRAY rels LOOP
                IF walfill.journal_is_journaled(rel) THEN
                    PERFORM walfill.journal_record_files(rel, at);
                END IF;
            END LOOP;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'walfill catalog journal: recording the files of %: %',
                rels, SQLERRM;
        END;
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

-- Journals every table (one `setup` message per table, in relid order) and
-- records the install as an anchor (an LSN before every message, from which
-- decoding finds every table described). Returns the number of tables
-- journaled and the LSN of the last message (NULL with no table).
CREATE FUNCTION walfill.journal_setup(OUT tables integer, OUT last_lsn pg_lsn)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    rel record;
BEGIN
    tables := 0;
    INSERT INTO walfill.journal_anchors (lsn, event)
    VALUES (pg_catalog.pg_current_wal_insert_lsn(), 'setup')
    ON CONFLICT DO NOTHING;
    FOR rel IN
        SELECT j.oid FROM walfill.journal_tables() AS j(oid) ORDER BY j.oid
    LOOP
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
-- firing any trigger (and neither a TRUNCATE nor a rewrite's own message is
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
