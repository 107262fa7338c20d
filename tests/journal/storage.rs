//! DDL that moves a table's storage (partitions, rewrites, tablespaces,
//! persistence, TRUNCATE) or creates and drops tables writes the message the
//! decoder needs, in the statement's transaction.

use serde_json::{json, Value};

use super::expect::{attr, current, only, triggers_on};
use super::{dropped, install, oid, relid, relids, Slot};
use crate::support::TestDb;

/// Partitions, CREATE TABLE AS, materialized views, tablespaces, persistence,
/// TRUNCATE, renames, drops, transactions and DDL inside code.
#[test]
fn storage_and_table_ddl_are_journaled() {
    let db = TestDb::new("journal_storage");
    db.exec(
        "CREATE SCHEMA other;
         CREATE TABLE t (id int PRIMARY KEY, n text);
         CREATE TABLE nk (a int PRIMARY KEY);
         CREATE TYPE mood AS ENUM ('sad');
         CREATE DOMAIN dmood AS mood;
         CREATE TABLE e (m mood);
         CREATE TABLE d (x dmood);",
    );
    let slot = Slot::create(&db);
    install(&db);
    assert_eq!(slot.journal().len(), 4, "one setup message per table");
    let (t, nk, e, d) = (
        relid(&db, "t"),
        relid(&db, "nk"),
        relid(&db, "e"),
        relid(&db, "d"),
    );

    // Partitions: CREATE ... PARTITION OF, ATTACH, DETACH, and ALTER TABLE
    // on the parent journals its partitions too.
    db.exec("CREATE TABLE p (k int, v text) PARTITION BY RANGE (k)");
    let p = relid(&db, "p");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "CREATE TABLE"), p);
    assert_eq!(
        (&rel["kind"], &rel["relfilenode"]),
        (&json!("p"), &Value::Null)
    );
    assert_eq!(triggers_on(&db, "p"), 0);
    db.exec("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)");
    let p1 = relid(&db, "p1");
    let msgs = slot.journal();
    assert_eq!(
        current(&db, only(&msgs, "CREATE TABLE"), p1)["kind"],
        json!("r")
    );
    assert_eq!(triggers_on(&db, "p1"), 0);
    db.exec("CREATE TABLE p2 (k int, v text)");
    let p2 = relid(&db, "p2");
    slot.journal();
    db.exec("ALTER TABLE p ATTACH PARTITION p2 FOR VALUES FROM (10) TO (20)");
    let msgs = slot.journal();
    assert_eq!(relids(only(&msgs, "ALTER TABLE")), vec![p, p1, p2]);
    db.exec("ALTER TABLE p ADD COLUMN w int");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TABLE");
    assert_eq!(relids(m), vec![p, p1, p2]);
    for table in [p, p1, p2] {
        assert_eq!(attr(current(&db, m, table), "w")["attnum"], json!(3));
    }
    db.exec("ALTER TABLE p DETACH PARTITION p2");
    let msgs = slot.journal();
    assert_eq!(relids(only(&msgs, "ALTER TABLE")), vec![p, p1]);

    // CREATE TABLE AS and SELECT INTO: the message follows the rows, in the
    // statement's transaction.
    db.exec("CREATE TABLE ctas AS SELECT g AS n FROM generate_series(1, 3) g");
    let ctas = relid(&db, "ctas");
    let changes = slot.changes();
    let m = changes
        .iter()
        .find_map(|c| super::parse_message(c.xid, &c.line))
        .expect("a message for CREATE TABLE AS");
    assert_eq!(m.content["tag"], json!("CREATE TABLE AS"));
    current(&db, &m, ctas);
    let inserts = changes
        .iter()
        .filter(|c| c.line.starts_with("table public.ctas: INSERT"))
        .collect::<Vec<_>>();
    assert_eq!(inserts.len(), 3, "{changes:#?}");
    assert!(
        inserts.iter().all(|c| c.xid == m.xid),
        "rows and message in one transaction"
    );
    assert_eq!(triggers_on(&db, "ctas"), 0);
    db.exec("SELECT 1 AS one INTO sel");
    let sel = relid(&db, "sel");
    let msgs = slot.journal();
    current(&db, only(&msgs, "SELECT INTO"), sel);
    assert_eq!(triggers_on(&db, "sel"), 0);

    // Materialized views: created and refreshed (a new relfilenode).
    db.exec("CREATE MATERIALIZED VIEW mv AS SELECT id FROM t");
    let mv = relid(&db, "mv");
    let msgs = slot.journal();
    let first = current(&db, only(&msgs, "CREATE MATERIALIZED VIEW"), mv)["relfilenode"].clone();
    db.exec("REFRESH MATERIALIZED VIEW mv");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "REFRESH MATERIALIZED VIEW"), mv);
    assert_eq!(rel["kind"], json!("m"));
    assert_ne!(rel["relfilenode"], first);

    // SET TABLESPACE: the real tablespace, and new relfilenodes.
    let space = format!("{}_space", db.name);
    let mut admin = db.client();
    admin
        .batch_execute("SET allow_in_place_tablespaces = on")
        .unwrap();
    admin
        .batch_execute(&format!("CREATE TABLESPACE {space} LOCATION ''"))
        .unwrap();
    let space_oid = oid(
        &db,
        &format!("SELECT oid FROM pg_tablespace WHERE spcname = '{space}'"),
    );
    db.exec(&format!("ALTER TABLE t SET TABLESPACE {space}"));
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "ALTER TABLE"), t);
    assert_eq!(
        (&rel["spc"], &rel["toast_spc"]),
        (&json!(space_oid), &json!(space_oid))
    );
    db.exec("ALTER TABLE t SET TABLESPACE pg_default");
    assert_eq!(slot.journal().len(), 1);
    db.exec(&format!("DROP TABLESPACE {space}"));

    // SET UNLOGGED leaves the journal; SET LOGGED comes back.
    db.exec("ALTER TABLE nk SET UNLOGGED");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TABLE");
    assert_eq!((relids(m), dropped(m)), (vec![], vec![nk]));
    db.exec("ALTER TABLE nk SET LOGGED");
    let msgs = slot.journal();
    current(&db, only(&msgs, "ALTER TABLE"), nk);

    // TRUNCATE writes no message: the decoder follows it from the WAL.
    db.exec("TRUNCATE nk");
    assert!(slot.journal().is_empty());

    // Renames and schema moves.
    db.exec("ALTER TABLE e RENAME TO e2; ALTER TABLE e2 SET SCHEMA other");
    let msgs = slot.journal();
    assert_eq!(msgs.len(), 2);
    let rel = current(&db, &msgs[1], e);
    assert_eq!(
        (&rel["schema"], &rel["name"]),
        (&json!("other"), &json!("e2"))
    );

    // A dropped domain drops its column: the table is journaled again.
    db.exec("DROP DOMAIN dmood CASCADE");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "DROP DOMAIN"), d);
    assert_eq!(rel["attrs"][0]["dropped"], json!(true));

    // DROP TABLE lists the dropped tables.
    db.exec("DROP TABLE other.e2, sel");
    let msgs = slot.journal();
    let m = only(&msgs, "DROP TABLE");
    let mut gone = dropped(m);
    gone.sort_unstable();
    assert_eq!(gone, {
        let mut v = vec![e, sel];
        v.sort_unstable();
        v
    });

    // Temporary and unlogged tables never appear.
    db.exec(
        "CREATE TEMP TABLE tt (a int); ALTER TABLE tt ADD COLUMN b int; TRUNCATE tt;
         CREATE UNLOGGED TABLE ut (a int); TRUNCATE ut; DROP TABLE tt;",
    );
    assert_eq!(slot.journal().len(), 0);

    // A rolled-back savepoint takes its message with it.
    db.exec(
        "BEGIN;
         CREATE TABLE kept (a int);
         SAVEPOINT s; CREATE TABLE undone (a int); ROLLBACK TO SAVEPOINT s;
         COMMIT;",
    );
    let msgs = slot.journal();
    assert_eq!(
        relids(only(&msgs, "CREATE TABLE")),
        vec![relid(&db, "kept")]
    );

    // DDL inside a DO block and a function.
    db.exec(
        "DO $$ BEGIN EXECUTE 'CREATE TABLE in_do (a int)'; END $$;
         CREATE FUNCTION make_table() RETURNS void LANGUAGE plpgsql
             AS $$ BEGIN CREATE TABLE in_fn (a int); END $$;
         SELECT make_table();",
    );
    let msgs = slot.journal();
    assert_eq!(msgs.len(), 2, "{msgs:#?}");
    assert_eq!(relids(&msgs[0]), vec![relid(&db, "in_do")]);
    assert_eq!(relids(&msgs[1]), vec![relid(&db, "in_fn")]);
    assert_eq!(triggers_on(&db, "in_fn"), 0);

    // Statements that touch no journaled table write nothing.
    db.exec(
        "CREATE VIEW v AS SELECT 1; CREATE SEQUENCE s; CREATE TYPE c AS (a int);
         CREATE INDEX t_id2 ON t (id); COMMENT ON VIEW v IS 'x';",
    );
    let msgs = slot.journal();
    assert_eq!(
        msgs.len(),
        1,
        "only CREATE INDEX (on t) journals: {msgs:#?}"
    );
    assert_eq!(relids(&msgs[0]), vec![t]);
}
