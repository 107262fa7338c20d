//! The catalog journal: the schema of every permanent table, written into the
//! source's WAL at exactly the LSN where it changes.
//!
//! Physical WAL names a relation by its file (relfilenode) and a heap tuple
//! carries no schema, so WAL decoded outside the server needs the catalog as
//! it was at each LSN. `walfill setup` therefore installs, in schema `walfill`
//! of the source database:
//!
//! - an event trigger on `ddl_command_end` that journals every table a
//!   statement created or changed, and one on `sql_drop` that lists dropped
//!   tables;
//! - one `setup` message per table, in the install's transaction.
//!
//! Nothing is attached to the user's tables. `TRUNCATE` fires no event
//! trigger and gives each table it empties new files: the decoder follows it
//! from the WAL alone (its heap record names the tables, and their new files
//! are created just before it). Earlier versions attached an `AFTER
//! TRUNCATE` trigger to every table; installing this one removes them.
//!
//! Each message is a transactional logical message with prefix [`PREFIX`], so
//! it lands in the transaction of the statement that caused it and the decoder
//! meets it in that transaction, at its LSN. A statement's message follows the
//! statement's own data changes: a `CREATE TABLE AS`'s rows and the copy a
//! rewrite (`ALTER COLUMN ... TYPE`, `SET TABLESPACE`, `REFRESH MATERIALIZED
//! VIEW`) writes into the new relfilenode come first in the transaction.
//!
//! # Message format (version 1)
//!
//! The content is one line of JSON:
//!
//! ```text
//! {"v":1,"event":"setup"|"ddl"|"files"|"truncate","tag":"ALTER TABLE",
//!  "relations":[<relation>...],"dropped":[<relid>...]}
//! ```
//!
//! `tag` is the statement's command tag (`SETUP`, `FILES` for the other two
//! events; archives written by earlier versions also hold `truncate`
//! messages, tag `TRUNCATE`, from their truncate triggers). A `relation` is `{"relid","schema","name","kind" ("r", "p" or
//! "m"),"persistence" ("p"),"spc","relfilenode" (null for "p"),
//! "toast_relfilenode","toast_spc","replident","key","attrs","types"}`; every
//! attribute with attnum > 0 is in `attrs`, dropped ones included, with its
//! `missing` value in text form when it has one (rendered with `DateStyle`
//! ISO, `TimeZone` UTC, `IntervalStyle` postgres, `extra_float_digits` 1 and
//! `bytea_output` hex, whatever the session's settings); `types` lists every
//! type the columns reach (element types of arrays, base types of domains,
//! subtypes of ranges, range types of multiranges and attribute types of
//! composites, recursively, built-in ones included) with enum labels, a
//! range's `subtype`, a multirange's `range`, a composite's `attrs` and a
//! user-defined base type's built-in `output` function. A `ddl` message from
//! `sql_drop` may repeat a table another message of the same statement also
//! carries; the last one wins. `dropped` may name a table that was never
//! journaled (an unlogged one): ignore unknown relids.
//!
//! Journaled are permanent ordinary tables, partitioned tables and
//! materialized views outside `pg_catalog`, `information_schema`, `pg_toast`
//! and `walfill` (walfill's own state, when source and destination are one
//! database), and those a user created in `pg_catalog` or
//! `information_schema` (OID 16384 or more: logical decoding prints their
//! changes too). A table that becomes unlogged leaves the journal through
//! `dropped`; one that becomes logged again reappears in `relations`.
//!
//! # Never breaking a statement
//!
//! The triggers catch every error of their own: a failure becomes a message
//! with prefix [`ERROR_PREFIX`] (`{"v":1,"error":"...","relids":[...]}`) and a
//! `WARNING`, and the user's statement goes on. The message is built inside an
//! exception block but written outside it, so a statement costs no
//! subtransaction ID. The journal runs no DDL of its own and adds nothing to
//! the user's tables: no statement sees it, and none behaves differently.
//!
//! # What the journal cannot see
//!
//! No trigger fires for `VACUUM FULL` or `CLUSTER` (which give a table a new
//! relfilenode) nor for `ALTER DATABASE ... SET TABLESPACE` (which moves every
//! table without a tablespace of its own). After one of them, the journal's
//! relfilenodes or tablespaces are stale until the table's next message.

mod check;
mod files;

pub use check::{check, may_maintain, needs_superuser, preflight, reasons};
pub use files::{record_moved_files, recorded, Recorded, RecordedFiles};

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use walfill_replay::Lsn;
use walfill_snapshot::sql::describe_pg_error;
use walfill_snapshot::SnapshotError;

use crate::error::{Error, Result};

/// The prefix of the journal's logical messages.
pub const PREFIX: &str = "walfill.journal";

/// The prefix of the messages that report a failure of the journal.
pub const ERROR_PREFIX: &str = "walfill.journal.error";

/// The version of the message format, the `v` of every message.
pub const FORMAT_VERSION: u32 = 1;

/// The names of the journal's event triggers (`ddl_command_end`, `sql_drop`).
pub const EVENT_TRIGGERS: [&str; 2] = ["walfill_journal_ddl", "walfill_journal_drop"];

/// How long the install waits for a lock on one table before giving up.
const LOCK_TIMEOUT: &str = "10s";

const INSTALL_SQL: &str = include_str!("install.sql");
const JOURNAL_SQL: &str = include_str!("journal.sql");
const HANDLERS_SQL: &str = include_str!("handlers.sql");
const EVENTS_SQL: &str = include_str!("events.sql");
const UNINSTALL_SQL: &str = include_str!("uninstall.sql");
const OLD_TRIGGERS_SQL: &str = include_str!("old_triggers.sql");

/// Counts the truncate triggers earlier versions attached to tables.
const COUNT_OLD_TRIGGERS_SQL: &str = "SELECT count(*) FROM pg_catalog.pg_trigger t
      JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
      JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'walfill' AND p.proname = 'journal_truncate'";

/// What [`install`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallReport {
    /// Tables journaled, one `setup` message each.
    pub tables: u64,
    /// Truncate triggers of an earlier version removed.
    pub old_triggers_removed: u64,
    /// The LSN of the last `setup` message; `None` when there is no table.
    pub setup_lsn: Option<Lsn>,
    /// The fingerprint of the installed journal (see [`fingerprint`]).
    pub fingerprint: String,
}

/// Installs the catalog journal in the source, or replaces it: functions and
/// event triggers afresh (the truncate triggers of earlier versions removed)
/// and one `setup` message per table, all in one transaction.
///
/// Needs a superuser (event triggers do); fails with [`Error::Problems`] and
/// the fix otherwise. Waits at most 10 s for the lock on each table that
/// loses an earlier version's trigger. Run it outside of a transaction: it
/// commits its own.
pub async fn install(source: &Client) -> Result<InstallReport> {
    let problems = preflight(source, "setup").await?;
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }
    let fingerprint = fingerprint();
    let sql = format!(
        "{OLD_TRIGGERS_SQL}\n{INSTALL_SQL}\n{JOURNAL_SQL}\n{HANDLERS_SQL}\n{}\n{EVENTS_SQL}",
        version_function(&fingerprint)
    );
    let report = in_transaction(source, async {
        source
            .batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            .await
            .map_err(|e| failed("installing the catalog journal", e))?;
        let old_triggers: i64 = source
            .query_one(COUNT_OLD_TRIGGERS_SQL, &[])
            .await
            .map_err(|e| failed("looking for an earlier version's truncate triggers", e))?
            .get(0);
        source
            .batch_execute(&sql)
            .await
            .map_err(|e| failed("installing the catalog journal", e))?;
        let row = source
            .query_one(
                "SELECT tables::bigint, last_lsn::text FROM walfill.journal_setup()",
                &[],
            )
            .await
            .map_err(|e| failed("journaling every table", e))?;
        let setup_lsn = match row.get::<_, Option<String>>(1) {
            Some(text) => Some(text.parse::<Lsn>().map_err(|e| {
                Error::Internal(format!(
                    "the server returned an unreadable LSN {text:?}: {e}"
                ))
            })?),
            None => None,
        };
        Ok(InstallReport {
            tables: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
            old_triggers_removed: u64::try_from(old_triggers).unwrap_or(0),
            setup_lsn,
            fingerprint: fingerprint.clone(),
        })
    })
    .await?;
    tracing::info!(
        tables = report.tables,
        old_triggers_removed = report.old_triggers_removed,
        setup_lsn = %report.setup_lsn.map(|l| l.to_string()).unwrap_or_else(|| "none".into()),
        "catalog journal installed"
    );
    Ok(report)
}

/// Removes the catalog journal from the source: its event triggers (and the
/// truncate triggers of an earlier version), its functions, and the schema `walfill`
/// when nothing else is in it (walfill's state tables, when source and
/// destination are one database, stay untouched). Does nothing when the
/// journal is not installed. Needs a superuser.
pub async fn uninstall(source: &Client) -> Result<()> {
    let anything: bool = source
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger
                             WHERE evtname = ANY($1::text[]))
                 OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                              JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                             WHERE n.nspname = 'walfill' AND p.proname LIKE 'journal\\_%')",
            &[&EVENT_TRIGGERS.as_slice()],
        )
        .await
        .map_err(|e| failed("looking for the catalog journal", e))?
        .get(0);
    if !anything {
        tracing::info!("no catalog journal to remove");
        return Ok(());
    }
    let problems = preflight(source, "teardown").await?;
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }
    in_transaction(source, async {
        source
            .batch_execute(&format!("SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            .await
            .map_err(|e| failed("removing the catalog journal", e))?;
        source
            .batch_execute(&format!("{OLD_TRIGGERS_SQL}\n{UNINSTALL_SQL}"))
            .await
            .map_err(|e| failed("removing the catalog journal", e))
    })
    .await?;
    tracing::info!("catalog journal removed");
    Ok(())
}

/// A fingerprint of the journal's SQL: the installed one differs from this
/// one when the journal was installed by another walfill version.
pub fn fingerprint() -> String {
    // FNV-1a: stable across builds and platforms, unlike std's hashers.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [INSTALL_SQL, JOURNAL_SQL, HANDLERS_SQL, EVENTS_SQL] {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("v{FORMAT_VERSION}-{hash:016x}")
}

/// The function that records which journal is installed.
fn version_function(fingerprint: &str) -> String {
    format!(
        "-- Which journal is installed (read by `check`).\n\
         CREATE FUNCTION walfill.journal_version() RETURNS text\n\
         LANGUAGE sql IMMUTABLE\n\
         AS $fn$ SELECT '{fingerprint}'::text $fn$;"
    )
}

/// Runs `work` between BEGIN and COMMIT, rolling back when it fails.
async fn in_transaction<T>(
    client: &Client,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| failed("starting a transaction on the source", e))?;
    match work.await {
        Ok(value) => {
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| failed("committing the catalog journal", e))?;
            Ok(value)
        }
        Err(err) => {
            if let Err(e) = client.batch_execute("ROLLBACK").await {
                tracing::debug!(error = %describe_pg_error(&e), "rollback after a failed install");
            }
            Err(err)
        }
    }
}

/// A failed statement on the source, with what walfill was doing and, for a
/// lock that did not come, what to do.
fn failed(context: &str, source: tokio_postgres::Error) -> Error {
    let context = if source.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
        format!(
            "{context}: a table stayed locked for {LOCK_TIMEOUT} (removing the truncate \
             trigger an earlier walfill attached to it needs a brief lock); fix: retry when no \
             long transaction holds the table"
        )
    } else {
        context.to_string()
    };
    Error::Source(SnapshotError::query(context, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_and_names_the_format() {
        assert_eq!(fingerprint(), fingerprint());
        assert!(fingerprint().starts_with("v1-"));
        assert_eq!(fingerprint().len(), "v1-".len() + 16);
    }

    #[test]
    fn version_function_embeds_the_fingerprint() {
        let sql = version_function("v1-0123456789abcdef");
        assert!(sql.contains("'v1-0123456789abcdef'"));
        assert!(sql.contains("walfill.journal_version()"));
    }

    /// Every function runs as its owner with a search_path no user object
    /// can shadow.
    #[test]
    fn every_function_is_security_definer_with_a_pinned_search_path() {
        let mut seen = 0;
        for sql in [JOURNAL_SQL, HANDLERS_SQL] {
            let starts = sql
                .match_indices("\nCREATE FUNCTION walfill.")
                .chain(sql.match_indices("\nCREATE OR REPLACE FUNCTION walfill."));
            for (start, _) in starts {
                let header = &sql[start..start + sql[start..].find("AS $fn$").expect("a body")];
                let name = header.lines().nth(1).unwrap_or(header);
                assert!(
                    header.contains("SECURITY DEFINER"),
                    "{name} runs as its caller"
                );
                assert!(
                    header.contains("SET search_path = pg_catalog, pg_temp"),
                    "{name} does not pin search_path"
                );
                seen += 1;
            }
        }
        assert!(seen >= 10, "only {seen} functions found");
    }
}
