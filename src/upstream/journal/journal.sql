-- The catalog journal, part 1: describing tables.
--
-- These functions turn a table's storage schema (relfilenodes, columns, types,
-- enum labels, replica identity key) into the JSON of one journal message.
-- Part 2 (handlers.sql) writes the messages from the event and truncate
-- triggers.
--
-- Every function runs with search_path pinned to pg_catalog, pg_temp, so no
-- user object can shadow a built-in; catalog tables and walfill's functions
-- are also named with their schema. Object IDs are cast to bigint because
-- PostgreSQL renders the oid type as a JSON string.

-- Whether `rel` is journaled: a permanent ordinary table, partitioned table or
-- materialized view outside the system schemas and walfill's own schema
-- (whose tables are walfill's state, when source and destination are one
-- database). A table a user created in pg_catalog or information_schema
-- (an OID from 16384, FirstNormalObjectId, on) is journaled: logical
-- decoding prints its changes like any other table's. Keep in step with
-- journal_tables and journal_relation.
CREATE FUNCTION walfill.journal_is_journaled(rel oid) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
BEGIN
    RETURN (
        SELECT EXISTS (
            SELECT 1
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = rel
               AND c.relkind IN ('r', 'p', 'm')
               AND c.relpersistence = 'p'
               AND (n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'walfill')
                    OR (n.nspname IN ('pg_catalog', 'information_schema') AND c.oid >= 16384))));
END
$fn$;

-- Every journaled table, in relid order (the same test as journal_is_journaled).
CREATE FUNCTION walfill.journal_tables() RETURNS SETOF oid
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
BEGIN
    RETURN QUERY
    SELECT c.oid
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind IN ('r', 'p', 'm')
       AND c.relpersistence = 'p'
       AND (n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'walfill')
            OR (n.nspname IN ('pg_catalog', 'information_schema') AND c.oid >= 16384))
     ORDER BY c.oid;
END
$fn$;

-- The name of a type as a session with search_path "$user", public (the one
-- walfill pins, and the default) writes it, the way logical decoding's output
-- plugins name column types: format_type qualifies every type outside
-- pg_catalog here, and that path finds a type of schema public unless
-- pg_catalog has one of the same name (for an array, of its element's name).
CREATE FUNCTION walfill.journal_type_name(typid oid) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
    SELECT CASE
             WHEN n.nspname = 'public'
              AND NOT EXISTS (SELECT 1
                                FROM pg_catalog.pg_type c
                               WHERE c.typnamespace = 'pg_catalog'::pg_catalog.regnamespace
                                 AND c.typname = COALESCE(e.typname, t.typname))
             THEN pg_catalog.substr(pg_catalog.format_type(typid, NULL), 8)
             ELSE pg_catalog.format_type(typid, NULL)
           END
      FROM pg_catalog.pg_type t
      JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
      LEFT JOIN pg_catalog.pg_type e
        ON e.oid = t.typelem
       AND t.typsubscript = 'pg_catalog.array_subscript_handler'::pg_catalog.regproc
     WHERE t.oid = typid
$fn$;

-- Every type the columns of `rel` reach: the column types, and recursively
-- their element types (arrays), base types (domains), subtypes (ranges),
-- range types (multiranges) and attribute types (composites). Built-in types
-- too. A range carries its subtype, a multirange its range type, a composite
-- its attributes (dropped ones included, with their layout), a user-defined
-- base type its output function when that is a built-in one (the C name of a
-- LANGUAGE internal function, like int4out).
CREATE FUNCTION walfill.journal_types(rel oid) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $fn$
BEGIN
    RETURN (
        WITH RECURSIVE reached(typid) AS (
            SELECT a.atttypid
              FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped
            UNION
            SELECT next.typid
              FROM reached
              JOIN pg_catalog.pg_type ty ON ty.oid = reached.typid
             CROSS JOIN LATERAL (SELECT ty.typelem
                                 UNION ALL SELECT ty.typbasetype
                                 UNION ALL SELECT r.rngsubtype FROM pg_catalog.pg_range r
                                            WHERE r.rngtypid = ty.oid
                                 UNION ALL SELECT r.rngtypid FROM pg_catalog.pg_range r
                                            WHERE r.rngmultitypid = ty.oid
                                 UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a
                                            WHERE ty.typrelid <> 0 AND a.attrelid = ty.typrelid
                                              AND a.attnum > 0 AND NOT a.attisdropped)
                                 AS next(typid)
             WHERE next.typid <> 0
        )
        SELECT COALESCE(array_to_json(array_agg(row_to_json(t) ORDER BY t.oid)), '[]')
          FROM (SELECT ty.oid::bigint AS oid,
                       walfill.journal_type_name(ty.oid) AS name,
                       ty.typtype AS type,
                       ty.typlen AS len,
                       ty.typbyval AS byval,
                       ty.typalign AS align,
                       ty.typelem::bigint AS elem,
                       ty.typbasetype::bigint AS base,
                       ty.typdelim AS delim,
                       ty.typsubscript = 'pg_catalog.array_subscript_handler'::pg_catalog.regproc
                           AS is_array,
                       COALESCE((SELECT array_to_json(array_agg(
                                            format('[%s,%s]', e.oid, to_json(e.enumlabel))::json
                                            ORDER BY e.enumsortorder))
                                   FROM pg_catalog.pg_enum e
                                  WHERE e.enumtypid = ty.oid), '[]') AS labels,
                       (SELECT r.rngsubtype::bigint FROM pg_catalog.pg_range r
                         WHERE r.rngtypid = ty.oid) AS subtype,
                       (SELECT r.rngtypid::bigint FROM pg_catalog.pg_range r
                         WHERE r.rngmultitypid = ty.oid) AS range,
                       CASE WHEN ty.typtype = 'c' THEN
                           COALESCE((SELECT array_to_json(array_agg(row_to_json(a)
                                                                    ORDER BY a.attnum))
                                       FROM (SELECT at.attnum,
                                                    at.atttypid::bigint AS typid,
                                                    at.attlen AS len,
                                                    at.attbyval AS byval,
                                                    at.attalign AS align,
                                                    at.attisdropped AS dropped
                                               FROM pg_catalog.pg_attribute at
                                              WHERE at.attrelid = ty.typrelid
                                                AND at.attnum > 0) AS a), '[]')
                       END AS attrs,
                       (SELECT p.prosrc
                          FROM pg_catalog.pg_proc p
                          JOIN pg_catalog.pg_language l ON l.oid = p.prolang
                         WHERE p.oid = ty.typoutput AND l.lanname = 'internal'
                           AND ty.typtype = 'b' AND ty.oid >= 16384) AS output
                  FROM reached
                  JOIN pg_catalog.pg_type ty ON ty.oid = reached.typid) AS t);
END
$fn$;

-- The journal's description of `rel`, or NULL when `rel` is not journaled
-- (the same test as journal_is_journaled, inlined). Missing values are
-- rendered the same whatever the session's settings: dates in ISO form,
-- times in UTC, floats in their shortest exact form, bytea in hex.
CREATE FUNCTION walfill.journal_relation(rel oid) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET DateStyle = 'ISO, MDY'
SET IntervalStyle = postgres
SET TimeZone = 'UTC'
SET extra_float_digits = 1
SET bytea_output = hex
AS $fn$
BEGIN
    RETURN (
        SELECT row_to_json(r)
          FROM (SELECT c.oid::bigint AS relid,
                       n.nspname AS schema,
                       c.relname AS name,
                       c.relkind AS kind,
                       c.relpersistence AS persistence,
                       (CASE c.reltablespace WHEN 0 THEN d.dattablespace
                        ELSE c.reltablespace END)::bigint AS spc,
                       pg_relation_filenode(c.oid)::bigint AS relfilenode,
                       pg_relation_filenode(t.oid)::bigint AS toast_relfilenode,
                       (CASE WHEN t.oid IS NULL THEN NULL
                             WHEN t.reltablespace = 0 THEN d.dattablespace
                             ELSE t.reltablespace END)::bigint AS toast_spc,
                       c.relreplident AS replident,
                       COALESCE((
                           SELECT array_to_json(array_agg(a.attname ORDER BY k.ord))
                             FROM pg_catalog.pg_index i
                            CROSS JOIN LATERAL unnest(i.indkey::pg_catalog.int2[])
                                       WITH ORDINALITY AS k(attnum, ord)
                             JOIN pg_catalog.pg_attribute a
                               ON a.attrelid = c.oid AND a.attnum = k.attnum
                            WHERE i.indrelid = c.oid
                              AND k.ord <= i.indnkeyatts
                              AND ((c.relreplident = 'd' AND i.indisprimary)
                                OR (c.relreplident = 'i' AND i.indisreplident))), '[]')
                           AS key,
                       COALESCE((
                           SELECT array_to_json(array_agg(row_to_json(col) ORDER BY col.attnum))
                             FROM (SELECT a.attnum,
                                          a.attname AS name,
                                          a.atttypid::bigint AS typid,
                                          a.atttypmod AS typmod,
                                          a.attlen AS len,
                                          a.attbyval AS byval,
                                          a.attalign AS align,
                                          a.attstorage AS storage,
                                          a.attisdropped AS dropped,
                                          a.attgenerated AS generated,
                                          CASE WHEN a.atthasmissing
                                               THEN array_to_string(a.attmissingval, '')
                                          END AS missing,
                                          CASE WHEN a.attisdropped THEN ''
                                               ELSE walfill.journal_type_name(a.atttypid)
                                          END AS type_name
                                     FROM pg_catalog.pg_attribute a
                                    WHERE a.attrelid = c.oid AND a.attnum > 0) AS col), '[]')
                           AS attrs,
                       walfill.journal_types(c.oid) AS types
                  FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  JOIN pg_catalog.pg_database d ON d.datname = current_database()
                  LEFT JOIN pg_catalog.pg_class t ON t.oid = c.reltoastrelid
                 WHERE c.oid = rel
                   AND c.relkind IN ('r', 'p', 'm')
                   AND c.relpersistence = 'p'
                   AND (n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast',
                                          'walfill')
                        OR (n.nspname IN ('pg_catalog', 'information_schema')
                            AND c.oid >= 16384))) AS r);
END
$fn$;

-- The content of one journal message: the current state of the journaled
-- tables among `rels`, and the relids in `dropped`; NULL when there is
-- nothing to say. One line of JSON without spaces (row_to_json and
-- array_to_json write none). Only reads, so that the callers can run it in an
-- exception block that costs no subtransaction ID, and write the message
-- outside it.
CREATE FUNCTION walfill.journal_message(event text, tag text, rels oid[], dropped oid[])
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    described json;
    gone json;
BEGIN
    SELECT array_to_json(array_agg(j ORDER BY s.r)) INTO described
      FROM (SELECT DISTINCT r FROM unnest(rels) AS u(r)) AS s
     CROSS JOIN LATERAL walfill.journal_relation(s.r) AS j
     WHERE j IS NOT NULL;
    SELECT array_to_json(array_agg(s.r::bigint ORDER BY s.r)) INTO gone
      FROM (SELECT DISTINCT r FROM unnest(dropped) AS u(r)) AS s;
    IF described IS NULL AND gone IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT row_to_json(m)::text
              FROM (SELECT 1 AS v,
                           event AS event,
                           tag AS tag,
                           COALESCE(described, '[]') AS relations,
                           COALESCE(gone, '[]') AS dropped) AS m);
END
$fn$;

-- Reports a failure of the journal without failing the user's statement: a
-- `walfill.journal.error` message (rolled back with the statement, like any
-- journal message) and a WARNING to the client.
CREATE FUNCTION walfill.journal_failed(failure text, rels oid[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $fn$
DECLARE
    doc text;
BEGIN
    BEGIN
        SELECT row_to_json(m)::text INTO doc
          FROM (SELECT 1 AS v,
                       failure AS error,
                       COALESCE((SELECT array_to_json(array_agg(DISTINCT r::bigint))
                                   FROM unnest(rels) AS u(r)), '[]') AS relids) AS m;
        PERFORM pg_logical_emit_message(true, 'walfill.journal.error', doc);
    EXCEPTION WHEN OTHERS THEN
        failure := failure || '; writing walfill.journal.error failed too: ' || SQLERRM;
    END;
    RAISE WARNING 'walfill catalog journal: %', failure
        USING HINT = 'The statement itself succeeded. WAL replay cannot follow the tables it '
                     'changed until the journal works again: run walfill setup again once '
                     'the cause is fixed.';
END
$fn$;
