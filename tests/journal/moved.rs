//! CLUSTER and VACUUM FULL move a table's files without firing a trigger:
//! a walfill command asks the journal to describe again each table whose
//! files it has not recorded, and the journal records the install as the
//! anchor `decode` reads it from.

use walfill::upstream::journal;

use super::{install, relid, relids, with_client, Role, Slot};
use crate::support::TestDb;

fn record(url: &str) -> Option<u64> {
    with_client(url, |c| Box::pin(journal::record_moved_files(c)))
}

fn recorded(url: &str) -> journal::Recorded {
    with_client(url, |c| Box::pin(journal::recorded(c)))
        .expect("reading what the journal recorded")
        .expect("the journal is installed")
}

#[test]
fn moved_files_are_journaled_once_and_recorded() {
    let db = TestDb::new("journal_moved");
    db.exec(
        "CREATE TABLE a (id int PRIMARY KEY, v text);
         CREATE TABLE b (id int PRIMARY KEY);
         CREATE MATERIALIZED VIEW m AS SELECT id FROM b;",
    );
    assert_eq!(record(&db.url()), None, "no journal, nothing to record");
    let slot = Slot::create(&db);
    let installed = install(&db);
    let (a, b, m) = (relid(&db, "a"), relid(&db, "b"), relid(&db, "m"));
    let at_install = recorded(&db.url());
    assert_eq!(at_install.anchors.len(), 1);
    assert!(at_install.anchors[0] <= installed.setup_lsn.expect("messages"));
    let mut files: Vec<u32> = at_install.files.iter().map(|f| f.relid).collect();
    files.sort();
    assert_eq!(files, vec![a, b, m]);
    assert!(at_install
        .files
        .iter()
        .any(|f| f.relid == a && f.toast.is_some()));
    slot.journal();

    // Nothing moved: nothing to say.
    assert_eq!(record(&db.url()), Some(0));
    assert!(slot.journal().is_empty());

    db.exec("CLUSTER a USING a_pkey");
    db.exec("VACUUM FULL b");
    assert_eq!(record(&db.url()), Some(2));
    let msgs = slot.journal();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(msgs.iter().all(|m| m.content["tag"] == "FILES"));
    let mut moved: Vec<u32> = msgs.iter().flat_map(relids).collect();
    moved.sort();
    assert_eq!(moved, vec![a, b]);
    let file_of = |rel: &str| {
        db.value(&format!("SELECT pg_relation_filenode('{rel}')::text"))
            .unwrap()
            .parse::<u32>()
            .unwrap()
    };
    let now = recorded(&db.url());
    assert!(now
        .files
        .iter()
        .any(|f| f.relid == a && f.relfilenode == file_of("a")));
    assert!(now
        .files
        .iter()
        .any(|f| f.relid == b && f.relfilenode == file_of("b")));
    assert_eq!(
        now.files.len(),
        at_install.files.len() + 2,
        "rows are added"
    );
    assert_eq!(record(&db.url()), Some(0), "recorded once");

    // A table locked by a long transaction is left for the next run.
    db.exec("VACUUM FULL a");
    let mut holder = db.client();
    holder
        .batch_execute("BEGIN; LOCK TABLE a IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    assert_eq!(record(&db.url()), Some(0));
    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(record(&db.url()), Some(1));

    // A role without any privilege on the tables records them too.
    let role = Role::create("journal_moved_user", "");
    db.exec(&format!(
        "GRANT CONNECT ON DATABASE {} TO {}",
        db.name, role.0
    ));
    db.exec("CLUSTER a");
    assert_eq!(record(&role.url(&db)), Some(1));
    assert_eq!(recorded(&role.url(&db)).anchors.len(), 1);
}
