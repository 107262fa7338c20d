//! Setup and DDL on columns, types and keys write the message the decoder
//! needs, with the relfilenodes, columns, missing values, enum labels and keys
//! the catalog has at that moment.

use serde_json::{json, Value};

use super::expect::{assert_current, attr, current, only, triggers_on};
use super::{install, oid, relation, relid, relids, Slot};
use crate::support::TestDb;

/// Setup journals every permanent table (and no temporary or unlogged one),
/// and DDL on columns, types and keys journals what it changed.
#[test]
fn setup_and_column_ddl_are_journaled() {
    let db = TestDb::new("journal_msgs");
    // Before setup: tables of every kind, some not to be journaled.
    db.exec(
        "CREATE SCHEMA other;
         CREATE TABLE pre (id int PRIMARY KEY, body text);
         CREATE TABLE other.pre2 (a int);
         CREATE UNLOGGED TABLE pre_unlogged (a int);
         CREATE TABLE pre_parted (k int) PARTITION BY LIST (k);
         CREATE TABLE pre_part1 PARTITION OF pre_parted FOR VALUES IN (1);
         CREATE MATERIALIZED VIEW pre_mv AS SELECT * FROM pre;
         CREATE VIEW pre_view AS SELECT * FROM pre;
         CREATE SEQUENCE pre_seq;",
    );
    // A temporary table that exists while setup runs.
    let mut holder = db.client();
    holder
        .batch_execute("CREATE TEMP TABLE pre_temp (a int)")
        .unwrap();
    let temp_relid: u32 = holder
        .query_one("SELECT 'pre_temp'::regclass::oid", &[])
        .unwrap()
        .get(0);
    let slot = Slot::create(&db);

    let report = install(&db);
    let setup = slot.journal();
    let mut listed: Vec<u32> = Vec::new();
    for m in &setup {
        assert_eq!(m.content["event"], json!("setup"));
        assert_eq!(m.content["tag"], json!("SETUP"));
        for rel in m.content["relations"].as_array().unwrap() {
            assert_current(&db, rel);
            listed.push(rel["relid"].as_u64().unwrap() as u32);
        }
    }
    listed.sort_unstable();
    let expected: Vec<u32> = ["pre", "other.pre2", "pre_parted", "pre_part1", "pre_mv"]
        .iter()
        .map(|t| relid(&db, t))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(listed, expected, "setup messages: {setup:#?}");
    assert!(!listed.contains(&relid(&db, "pre_unlogged")));
    assert!(!listed.contains(&temp_relid));
    assert_eq!(report.tables, 5);
    assert_eq!(report.old_triggers_removed, 0);
    for t in ["pre", "other.pre2", "pre_parted", "pre_part1"] {
        assert_eq!(
            triggers_on(&db, t),
            0,
            "the journal attached a trigger to {t}"
        );
    }
    drop(holder);

    // CREATE TABLE: the new table, its toast table and its key.
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text, n numeric)");
    let t = relid(&db, "t");
    let msgs = slot.journal();
    let m = only(&msgs, "CREATE TABLE");
    assert_eq!(m.content["event"], json!("ddl"));
    assert_eq!(relids(m), vec![t]);
    let rel = current(&db, m, t);
    assert_eq!(rel["key"], json!(["id"]));
    assert!(rel["toast_relfilenode"].is_u64());
    let types: Vec<u64> = rel["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ty| ty["oid"].as_u64().unwrap())
        .collect();
    assert_eq!(types, vec![23, 25, 1700], "int4, text, numeric");
    assert_eq!(triggers_on(&db, "t"), 0);

    // ADD COLUMN with a default: a missing value, no rewrite.
    db.exec("INSERT INTO t VALUES (1, 'a', 1.5); ALTER TABLE t ADD COLUMN five int DEFAULT 5");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "ALTER TABLE"), t);
    assert_eq!(attr(rel, "five")["missing"], json!("5"));
    assert_eq!(attr(rel, "id")["missing"], Value::Null);

    // DROP COLUMN: the column stays, dropped.
    db.exec("ALTER TABLE t DROP COLUMN v");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TABLE");
    let rel = current(&db, m, t);
    let gone = &rel["attrs"][1];
    assert_eq!(gone["attnum"], json!(2));
    assert_eq!(gone["dropped"], json!(true));
    assert_eq!(gone["type_name"], json!(""));
    assert_eq!(rel["attrs"].as_array().unwrap().len(), 4);

    // ALTER COLUMN TYPE rewrites: a new relfilenode, in the same transaction.
    let before = rel["relfilenode"].clone();
    db.exec("ALTER TABLE t ALTER COLUMN n TYPE text");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "ALTER TABLE"), t);
    assert_ne!(
        rel["relfilenode"], before,
        "a rewrite keeps the relfilenode?"
    );
    assert_eq!(attr(rel, "n")["type_name"], json!("text"));

    // Enums, arrays of them and domains over them: ALTER TYPE journals every
    // table that uses the type, with the new label.
    db.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok');
         CREATE DOMAIN dmood AS mood;
         CREATE TABLE e (m mood, ms mood[]);
         CREATE TABLE d (x dmood);",
    );
    let (e, d) = (relid(&db, "e"), relid(&db, "d"));
    assert_eq!(slot.journal().len(), 2, "one message per CREATE TABLE");
    db.exec("ALTER TYPE mood ADD VALUE 'happy'");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TYPE");
    assert_eq!(relids(m), vec![e, d]);
    let mood = oid(&db, "SELECT 'mood'::regtype::oid");
    for table in [e, d] {
        let rel = current(&db, m, table);
        let ty = rel["types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|ty| ty["oid"] == json!(mood))
            .unwrap_or_else(|| panic!("mood missing from {rel}"));
        let happy = oid(&db, "SELECT oid FROM pg_enum WHERE enumlabel = 'happy'");
        assert_eq!(ty["type"], json!("e"));
        assert_eq!(ty["labels"][2], json!([happy, "happy"]));
        assert_eq!(ty["labels"].as_array().unwrap().len(), 3);
    }
    let rel = relation(m, d).unwrap();
    let domain = rel["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ty| ty["type"] == json!("d"))
        .expect("the domain");
    assert_eq!(domain["base"], json!(mood));
    let rel = relation(m, e).unwrap();
    let array = rel["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ty| ty["is_array"] == json!(true))
        .expect("mood[]");
    assert_eq!(array["elem"], json!(mood));
    db.exec("ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'");
    let msgs = slot.journal();
    assert_eq!(relids(only(&msgs, "ALTER TYPE")), vec![e, d]);

    // A multirange over a range over the enum: its row names its range
    // type, the range's its subtype, and ALTER TYPE on the enum journals
    // the table that only has the multirange.
    db.exec(
        "CREATE TYPE moodrange AS RANGE (subtype = mood);
         CREATE TABLE rg (mr moodmultirange);",
    );
    let rg = relid(&db, "rg");
    slot.journal();
    db.exec("ALTER TYPE mood ADD VALUE 'calm'");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TYPE");
    assert!(relids(m).contains(&rg), "{:?}", relids(m));
    let rel = current(&db, m, rg);
    let row = |name: &str| {
        rel["types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|ty| ty["name"] == json!(name))
            .unwrap_or_else(|| panic!("{name} missing from {rel}"))
            .clone()
    };
    let moodrange = oid(&db, "SELECT 'moodrange'::regtype::oid");
    assert_eq!(row("moodmultirange")["type"], json!("m"));
    assert_eq!(row("moodmultirange")["range"], json!(moodrange));
    assert_eq!(row("moodrange")["subtype"], json!(mood));
    assert_eq!(row("mood")["labels"].as_array().unwrap().len(), 4);

    // A composite inside another: each composite's row lists its attributes
    // (a dropped one with the layout it had), and an attribute added to the
    // inner one journals the table that uses the outer one.
    db.exec(
        "CREATE TYPE cin AS (a int, gone text, b mood);
         ALTER TYPE cin DROP ATTRIBUTE gone;
         CREATE TYPE cout AS (x cin);
         CREATE TABLE ct (v cout);",
    );
    let ct = relid(&db, "ct");
    slot.journal();
    db.exec("ALTER TYPE cin ADD ATTRIBUTE c text");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TYPE");
    assert_eq!(relids(m), vec![ct]);
    let rel = current(&db, m, ct);
    let cin = rel["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ty| ty["name"] == json!("cin"))
        .unwrap_or_else(|| panic!("cin missing from {rel}"));
    assert_eq!(cin["type"], json!("c"));
    let attrs = cin["attrs"].as_array().unwrap();
    let field = |i: usize, key: &str| attrs[i][key].clone();
    assert_eq!(attrs.len(), 4);
    assert_eq!((field(0, "typid"), field(0, "len")), (json!(23), json!(4)));
    assert_eq!(field(1, "dropped"), json!(true));
    assert_eq!(
        (field(1, "len"), field(1, "align")),
        (json!(-1), json!("i"))
    );
    assert_eq!(field(2, "typid"), json!(mood));
    assert_eq!(field(3, "typid"), json!(25));
    assert!(
        rel["types"]
            .as_array()
            .unwrap()
            .iter()
            .any(|ty| ty["oid"] == json!(25)),
        "the attributes' types are listed too"
    );

    // A column added to a table changes the values of its row type: the
    // table with a column of that type is journaled with the new shape.
    db.exec("CREATE TABLE base (a int); CREATE TABLE uses (b base[]);");
    let uses = relid(&db, "uses");
    slot.journal();
    db.exec("ALTER TABLE base ADD COLUMN z int");
    let msgs = slot.journal();
    let m = only(&msgs, "ALTER TABLE");
    assert!(relids(m).contains(&uses), "{:?}", relids(m));

    // Replica identity and keys.
    db.exec("ALTER TABLE t REPLICA IDENTITY FULL");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "ALTER TABLE"), t);
    assert_eq!((&rel["replident"], &rel["key"]), (&json!("f"), &json!([])));
    db.exec("ALTER TABLE t ALTER COLUMN five SET NOT NULL; CREATE UNIQUE INDEX t_five ON t (five)");
    assert_eq!(slot.journal().len(), 2);
    db.exec("ALTER TABLE t REPLICA IDENTITY USING INDEX t_five");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "ALTER TABLE"), t);
    assert_eq!(
        (&rel["replident"], &rel["key"]),
        (&json!("i"), &json!(["five"]))
    );
    db.exec("DROP INDEX t_five");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "DROP INDEX"), t);
    assert_eq!((&rel["replident"], &rel["key"]), (&json!("i"), &json!([])));
    db.exec("CREATE TABLE nk (a int NOT NULL, b int)");
    let nk = relid(&db, "nk");
    slot.journal();
    db.exec("ALTER TABLE nk ADD PRIMARY KEY (a)");
    let msgs = slot.journal();
    let rel = current(&db, only(&msgs, "ALTER TABLE"), nk);
    assert_eq!(
        (&rel["replident"], &rel["key"]),
        (&json!("d"), &json!(["a"]))
    );
}

/// The message format, field by field, on one table.
#[test]
fn a_message_has_every_field_of_the_format() {
    let db = TestDb::new("journal_format");
    let slot = Slot::create(&db);
    install(&db);
    db.exec(
        "CREATE TABLE f (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                         label varchar(20) NOT NULL,
                         twice bigint GENERATED ALWAYS AS (id * 2) STORED,
                         tags text[]);
         INSERT INTO f (label) VALUES ('x');
         ALTER TABLE f ADD COLUMN note text DEFAULT 'it''s \"quoted\", with, commas';
         SET TimeZone = 'America/New_York'; SET DateStyle = 'German';
         ALTER TABLE f ADD COLUMN at timestamptz DEFAULT '2024-01-02 03:04:05.5+00',
                       ADD COLUMN ratio float8 DEFAULT 0.1;",
    );
    let f = relid(&db, "f");
    let msgs = slot.journal();
    assert_eq!(msgs.len(), 3);
    let rel = current(&db, &msgs[2], f);
    let keys: Vec<&str> = rel
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        vec![
            "attrs",
            "key",
            "kind",
            "name",
            "persistence",
            "relfilenode",
            "relid",
            "replident",
            "schema",
            "spc",
            "toast_relfilenode",
            "toast_spc",
            "types"
        ]
    );
    let label = attr(rel, "label");
    assert_eq!(label["typmod"], json!(24), "varchar(20): 20 + 4");
    assert_eq!(label["type_name"], json!("character varying"));
    assert_eq!(label["storage"], json!("x"));
    assert_eq!(label["generated"], json!(""));
    assert_eq!(attr(rel, "twice")["generated"], json!("s"));
    assert_eq!(
        attr(rel, "note")["missing"],
        json!("it's \"quoted\", with, commas")
    );
    // Whatever the session's settings: ISO dates, UTC, shortest floats.
    assert_eq!(
        attr(rel, "at")["missing"],
        json!("2024-01-02 03:04:05.5+00")
    );
    assert_eq!(attr(rel, "ratio")["missing"], json!("0.1"));
    let text_array = rel["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ty| ty["oid"] == json!(1009))
        .expect("text[]");
    assert_eq!(
        text_array,
        &json!({"oid": 1009, "name": "text[]", "type": "b", "len": -1, "byval": false,
                "align": "i", "elem": 25, "base": 0, "delim": ",", "is_array": true,
                "labels": [], "subtype": null, "range": null, "attrs": null,
                "output": null})
    );
    assert!(
        !msgs[2].raw.contains(": ") && !msgs[2].raw.contains(", \""),
        "not compact"
    );
    let keys: Vec<&str> = msgs[2]
        .content
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = keys;
    sorted.sort_unstable();
    assert_eq!(sorted, vec!["dropped", "event", "relations", "tag", "v"]);
}
