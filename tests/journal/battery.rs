//! The journal never changes what a user's statement does: the same battery of
//! DDL runs in a database without the journal and in one with it (working, or
//! deliberately broken), and every statement ends the same way, with the same
//! notices, leaving the same catalogs and the same rows.

use std::sync::{Arc, Mutex};

use postgres::NoTls;

use super::statements::battery;
use super::{install, Message, Role, Slot};
use crate::support::TestDb;

/// How one statement ended: its error (SQLSTATE, message, detail) if any,
/// and the notices it raised.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    result: Result<(), String>,
    notices: Vec<String>,
}

/// Runs `statements` one by one on one session of `url`.
fn run(url: &str, statements: &[String]) -> Vec<Outcome> {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&notices);
    let mut config: postgres::Config = url.parse().expect("a database URL");
    config.notice_callback(move |n| {
        let mut text = format!("{}: {}", n.severity(), n.message());
        if let Some(detail) = n.detail() {
            text.push_str(&format!(" (detail: {detail})"));
        }
        sink.lock().unwrap().push(text);
    });
    let mut client = config
        .connect(NoTls)
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    statements
        .iter()
        .map(|sql| {
            let result = client
                .batch_execute(sql)
                .map_err(|e| match e.as_db_error() {
                    Some(db) => format!(
                        "{} {} (detail: {:?})",
                        db.code().code(),
                        db.message(),
                        db.detail()
                    ),
                    None => e.to_string(),
                });
            Outcome {
                result,
                notices: std::mem::take(&mut *notices.lock().unwrap()),
            }
        })
        .collect()
}

/// The user-visible catalog, without walfill's objects and without OIDs:
/// relations, columns, types, triggers, event triggers, indexes, constraints.
const CATALOG: &str = r#"
WITH rel AS (
    SELECT c.*, n.nspname
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'walfill')
       AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
)
SELECT format('class %I.%I kind=%s persistence=%s natts=%s replident=%s partition=%s '
              'index=%s rls=%s subclass=%s owner=%s options=%s populated=%s spc=%s',
              nspname, relname, relkind, relpersistence, relnatts, relreplident,
              relispartition, relhasindex, relrowsecurity, relhassubclass,
              relowner::regrole, reloptions, relispopulated, reltablespace)
  FROM rel
UNION ALL
SELECT format('attr %I.%I %s %s %s notnull=%s def=%s missing=%s:%s dropped=%s gen=%s '
              'identity=%s storage=%s', r.nspname, r.relname, a.attnum, a.attname,
              CASE WHEN a.atttypid = 0 THEN '-' ELSE a.atttypid::regtype::text END,
              a.attnotnull, a.atthasdef, a.atthasmissing, a.attmissingval::text,
              a.attisdropped, a.attgenerated, a.attidentity, a.attstorage)
  FROM rel r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0
UNION ALL
SELECT format('type %I.%I %s len=%s elem=%s base=%s notnull=%s default=%s labels=%s',
              n.nspname, t.typname, t.typtype, t.typlen,
              CASE WHEN t.typelem = 0 THEN '-' ELSE t.typelem::regtype::text END,
              CASE WHEN t.typbasetype = 0 THEN '-' ELSE t.typbasetype::regtype::text END,
              t.typnotnull, t.typdefault,
              (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                 FROM pg_enum e WHERE e.enumtypid = t.oid))
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'walfill')
   AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
UNION ALL
SELECT format('trigger %I.%I %s type=%s enabled=%s internal=%s function=%s',
              r.nspname, r.relname, regexp_replace(tg.tgname, '[0-9]+', 'N', 'g'),
              tg.tgtype, tg.tgenabled, tg.tgisinternal, tg.tgfoid::regproc)
  FROM rel r JOIN pg_trigger tg ON tg.tgrelid = r.oid
UNION ALL
SELECT format('event trigger %I %s enabled=%s function=%s tags=%s',
              evtname, evtevent, evtenabled, evtfoid::regproc, evttags)
  FROM pg_event_trigger WHERE evtname NOT LIKE 'walfill\_journal\_%'
UNION ALL
SELECT format('index %I.%I on %I primary=%s unique=%s replident=%s keys=%s valid=%s',
              r.nspname, r.relname, i.indrelid::regclass, i.indisprimary, i.indisunique,
              i.indisreplident, i.indkey, i.indisvalid)
  FROM rel r JOIN pg_index i ON i.indexrelid = r.oid
UNION ALL
SELECT format('constraint %I on %s %s %s', co.conname, co.conrelid::regclass, co.contype,
              pg_get_constraintdef(co.oid))
  FROM pg_constraint co JOIN rel r ON r.oid = co.conrelid
ORDER BY 1
"#;

/// [`CATALOG`] of `db`.
fn catalog(db: &TestDb) -> Vec<String> {
    db.client()
        .query(CATALOG, &[])
        .expect("reading the catalog")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A digest of the rows of every table and populated materialized view, but
/// the user's log (see [`assert_same_user_log`]).
fn contents(db: &TestDb) -> Vec<String> {
    let mut client = db.client();
    let tables: Vec<String> = client
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind IN ('r', 'm') AND c.relispopulated AND c.relname <> 'ddl_log'
                AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'walfill')
                AND n.nspname NOT LIKE 'pg\\_temp\\_%'
              ORDER BY 1",
            &[],
        )
        .expect("listing tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    tables
        .iter()
        .map(|t| {
            let digest: String = client
                .query_one(
                    &format!(
                        "SELECT count(*) || ' ' || md5(COALESCE(string_agg(x::text, E'\\n' \
                         ORDER BY x::text), '')) FROM ONLY {t} x"
                    ),
                    &[],
                )
                .unwrap_or_else(|e| panic!("reading {t}: {e}"))
                .get(0);
            format!("{t}: {digest}")
        })
        .collect()
}

/// What the user's event and truncate triggers logged, in order, with OIDs
/// (in the names of toast tables, rewrites' transient tables and internal
/// triggers) blotted out.
fn user_log(db: &TestDb) -> Vec<String> {
    db.client()
        .query(
            "SELECT regexp_replace(concat_ws(' ', event, tag, object), '[0-9]{4,}', 'N', 'g')
               FROM ddl_log ORDER BY id",
            &[],
        )
        .expect("reading the user's log")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Asserts that the user's event and truncate triggers logged the same with
/// the journal as without it.
fn assert_same_user_log(without: &TestDb, with: &TestDb) {
    assert_eq!(user_log(without), user_log(with));
}

/// Asserts that two runs of the battery ended the same way, statement by
/// statement, ignoring notices `ignore` accepts.
fn assert_same_outcomes(
    statements: &[String],
    without: &[Outcome],
    with: &[Outcome],
    ignore: impl Fn(&str) -> bool,
) {
    for (i, sql) in statements.iter().enumerate() {
        let mut theirs = with[i].clone();
        theirs.notices.retain(|n| !ignore(n));
        assert_eq!(
            without[i], theirs,
            "statement {i} ends differently with the journal:\n{sql}"
        );
    }
}

fn is_journal_warning(notice: &str) -> bool {
    notice.starts_with("WARNING: walfill catalog journal:")
}

/// The journal at work changes nothing a user can see.
#[test]
fn the_journal_changes_nothing_a_statement_does() {
    let role = Role::create("journal_user", "");
    let plain = TestDb::new("journal_plain");
    let journaled = TestDb::new("journal_on");
    let slot = Slot::create(&journaled);
    install(&journaled);
    slot.journal();

    let statements = battery(&role.0);
    let without = run(&plain.url(), &statements);
    let with = run(&journaled.url(), &statements);
    assert_same_outcomes(&statements, &without, &with, |_| false);
    let failed = without.iter().filter(|o| o.result.is_err()).count();
    assert!(
        failed >= 10,
        "the battery should include failing statements, {failed} failed"
    );
    assert!(without
        .iter()
        .any(|o| o.notices.iter().any(|n| n.contains("user trigger"))));

    assert_same_user_log(&plain, &journaled);
    assert_eq!(catalog(&plain), catalog(&journaled));
    assert_eq!(contents(&plain), contents(&journaled));
    let log = plain.value("SELECT count(*) FROM ddl_log").unwrap();
    assert!(
        log.parse::<u32>().unwrap() > 100,
        "the user's event triggers logged {log} rows"
    );

    // The journal worked all along (slot.journal() fails on an error message).
    let messages: Vec<Message> = slot.journal();
    assert!(
        messages.len() > 50,
        "only {} journal messages",
        messages.len()
    );
}

/// A broken journal warns and reports its failure in the WAL, and still
/// changes nothing a user can see.
#[test]
fn a_failing_journal_only_warns() {
    let role = Role::create("journal_user", "");
    let plain = TestDb::new("journal_plain2");
    let broken = TestDb::new("journal_broken");
    let slot = Slot::create(&broken);
    install(&broken);
    slot.journal();
    broken.exec(
        "CREATE OR REPLACE FUNCTION walfill.journal_relation(rel oid) RETURNS json
         LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'journal damaged on purpose'; END $$",
    );

    let statements = battery(&role.0);
    let without = run(&plain.url(), &statements);
    let with = run(&broken.url(), &statements);
    assert_same_outcomes(&statements, &without, &with, is_journal_warning);
    let warnings = with
        .iter()
        .flat_map(|o| &o.notices)
        .filter(|n| is_journal_warning(n))
        .count();
    assert!(warnings > 20, "only {warnings} warnings");

    assert_same_user_log(&plain, &broken);
    assert_eq!(catalog(&plain), catalog(&broken));
    assert_eq!(contents(&plain), contents(&broken));

    let messages = slot.messages();
    let errors: Vec<&Message> = messages
        .iter()
        .filter(|m| m.prefix == walfill::upstream::journal::ERROR_PREFIX)
        .collect();
    assert!(errors.len() > 20, "only {} error messages", errors.len());
    for m in &errors {
        assert!(m.transactional);
        assert_eq!(m.content["v"], serde_json::json!(1));
        assert!(
            m.content["error"]
                .as_str()
                .is_some_and(|e| e.contains("journal damaged on purpose")),
            "{}",
            m.raw
        );
        assert!(m.content["relids"].is_array());
    }
    assert!(errors
        .iter()
        .any(|m| !m.content["relids"].as_array().unwrap().is_empty()));
    // Only drops (which need no description) still get through.
    for m in messages
        .iter()
        .filter(|m| m.prefix == walfill::upstream::journal::PREFIX)
    {
        assert_eq!(m.content["relations"], serde_json::json!([]), "{}", m.raw);
    }
}
