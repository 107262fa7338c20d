//! Tables dropped, truncated and rewritten after the range decoded: the
//! live catalog no longer describes the files the range wrote, so the
//! decoder learns them from the catalog journal in the archive (read from
//! the journal's install on) and, for a `CLUSTER` or `VACUUM FULL`, from the
//! files the journal recorded when a walfill command last ran. What nothing
//! describes is named in a warning and makes the exit non-zero.

use super::{copy_segments_from, Oracle};
use crate::archiver::LocalArchive;
use crate::support::TestDb;

/// Runs each statement of `sql` on its own (VACUUM runs in no transaction
/// block).
fn each(db: &TestDb, sql: &str) {
    for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        db.exec(statement);
    }
}

/// What `walfill setup` or `backfill` does on the source when it starts.
fn a_walfill_command_runs(db: &TestDb) {
    db.exec("SELECT * FROM walfill.journal_sync()");
}

#[test]
fn tables_dropped_truncated_and_rewritten_since_decode_like_the_slot() {
    let db = TestDb::new("oracle_history");
    db.exec(
        "CREATE TABLE kept (id int PRIMARY KEY, v text);
         CREATE TABLE gone (id int PRIMARY KEY, v text);
         CREATE TABLE emptied (id int PRIMARY KEY, v text);
         CREATE TABLE clustered (id int PRIMARY KEY, v text);
         CREATE TABLE vacuumed (id int PRIMARY KEY, v text, big text);
         CREATE TABLE twice (id int PRIMARY KEY, v text);
         INSERT INTO kept VALUES (0, 'before the journal');",
    );
    crate::journal::install(&db);
    // Work between the install and the range: its DDL is only in the WAL.
    db.exec(
        "ALTER TABLE kept ADD COLUMN w int DEFAULT 7;
         INSERT INTO gone VALUES (0, 'before the slot');
         CREATE TABLE later (id int PRIMARY KEY, v text);
         SELECT pg_switch_wal();",
    );
    let gone_file = db
        .value(
            "SELECT concat_ws('/', CASE reltablespace WHEN 0 THEN dattablespace ELSE reltablespace
                                   END, d.oid, pg_relation_filenode(c.oid))
               FROM pg_class c, pg_database d
              WHERE c.oid = 'gone'::regclass AND d.datname = current_database()",
        )
        .unwrap();
    let o = Oracle::on(db);
    o.db.exec(
        "INSERT INTO kept VALUES (1, 'one', 1);
         INSERT INTO gone VALUES (1, 'one'), (2, 'two');
         UPDATE gone SET v = 'uno' WHERE id = 1;
         INSERT INTO emptied VALUES (1, 'one');
         INSERT INTO clustered VALUES (2, 'b'), (1, 'a');
         INSERT INTO vacuumed VALUES (1, 'a', repeat('big value ', 5000));
         INSERT INTO twice VALUES (1, 'a');
         INSERT INTO later VALUES (1, 'later');",
    );
    each(
        &o.db,
        "TRUNCATE emptied;
         INSERT INTO emptied VALUES (2, 'after the truncate');
         CLUSTER clustered USING clustered_pkey;
         INSERT INTO clustered VALUES (3, 'after the cluster');
         UPDATE clustered SET v = 'A' WHERE id = 1;
         VACUUM FULL vacuumed;
         UPDATE vacuumed SET v = 'b' WHERE id = 1;
         INSERT INTO vacuumed VALUES (2, 'c', repeat('another big one ', 5000));
         CLUSTER twice USING twice_pkey;
         INSERT INTO twice VALUES (2, 'after the first cluster');
         VACUUM FULL clustered;
         INSERT INTO clustered VALUES (5, 'between two rewrites');
         VACUUM FULL clustered;
         INSERT INTO clustered VALUES (6, 'no walfill command ran between them');",
    );
    a_walfill_command_runs(&o.db);
    each(
        &o.db,
        "DELETE FROM clustered WHERE id = 2;
         CLUSTER twice;
         INSERT INTO twice VALUES (3, 'after the second cluster');
         DELETE FROM gone WHERE id = 2;
         ALTER TABLE later RENAME TO renamed;
         INSERT INTO renamed VALUES (2, 'renamed');",
    );
    a_walfill_command_runs(&o.db);
    each(
        &o.db,
        "DROP TABLE gone, renamed;
         TRUNCATE kept;
         VACUUM FULL vacuumed;",
    );
    let out = o.assert_same(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let expected = o.expected();
    for line in [
        "table public.gone: UPDATE: id[integer]:1 v[text]:'uno'",
        "table public.clustered: INSERT: id[integer]:3 v[text]:'after the cluster'",
        "table public.clustered: INSERT: id[integer]:5 v[text]:'between two rewrites'",
        "table public.twice: INSERT: id[integer]:3 v[text]:'after the second cluster'",
        "table public.renamed: INSERT: id[integer]:2 v[text]:'renamed'",
    ] {
        assert!(
            expected.text.contains(line),
            "the slot did not print {line}"
        );
    }

    // An archive that does not reach back to the journal's install: the
    // dropped table's files are named, and the exit is not 0.
    let partial = LocalArchive::new("history");
    copy_segments_from(&o, &partial, &o.restart);
    let out = o.decode(&partial.url(), &expected.to, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("does not reach back to the catalog journal's install"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("relation file {gone_file} (the first at")),
        "the dropped table's file is not named:\n{stderr}"
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("table public.kept: INSERT: id[integer]:1 v[text]:'one' w[integer]:1"),
        "{printed}"
    );
    assert!(!printed.contains("table public.gone"), "{printed}");
}

/// `CREATE TABLE AS` and `SELECT INTO` write a table's rows before the
/// journal can describe it (its message follows the statement): the rows
/// are held until the message and print like test_decoding's, TOASTed
/// values included; so does `CREATE MATERIALIZED VIEW` before PostgreSQL
/// 17. The rows a rewrite copies into a table's new file
/// (ALTER COLUMN TYPE, REFRESH MATERIALIZED VIEW) print nothing, there as
/// here.
#[test]
fn rows_written_by_the_statement_that_creates_the_table() {
    let db = TestDb::new("oracle_ctas");
    db.exec(
        "CREATE TABLE src (id int PRIMARY KEY, v text);
         INSERT INTO src SELECT g, 'row ' || g FROM generate_series(1, 300) g;
         CREATE MATERIALIZED VIEW mv AS SELECT id, v FROM src WHERE id < 5;",
    );
    crate::journal::install(&db);
    let o = Oracle::on(db);
    each(
        &o.db,
        "CREATE TABLE copied AS SELECT id, v, repeat(v, 3000) AS big FROM src WHERE id <= 3;
         SELECT id * 2 AS id, upper(v) AS v INTO selected FROM src WHERE id BETWEEN 10 AND 12;
         BEGIN;
         CREATE TABLE in_txn AS SELECT id FROM src WHERE id > 298;
         INSERT INTO in_txn VALUES (1000);
         COMMIT;
         CREATE TABLE empty_one AS SELECT * FROM src WHERE false;
         CREATE MATERIALIZED VIEW mv2 AS SELECT id, v FROM src WHERE id < 4;
         ALTER TABLE copied ALTER COLUMN id TYPE bigint;
         INSERT INTO copied VALUES (4, 'four', 'after the rewrite');
         REFRESH MATERIALIZED VIEW mv;
         BEGIN;
         CREATE TABLE rolled_back AS SELECT id FROM src WHERE id < 3;
         ROLLBACK;
         CREATE TABLE many AS SELECT g AS id, repeat('x', 100) AS v FROM generate_series(1, 2000) g;",
    );
    let out = o.assert_same(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let expected = o.expected();
    for line in [
        "table public.copied: INSERT: id[integer]:1 v[text]:'row 1' big[text]:'row 1row 1",
        "table public.selected: INSERT: id[integer]:20 v[text]:'ROW 10'",
        "table public.in_txn: INSERT: id[integer]:299",
        "table public.many: INSERT: id[integer]:2000",
    ] {
        assert!(
            expected.text.contains(line),
            "the slot did not print {line}"
        );
    }
    // From PostgreSQL 17 on, CREATE MATERIALIZED VIEW fills the view the
    // way REFRESH does: its rows print no more.
    assert_eq!(
        expected
            .text
            .contains("table public.mv2: INSERT: id[integer]:3 v[text]:'row 3'"),
        o.db.major() < 17,
        "the slot's rows of mv2 on PostgreSQL {}",
        o.db.major()
    );
}

/// A composite type changed after a table was created from a value of it:
/// the row written by the creating statement prints as the type was then.
#[test]
fn a_composite_changed_after_create_table_as() {
    let db = TestDb::new("oracle_ctas_composite");
    crate::journal::install(&db);
    let o = Oracle::on(db);
    each(
        &o.db,
        "CREATE TYPE test_type3 AS (a int);
         CREATE TABLE test_tbl3 (c) AS SELECT '(1)'::test_type3;
         ALTER TYPE test_type3 DROP ATTRIBUTE a, ADD ATTRIBUTE b int;
         INSERT INTO test_tbl3 VALUES ('(2)');",
    );
    o.assert_same(&[]);
}

/// A table a user created in `pg_catalog` is no catalog to logical decoding
/// (its OID is a user's): its changes print like any table's, and the
/// journal describes it, also once it is dropped.
#[test]
fn a_users_table_in_pg_catalog_decodes_like_the_slot() {
    let db = TestDb::new("oracle_in_pg_catalog");
    crate::journal::install(&db);
    let o = Oracle::on(db);
    o.db.exec(
        "SET allow_system_table_mods = on;
         CREATE TABLE pg_catalog.users_own (id int PRIMARY KEY, v text);
         INSERT INTO pg_catalog.users_own VALUES (1, 'one'), (2, 'two');",
    );
    o.db.exec(
        "UPDATE pg_catalog.users_own SET v = 'uno' WHERE id = 1;
         DELETE FROM pg_catalog.users_own WHERE id = 2;
         SET allow_system_table_mods = on;
         DROP TABLE pg_catalog.users_own;",
    );
    let out = o.assert_same(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(
        o.expected()
            .text
            .contains("table pg_catalog.users_own: UPDATE: id[integer]:1 v[text]:'uno'"),
        "the slot did not print the update"
    );
}

/// CLUSTER in a transaction whose earlier statements created other files
/// (a table with a key and a TOAST table, an index): the table moves to the
/// rewrite's new heap, not to an index file of those statements, whether
/// it has rows or none. No walfill command runs between: the WAL alone
/// tells, and the last TRUNCATE leaves the live catalog describing none of
/// the files written. (Rows the same transaction writes to the table
/// after its CLUSTER are not decoded: the move is only known at the
/// commit. They are named in a warning, and the exit is 3.)
#[test]
fn cluster_after_other_new_files_in_one_transaction() {
    let db = TestDb::new("oracle_cluster_txn");
    db.exec(
        "CREATE TABLE full_one (id int PRIMARY KEY, v text);
         INSERT INTO full_one SELECT g, repeat('v', g) FROM generate_series(1, 50) g;
         CREATE TABLE empty_one (id int PRIMARY KEY, v text);",
    );
    crate::journal::install(&db);
    let o = Oracle::on(db);
    o.db.exec(
        "BEGIN;
         CREATE TABLE side (id int PRIMARY KEY, v text);
         CREATE INDEX ON full_one (v);
         CLUSTER full_one USING full_one_pkey;
         INSERT INTO side VALUES (1, 'after the cluster');
         COMMIT",
    );
    o.db.exec(
        "BEGIN;
         CREATE TABLE side2 (id int PRIMARY KEY, v text);
         CLUSTER empty_one USING empty_one_pkey;
         COMMIT",
    );
    o.db.exec(
        "INSERT INTO full_one VALUES (101, 'later');
         UPDATE full_one SET v = 'changed' WHERE id = 3;
         INSERT INTO empty_one VALUES (1, 'later');",
    );
    o.db.exec("TRUNCATE full_one, empty_one");
    let out = o.assert_same(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let expected = o.expected();
    for line in [
        "table public.full_one: UPDATE: id[integer]:3 v[text]:'changed'",
        "table public.empty_one: INSERT: id[integer]:1 v[text]:'later'",
    ] {
        assert!(
            expected.text.contains(line),
            "the slot did not print {line}"
        );
    }
}
