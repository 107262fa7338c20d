//! The catalog journal in the source database: the messages it writes for
//! every kind of DDL, that it never changes what a user's statement does, and
//! that it installs and uninstalls cleanly. Messages are read back through a
//! `test_decoding` slot, the way PostgreSQL's own logical decoding sees them.

mod battery;
mod expect;
mod lifecycle;
mod messages;
mod moved;
mod statements;
mod storage;

use serde_json::Value;
use tokio_postgres::NoTls;
use walfill::upstream::journal::{self, InstallReport};

use crate::support::role::Role;
use crate::support::TestDb;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Runs `f` with an async connection to `url`.
fn with_client<T>(
    url: &str,
    f: impl for<'c> FnOnce(
        &'c tokio_postgres::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'c>>,
) -> T {
    runtime().block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        let driver = tokio::spawn(connection);
        let out = f(&client).await;
        drop(client);
        let _ = driver.await;
        out
    })
}

/// `journal::install` on `url`.
fn try_install(url: &str) -> Result<InstallReport, walfill::error::Error> {
    with_client(url, |c| Box::pin(journal::install(c)))
}

/// `journal::install` on the test database, which must succeed.
pub(crate) fn install(db: &TestDb) -> InstallReport {
    try_install(&db.url()).unwrap_or_else(|e| panic!("installing the journal: {e}"))
}

/// `journal::uninstall` on `url`.
fn try_uninstall(url: &str) -> Result<(), walfill::error::Error> {
    with_client(url, |c| Box::pin(journal::uninstall(c)))
}

/// `journal::check` on `url`.
fn check(url: &str) -> Vec<String> {
    with_client(url, |c| Box::pin(journal::check(c)))
        .unwrap_or_else(|e| panic!("checking the journal: {e}"))
}

/// One logical message as `test_decoding` prints it.
#[derive(Clone, Debug)]
struct Message {
    /// The xid of the transaction it was decoded in.
    xid: u32,
    transactional: bool,
    prefix: String,
    /// The content, parsed.
    content: Value,
    /// The content as written.
    raw: String,
}

/// One decoded line and the transaction it belongs to.
#[derive(Clone, Debug)]
struct Change {
    xid: u32,
    line: String,
}

/// A `test_decoding` slot on a test database (dropped with the database).
struct Slot {
    url: String,
    name: String,
}

impl Slot {
    fn create(db: &TestDb) -> Slot {
        let slot = Slot {
            url: db.url(),
            name: format!("{}_slot", db.name),
        };
        db.exec(&format!(
            "SELECT pg_create_logical_replication_slot('{}', 'test_decoding')",
            slot.name
        ));
        slot
    }

    /// Every change decoded since the last call: peeks at the slot, then
    /// advances it past what was read.
    fn changes(&self) -> Vec<Change> {
        let mut client = crate::support::cluster::connect(&self.url);
        let rows = client
            .query(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes($1, NULL, NULL)",
                &[&self.name],
            )
            .expect("peeking at the slot");
        let mut xid = 0;
        let mut out = Vec::new();
        for row in &rows {
            let line: String = row.get(1);
            if let Some(rest) = line.strip_prefix("BEGIN ") {
                xid = rest.trim().parse().expect("an xid after BEGIN");
            }
            out.push(Change { xid, line });
        }
        if let Some(last) = rows.last() {
            let lsn: String = last.get(0);
            client
                .execute(
                    "SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)",
                    &[&self.name, &lsn],
                )
                .expect("advancing the slot");
        }
        out
    }

    /// The logical messages among [`Slot::changes`].
    fn messages(&self) -> Vec<Message> {
        self.changes()
            .iter()
            .filter_map(|c| parse_message(c.xid, &c.line))
            .collect()
    }

    /// The catalog journal's messages (prefix `walfill.journal`) since the
    /// last call. Fails on a message that reports a failure of the journal.
    fn journal(&self) -> Vec<Message> {
        let messages = self.messages();
        for m in &messages {
            assert_ne!(
                m.prefix,
                journal::ERROR_PREFIX,
                "the journal failed: {}",
                m.raw
            );
        }
        messages
            .into_iter()
            .filter(|m| m.prefix == journal::PREFIX)
            .collect()
    }
}

/// Parses `message: transactional: 1 prefix: P, sz: N content:C`.
fn parse_message(xid: u32, line: &str) -> Option<Message> {
    let rest = line.strip_prefix("message: transactional: ")?;
    let (flag, rest) = rest.split_once(" prefix: ")?;
    let (prefix, rest) = rest.split_once(", sz: ")?;
    let (size, raw) = rest.split_once(" content:")?;
    let size: usize = size.parse().expect("a message size");
    assert_eq!(size, raw.len(), "sz does not match the content of {line}");
    assert!(!raw.contains('\n'), "a message spans lines: {raw}");
    let content = serde_json::from_str(raw).unwrap_or_else(|e| panic!("{e}: {raw}"));
    Some(Message {
        xid,
        transactional: flag == "1",
        prefix: prefix.to_string(),
        content,
        raw: raw.to_string(),
    })
}

/// The relation with `relid` in a message, if it lists it.
fn relation(message: &Message, relid: u32) -> Option<&Value> {
    message.content["relations"]
        .as_array()
        .expect("relations is an array")
        .iter()
        .find(|r| r["relid"].as_u64() == Some(u64::from(relid)))
}

/// The relids a message lists under `relations`.
fn relids(message: &Message) -> Vec<u32> {
    message.content["relations"]
        .as_array()
        .expect("relations is an array")
        .iter()
        .map(|r| r["relid"].as_u64().expect("a relid") as u32)
        .collect()
}

/// The relids a message lists under `dropped`.
fn dropped(message: &Message) -> Vec<u32> {
    message.content["dropped"]
        .as_array()
        .expect("dropped is an array")
        .iter()
        .map(|r| r.as_u64().expect("a relid") as u32)
        .collect()
}

/// The OID of `name` (a regclass) in `db`.
fn relid(db: &TestDb, name: &str) -> u32 {
    oid(db, &format!("SELECT '{name}'::regclass::oid"))
}

/// A single OID.
fn oid(db: &TestDb, sql: &str) -> u32 {
    db.value(sql)
        .unwrap_or_else(|| panic!("{sql} returned NULL"))
        .parse()
        .expect("an OID")
}
