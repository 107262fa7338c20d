//! Installing, checking, reinstalling and removing the journal.

use serde_json::json;
use walfill::error::Error;
use walfill::upstream::journal;

use super::{check, install, relid, relids, try_install, try_uninstall, with_client, Role, Slot};
use crate::support::TestDb;

/// Counts of the journal's objects: event triggers, truncate triggers (of
/// earlier versions), functions in schema walfill (but the state's
/// `request_backfill`), and whether the schema exists.
fn leftovers(db: &TestDb) -> (i64, i64, i64, bool) {
    let row = db
        .client()
        .query_one(
            "SELECT (SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'walfill%'),
                    (SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                       JOIN pg_namespace n ON n.oid = p.pronamespace
                      WHERE t.tgname = 'walfill_journal_truncate' OR n.nspname = 'walfill'),
                    (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                      WHERE n.nspname = 'walfill'
                        AND p.proname NOT IN ('request_backfill', 'chunk_sees')),
                    EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'walfill')",
            &[],
        )
        .expect("counting the journal's objects");
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// Install is idempotent, check follows what happens to the journal, and
/// uninstall removes every trace while DDL keeps working.
#[test]
fn install_check_reinstall_and_uninstall() {
    let db = TestDb::new("journal_life");
    db.exec("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (x text)");
    let problems = check(&db.url());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("not installed") && problems[0].contains("walfill setup"));

    let slot = Slot::create(&db);
    let first = install(&db);
    assert_eq!((first.tables, first.old_triggers_removed), (2, 0));
    assert_eq!(first.fingerprint, journal::fingerprint());
    assert!(first.setup_lsn.is_some());
    assert_eq!(slot.journal().len(), 2, "one setup message per table");
    assert_eq!(check(&db.url()), Vec::<String>::new());

    // Reinstalling replaces everything and journals every table again.
    let second = install(&db);
    assert_eq!((second.tables, second.old_triggers_removed), (2, 0));
    assert!(second.setup_lsn > first.setup_lsn);
    let setup = slot.journal();
    assert_eq!(setup.len(), 2);
    assert!(setup.iter().all(|m| m.content["event"] == json!("setup")));
    assert_eq!(leftovers(&db).0, 2, "two event triggers, not four");
    assert_eq!(leftovers(&db).1, 0, "nothing attached to the tables");

    // check names what is wrong, and reinstalling repairs it.
    db.exec(
        "ALTER EVENT TRIGGER walfill_journal_drop DISABLE;
         CREATE OR REPLACE FUNCTION walfill.journal_version() RETURNS text
             LANGUAGE sql AS $$ SELECT 'v1-0000000000000000'::text $$;",
    );
    let problems = check(&db.url());
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("outdated")));
    assert!(problems.iter().any(|p| p.contains("walfill_journal_drop")));
    slot.changes();
    install(&db);
    assert_eq!(check(&db.url()), Vec::<String>::new());
    slot.changes();

    // The journal works after a reinstall.
    db.exec("ALTER TABLE b ADD COLUMN y int");
    let msgs = slot.journal();
    assert_eq!(msgs.len(), 1);
    assert_eq!(relids(&msgs[0]), vec![relid(&db, "b")]);

    // Uninstall leaves nothing behind, and DDL still works without messages.
    try_uninstall(&db.url()).expect("uninstalling");
    assert_eq!(leftovers(&db), (0, 0, 0, false));
    db.exec(
        "CREATE TABLE c (id int); ALTER TABLE c ADD COLUMN v text; TRUNCATE a, c;
         ALTER TABLE a ALTER COLUMN id TYPE bigint; DROP TABLE b;",
    );
    assert!(slot.messages().is_empty(), "messages after uninstall");
    let problems = check(&db.url());
    assert!(problems[0].contains("not installed"), "{problems:?}");
    // Uninstalling twice is fine.
    try_uninstall(&db.url()).expect("uninstalling again");
}

/// Installing over an earlier version removes the truncate trigger it
/// attached to every table: nothing of the journal stays on a table.
#[test]
fn install_removes_an_earlier_versions_truncate_triggers() {
    let db = TestDb::new("journal_upgrade");
    db.exec(
        "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (x text);
         CREATE SCHEMA walfill;
         CREATE FUNCTION walfill.journal_truncate() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RETURN NULL; END $$;
         CREATE TRIGGER walfill_journal_truncate AFTER TRUNCATE ON a
             FOR EACH STATEMENT EXECUTE FUNCTION walfill.journal_truncate();
         CREATE TRIGGER walfill_journal_truncate AFTER TRUNCATE ON b
             FOR EACH STATEMENT EXECUTE FUNCTION walfill.journal_truncate();",
    );
    assert_eq!(leftovers(&db).1, 2);
    let report = install(&db);
    assert_eq!((report.tables, report.old_triggers_removed), (2, 2));
    assert_eq!(leftovers(&db).1, 0, "the old triggers are gone");
    assert_eq!(check(&db.url()), Vec::<String>::new());
    db.exec("TRUNCATE a, b");
}

/// walfill's state tables share schema walfill when source and destination
/// are one database: the journal neither journals nor touches them, and
/// uninstall leaves them and the schema.
#[test]
fn state_tables_are_left_alone() {
    let db = TestDb::new("journal_state");
    with_client(&db.url(), |c| Box::pin(walfill::control::state::install(c)))
        .expect("installing the state schema");
    db.exec("CREATE TABLE src (id int PRIMARY KEY)");
    let slot = Slot::create(&db);
    let report = install(&db);
    assert_eq!(report.tables, 1, "only src is journaled");
    let msgs = slot.journal();
    assert_eq!(relids(&msgs[0]), vec![relid(&db, "src")]);
    let triggers_on_state = db
        .value(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'walfill' AND t.tgname = 'walfill_journal_truncate'",
        )
        .unwrap();
    assert_eq!(triggers_on_state, "0");
    db.exec("ALTER TABLE walfill.versions ADD COLUMN scratch int; ALTER TABLE walfill.versions DROP COLUMN scratch");
    assert!(
        slot.journal().is_empty(),
        "walfill's own tables are not journaled"
    );

    try_uninstall(&db.url()).expect("uninstalling");
    let (events, triggers, functions, schema) = leftovers(&db);
    assert_eq!((events, triggers, functions, schema), (0, 0, 0, true));
    assert_eq!(
        db.value("SELECT to_regclass('walfill.versions') IS NOT NULL")
            .as_deref(),
        Some("true")
    );
}

/// A role that is not a superuser gets the fix, not a half-installed journal;
/// once a superuser installed it, the role sees a working journal.
#[test]
fn install_needs_a_superuser() {
    let role = Role::create("journal_user", "");
    let db = TestDb::new("journal_nosuper");
    let url = role.url(&db);
    match try_install(&url) {
        Err(Error::Problems(problems)) => {
            assert_eq!(problems.len(), 1);
            assert!(
                problems[0].contains("needs a superuser")
                    && problems[0].contains("WALFILL_SOURCE_URL=")
                    && !problems[0].contains("ALTER ROLE"),
                "{problems:?}"
            );
        }
        other => panic!("expected a problem, got {other:?}"),
    }
    // Nothing to remove needs no superuser.
    assert!(try_uninstall(&url).is_ok());
    assert_eq!(leftovers(&db), (0, 0, 0, false));
    let problems = check(&url);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("not installed"));
    install(&db);
    assert_eq!(check(&url), Vec::<String>::new());
    match try_uninstall(&url) {
        Err(Error::Problems(problems)) => assert!(problems[0].contains("walfill teardown")),
        other => panic!("expected a problem, got {other:?}"),
    }
}
