//! Checks of journal messages against the live catalog.

use serde_json::{json, Value};

use super::{relation, Message};
use crate::support::TestDb;

/// Asserts that `rel` (a relation of a message) describes the table as the
/// live catalog has it now, reading the catalog with the test's own queries.
pub(super) fn assert_current(db: &TestDb, rel: &Value) {
    let id = rel["relid"].as_u64().expect("relid");
    let mut client = db.client();
    let row = client
        .query_one(
            "SELECT n.nspname::text, c.relname::text, c.relkind::text, c.relreplident::text,
                    pg_relation_filenode(c.oid)::bigint,
                    CASE WHEN c.reltoastrelid <> 0
                         THEN pg_relation_filenode(c.reltoastrelid)::bigint END,
                    COALESCE(NULLIF(c.reltablespace, 0), d.dattablespace)::bigint
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_database d ON d.datname = current_database()
              WHERE c.oid = $1::bigint::oid",
            &[&(id as i64)],
        )
        .expect("reading the live catalog");
    let name = format!("{}.{}", row.get::<_, String>(0), row.get::<_, String>(1));
    assert_eq!(rel["schema"], json!(row.get::<_, String>(0)), "{name}");
    assert_eq!(rel["name"], json!(row.get::<_, String>(1)), "{name}");
    assert_eq!(rel["kind"], json!(row.get::<_, String>(2)), "{name}");
    assert_eq!(rel["persistence"], json!("p"), "{name}");
    assert_eq!(rel["replident"], json!(row.get::<_, String>(3)), "{name}");
    assert_eq!(
        rel["relfilenode"],
        json!(row.get::<_, Option<i64>>(4)),
        "{name}"
    );
    assert_eq!(
        rel["toast_relfilenode"],
        json!(row.get::<_, Option<i64>>(5)),
        "{name}"
    );
    assert_eq!(rel["spc"], json!(row.get::<_, i64>(6)), "{name}");
    let attrs = client
        .query(
            "SELECT attnum::int, attname::text, atttypid::bigint, attlen::int, attbyval,
                    attalign::text, attisdropped
               FROM pg_attribute WHERE attrelid = $1::bigint::oid AND attnum > 0
              ORDER BY attnum",
            &[&(id as i64)],
        )
        .expect("reading the live columns");
    let live: Vec<Value> = attrs
        .iter()
        .map(|a| {
            json!([
                a.get::<_, i32>(0),
                a.get::<_, String>(1),
                a.get::<_, i64>(2),
                a.get::<_, i32>(3),
                a.get::<_, bool>(4),
                a.get::<_, String>(5),
                a.get::<_, bool>(6)
            ])
        })
        .collect();
    let journaled: Vec<Value> = rel["attrs"]
        .as_array()
        .expect("attrs")
        .iter()
        .map(|a| {
            json!([
                a["attnum"],
                a["name"],
                a["typid"],
                a["len"],
                a["byval"],
                a["align"],
                a["dropped"]
            ])
        })
        .collect();
    assert_eq!(journaled, live, "columns of {name}");
}

/// The only message among `messages`, which must carry `tag`.
pub(super) fn only<'m>(messages: &'m [Message], tag: &str) -> &'m Message {
    assert_eq!(
        messages.len(),
        1,
        "expected one message for {tag}: {messages:#?}"
    );
    let m = &messages[0];
    assert!(m.transactional, "{tag}: not transactional");
    assert_eq!(m.content["v"], json!(1));
    assert_eq!(m.content["tag"], json!(tag), "{}", m.raw);
    m
}

/// The relation `relid` in message `m`, checked against the live catalog.
pub(super) fn current<'m>(db: &TestDb, m: &'m Message, relid: u32) -> &'m Value {
    let rel = relation(m, relid).unwrap_or_else(|| panic!("{relid} missing from {}", m.raw));
    assert_current(db, rel);
    rel
}

/// The column `name` of a journaled relation.
pub(super) fn attr<'r>(rel: &'r Value, name: &str) -> &'r Value {
    rel["attrs"]
        .as_array()
        .expect("attrs")
        .iter()
        .find(|a| a["name"] == json!(name))
        .unwrap_or_else(|| panic!("no column {name} in {rel}"))
}

/// How many triggers `table` has.
pub(super) fn triggers_on(db: &TestDb, table: &str) -> i64 {
    db.value(&format!(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = '{table}'::regclass"
    ))
    .and_then(|n| n.parse().ok())
    .expect("counting triggers")
}
