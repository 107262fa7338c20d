//! The battery of statements the journal must not change: every kind of DDL
//! the issue names, run one by one on one session.

/// The statements, in order, for a database where `role` is a non-superuser
/// login role.
pub(super) fn battery(role: &str) -> Vec<String> {
    let mut sql: Vec<String> = [
        // The user's own event triggers: a log of every command and every
        // dropped object, a NOTICE at every command start, and one that runs
        // DDL of its own on some new tables.
        "CREATE TABLE ddl_log (id serial PRIMARY KEY, event text, tag text, object text)",
        "CREATE FUNCTION log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
         DECLARE r record;
         BEGIN
             FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
                 INSERT INTO ddl_log (event, tag, object)
                 VALUES (tg_event, r.command_tag, r.object_identity);
             END LOOP;
         END $$",
        "CREATE EVENT TRIGGER a_log_ddl ON ddl_command_end EXECUTE FUNCTION log_ddl()",
        "CREATE FUNCTION log_drop() RETURNS event_trigger LANGUAGE plpgsql AS $$
         DECLARE r record;
         BEGIN
             FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
                 INSERT INTO ddl_log (event, tag, object)
                 VALUES (tg_event, tg_tag, r.object_type || ' ' || r.object_identity);
             END LOOP;
         END $$",
        "CREATE EVENT TRIGGER z_log_drop ON sql_drop EXECUTE FUNCTION log_drop()",
        "CREATE FUNCTION notice_start() RETURNS event_trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE NOTICE 'user trigger: % starts', tg_tag; END $$",
        "CREATE EVENT TRIGGER m_notice ON ddl_command_start EXECUTE FUNCTION notice_start()",
        "CREATE FUNCTION add_audit_column() RETURNS event_trigger LANGUAGE plpgsql AS $$
         DECLARE r record;
         BEGIN
             FOR r IN SELECT * FROM pg_event_trigger_ddl_commands()
                       WHERE object_type = 'table' AND object_identity LIKE '%.audited\\_%' LOOP
                 EXECUTE format('ALTER TABLE %s ADD COLUMN audited_by text DEFAULT current_user',
                                r.object_identity);
             END LOOP;
         END $$",
        "CREATE EVENT TRIGGER b_audit ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
             EXECUTE FUNCTION add_audit_column()",
        "CREATE FUNCTION log_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO ddl_log (event, tag, object) VALUES ('trigger', TG_OP, TG_TABLE_NAME);
             RETURN NULL;
         END $$",
        // Extensions and types.
        "CREATE EXTENSION citext",
        "CREATE EXTENSION hstore",
        "CREATE EXTENSION pg_trgm",
        "CREATE TYPE mood AS ENUM ('sad', 'ok')",
        "CREATE TYPE pair AS (a int, b text)",
        "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
        "CREATE TYPE floatrange AS RANGE (subtype = float8)",
        // Tables with every kind of column, inheritance, indexes.
        "CREATE TABLE base (id int PRIMARY KEY, name citext, attrs hstore, m mood, ms mood[],
                            p pair, n posint, r floatrange)",
        "INSERT INTO base VALUES (1, 'One', 'a=>1', 'sad', '{sad,ok}', (1, 'x'), 5, '[1,2)'),
                                 (2, 'Two', NULL, 'ok', '{}', NULL, 7, NULL)",
        "CREATE INDEX base_name_trgm ON base USING gin ((name::text) gin_trgm_ops)",
        "CREATE TABLE child (extra int) INHERITS (base)",
        "INSERT INTO child VALUES (3, 'Three', NULL, 'sad', NULL, NULL, 9, NULL, 42)",
        "ALTER TABLE base ADD COLUMN flag boolean DEFAULT true",
        "ALTER TABLE base ALTER COLUMN n TYPE bigint",
        "ALTER TABLE base DROP COLUMN r",
        "ALTER TABLE base RENAME COLUMN name TO title",
        "ALTER TABLE base ADD COLUMN title int",
        "ALTER TYPE mood ADD VALUE 'happy'",
        "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'",
        "ALTER TYPE pair ADD ATTRIBUTE c int",
        "ALTER TYPE pair ADD ATTRIBUTE c int CASCADE",
        "ALTER DOMAIN posint ADD CONSTRAINT small CHECK (VALUE < 1000000)",
        "ALTER TABLE base REPLICA IDENTITY FULL",
        "ALTER TABLE base REPLICA IDENTITY DEFAULT",
        "ALTER TABLE base ALTER COLUMN title SET STORAGE EXTERNAL",
        "ALTER TABLE base SET (fillfactor = 70)",
        "ALTER TABLE child NO INHERIT base",
        "ALTER TABLE child INHERIT base",
        "CREATE TRIGGER user_truncate AFTER TRUNCATE ON base
             FOR EACH STATEMENT EXECUTE FUNCTION log_truncate()",
        // Partitioned tables.
        "CREATE TABLE parted (k int PRIMARY KEY, v text) PARTITION BY RANGE (k)",
        "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE parted_2 (k int NOT NULL, v text)",
        "ALTER TABLE parted ATTACH PARTITION parted_2 FOR VALUES FROM (100) TO (200)",
        "INSERT INTO parted SELECT g, 'v' || g FROM generate_series(0, 199) g",
        "ALTER TABLE parted ADD COLUMN w int DEFAULT 1",
        "ALTER TABLE parted DETACH PARTITION parted_2",
        "CREATE TABLE parted_default PARTITION OF parted DEFAULT",
        "ALTER TABLE parted ALTER COLUMN v TYPE varchar(10)",
        "TRUNCATE parted_1",
        // Temporary and unlogged tables.
        "CREATE TEMP TABLE scratch (a int)",
        "INSERT INTO scratch VALUES (1)",
        "ALTER TABLE scratch ADD COLUMN b text",
        "TRUNCATE scratch",
        "CREATE TEMP TABLE tmp_ctas AS SELECT * FROM base",
        "SELECT * INTO TEMP tmp_sel FROM base",
        "CREATE UNLOGGED TABLE ul (a int PRIMARY KEY)",
        "INSERT INTO ul SELECT generate_series(1, 10)",
        "ALTER TABLE ul SET LOGGED",
        "ALTER TABLE ul SET UNLOGGED",
        "TRUNCATE ul",
        "ALTER TABLE ul SET LOGGED",
        "INSERT INTO ul VALUES (11)",
        // Views and materialized views.
        "CREATE VIEW base_view AS SELECT id, title FROM base",
        "CREATE OR REPLACE VIEW base_view AS SELECT id, title, flag FROM base",
        "ALTER VIEW base_view RENAME TO base_view2",
        "CREATE RULE ignore_inserts AS ON INSERT TO base_view2 DO INSTEAD NOTHING",
        "CREATE MATERIALIZED VIEW base_mv AS SELECT id, title FROM base",
        "CREATE UNIQUE INDEX base_mv_id ON base_mv (id)",
        "REFRESH MATERIALIZED VIEW base_mv",
        "REFRESH MATERIALIZED VIEW CONCURRENTLY base_mv",
        "CREATE MATERIALIZED VIEW empty_mv AS SELECT 1 AS one WITH NO DATA",
        // CREATE TABLE AS, SELECT INTO, typed tables, generated columns.
        "CREATE TABLE ctas AS SELECT id, title FROM base",
        "SELECT id, m INTO sel_into FROM base",
        "CREATE TABLE typed OF pair",
        "CREATE TABLE audited_orders (id int)",
        "INSERT INTO audited_orders (id) VALUES (1)",
        "CREATE TABLE gen (id int GENERATED ALWAYS AS IDENTITY, twice int
                           GENERATED ALWAYS AS (id * 2) STORED)",
        "INSERT INTO gen DEFAULT VALUES",
        "ALTER TABLE gen ALTER COLUMN id RESTART WITH 100",
        "INSERT INTO gen DEFAULT VALUES",
        // Keys, TRUNCATE with and without CASCADE, the user's truncate trigger.
        "CREATE TABLE fk_parent (id int PRIMARY KEY)",
        "CREATE TABLE fk_child (id int PRIMARY KEY, parent int REFERENCES fk_parent)",
        "INSERT INTO fk_parent VALUES (1), (2)",
        "INSERT INTO fk_child VALUES (1, 1)",
        "TRUNCATE fk_parent",
        "TRUNCATE fk_parent CASCADE",
        "INSERT INTO fk_parent VALUES (3)",
        "TRUNCATE base",
        "INSERT INTO base (id, title, m, n) VALUES (10, 'Ten', 'happy', 10)",
        "TRUNCATE ONLY base RESTART IDENTITY",
        "INSERT INTO base (id, title, m, n) VALUES (11, 'Eleven', 'fine', 11)",
        // An empty table turned into a view (PostgreSQL 15 allows it only
        // for a table without triggers).
        "CREATE TABLE becomes_view (id int, title text)",
        "CREATE RULE \"_RETURN\" AS ON SELECT TO becomes_view DO INSTEAD
             SELECT id, title FROM base",
        "SELECT count(*) FROM becomes_view",
        // DDL in DO blocks and functions, with and without exception handlers.
        "DO $$ BEGIN
             EXECUTE 'CREATE TABLE from_do (a int)';
             EXECUTE 'ALTER TABLE from_do ADD COLUMN b int DEFAULT 2';
         END $$",
        "DO $$ BEGIN
             BEGIN CREATE TABLE from_do (a int);
             EXCEPTION WHEN duplicate_table THEN RAISE NOTICE 'from_do exists'; END;
         END $$",
        "CREATE FUNCTION make_tables(n int) RETURNS int LANGUAGE plpgsql AS $$
         BEGIN
             FOR i IN 1..n LOOP
                 EXECUTE format('CREATE TABLE made_%s (a int PRIMARY KEY)', i);
                 EXECUTE format('INSERT INTO made_%s VALUES (%s)', i, i);
                 EXECUTE format('TRUNCATE made_%s', i);
             END LOOP;
             RETURN n;
         END $$",
        "SELECT make_tables(3)",
        "SELECT make_tables(3)",
        // Explicit transactions, savepoints rolled back, an aborted transaction.
        "BEGIN",
        "CREATE TABLE in_txn (a int)",
        "SAVEPOINT s1",
        "ALTER TABLE in_txn ADD COLUMN b int",
        "CREATE TABLE rolled_back (a int)",
        "TRUNCATE in_txn",
        "ROLLBACK TO SAVEPOINT s1",
        "ALTER TABLE in_txn ADD COLUMN c int",
        "SAVEPOINT s2",
        "DROP TABLE in_txn",
        "ROLLBACK TO SAVEPOINT s2",
        "COMMIT",
        "BEGIN",
        "CREATE TABLE aborted (a int)",
        "ALTER TABLE aborted ADD COLUMN a int",
        "CREATE TABLE after_error (a int)",
        "ROLLBACK",
        "BEGIN",
        "CREATE TEMP TABLE on_commit (a int) ON COMMIT DROP",
        "INSERT INTO on_commit VALUES (1)",
        "COMMIT",
        // Schemas, policies, comments, grants.
        "CREATE SCHEMA sch CREATE TABLE sch_t (a int) CREATE VIEW sch_v AS SELECT * FROM sch_t",
        "ALTER SCHEMA sch RENAME TO sch2",
        "ALTER TABLE ctas SET SCHEMA sch2",
        "ALTER TABLE base ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY everything ON base USING (true)",
        "COMMENT ON TABLE base IS 'the base table'",
        "COMMENT ON COLUMN base.title IS 'its title'",
        // Maintenance that rewrites without DDL events.
        "CREATE INDEX CONCURRENTLY base_title ON base (title)",
        "REINDEX TABLE base",
        "CLUSTER base USING base_pkey",
        "VACUUM FULL child",
        // DDL with session_replication_role = replica (user triggers stay quiet).
        "SET session_replication_role = replica",
        "CREATE TABLE in_replica_mode (a int)",
        "TRUNCATE in_replica_mode",
        "RESET session_replication_role",
        // The user switches their own event trigger off and on.
        "ALTER EVENT TRIGGER m_notice DISABLE",
        "CREATE TABLE quiet (a int)",
        "ALTER EVENT TRIGGER m_notice ENABLE",
        // Drops, with and without CASCADE.
        "DROP TABLE fk_parent",
        "DROP TABLE fk_parent CASCADE",
        "DROP EXTENSION citext",
        "DROP EXTENSION citext CASCADE",
        "DROP TYPE mood",
        "DROP TYPE mood CASCADE",
        "DROP DOMAIN posint CASCADE",
        "DROP SCHEMA sch2 CASCADE",
        "DROP TABLE made_1, made_2",
        "DROP MATERIALIZED VIEW empty_mv",
        "DROP TABLE parted_2",
        "DROP INDEX base_title",
        "DROP EVENT TRIGGER b_audit",
        "CREATE TABLE audited_after (id int)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    // A non-superuser running DDL on its own tables (and failing on others').
    for stmt in [
        format!("CREATE SCHEMA app AUTHORIZATION {role}"),
        format!("GRANT SELECT ON base TO {role}"),
        format!("GRANT INSERT ON ddl_log TO {role}"),
        format!("GRANT USAGE ON SEQUENCE ddl_log_id_seq TO {role}"),
        format!("SET ROLE {role}"),
        "CREATE TABLE app.owned (id int PRIMARY KEY, v text)".into(),
        "INSERT INTO app.owned VALUES (1, 'a'), (2, 'b')".into(),
        "ALTER TABLE app.owned ADD COLUMN w int DEFAULT 3".into(),
        "CREATE TABLE app.owned_copy AS SELECT * FROM app.owned".into(),
        "SELECT * INTO app.owned_sel FROM app.owned".into(),
        "TRUNCATE app.owned_copy".into(),
        "CREATE TEMP TABLE role_tmp (a int)".into(),
        "CREATE INDEX ON app.owned (v)".into(),
        "ALTER TABLE app.owned REPLICA IDENTITY FULL".into(),
        "ALTER TABLE app.owned ALTER COLUMN v TYPE varchar(5)".into(),
        "CREATE TABLE app.audited_by_role (id int)".into(),
        "DO $$ BEGIN CREATE TABLE app.role_do (a int); DROP TABLE app.role_do; END $$".into(),
        "DROP TABLE app.owned_copy".into(),
        "CREATE EVENT TRIGGER not_allowed ON ddl_command_end EXECUTE FUNCTION log_ddl()".into(),
        "ALTER TABLE base ADD COLUMN not_mine int".into(),
        "TRUNCATE base".into(),
        "RESET ROLE".into(),
    ] {
        sql.push(stmt);
    }
    sql
}
