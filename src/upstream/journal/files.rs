//! What the journal recorded outside the WAL: where decoding can start
//! reading it (anchors), and which files it described for each table.
//!
//! `CLUSTER` and `VACUUM FULL` give a table new files without firing any
//! trigger, so the journal cannot describe them when they happen. Every
//! walfill command that connects to the source (setup, backfill, archive)
//! therefore asks the journal to describe again each table whose files it
//! has not recorded ([`record_moved_files`]); the message lands in the WAL
//! like any other, and the decoder learns the new files from it. Until that
//! message, a change to the new files can only be named through the
//! recorded files ([`Recorded`]), which `walfill decode` reads.

use tokio_postgres::Client;
use walfill_replay::Lsn;

use crate::error::{Error, Result};

/// One table's files as the journal described them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedFiles {
    /// The table.
    pub relid: u32,
    /// Its tablespace.
    pub spc: u32,
    /// Its file.
    pub relfilenode: u32,
    /// Its TOAST table's tablespace and file, when it has one.
    pub toast: Option<(u32, u32)>,
    /// Where the journal described them.
    pub lsn: Lsn,
}

/// What the journal recorded in the source database.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// LSNs from which reading the WAL finds every table described, oldest
    /// first.
    pub anchors: Vec<Lsn>,
    /// Every file described, oldest first.
    pub files: Vec<RecordedFiles>,
}

/// Describes again, in the WAL, every table whose files the journal has not
/// recorded. Returns the number of tables described, or `None` when the
/// journal is not installed (or is an older one without this function, or
/// this role may not run it). Never fails the caller's work: a failure is
/// logged as a warning.
pub async fn record_moved_files(source: &Client) -> Option<u64> {
    match try_record(source).await {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(
                "could not record tables' moved files in the catalog journal: {e}; \
                 `walfill decode` may not describe changes written after a CLUSTER or \
                 VACUUM FULL until the next walfill command records them"
            );
            None
        }
    }
}

async fn try_record(source: &Client) -> Result<Option<u64>> {
    let callable: bool = source
        .query_one(
            "SELECT to_regprocedure('walfill.journal_sync(text)') IS NOT NULL
                AND has_function_privilege('walfill.journal_sync(text)', 'EXECUTE')",
            &[],
        )
        .await
        .map_err(|e| failed("looking for the catalog journal", e))?
        .get(0);
    if !callable {
        return Ok(None);
    }
    let row = source
        .query_one(
            "SELECT tables::bigint, skipped::bigint, last_lsn::text FROM walfill.journal_sync()",
            &[],
        )
        .await
        .map_err(|e| failed("recording moved files in the catalog journal", e))?;
    let tables = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
    let skipped: i64 = row.get(1);
    if tables > 0 {
        tracing::info!(
            tables,
            last_lsn = row.get::<_, Option<String>>(2).unwrap_or_default(),
            "catalog journal: described again the tables whose files moved \
             (CLUSTER, VACUUM FULL, or a rewrite)"
        );
    }
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "catalog journal: some tables whose files moved stayed locked; the next walfill \
             command records them"
        );
    }
    Ok(Some(tables))
}

/// Reads what the journal recorded; `None` when it is not installed (or
/// this role may not read it).
pub async fn recorded(source: &Client) -> Result<Option<Recorded>> {
    let readable: bool = source
        .query_one(
            "SELECT to_regclass('walfill.journal_anchors') IS NOT NULL
                AND to_regclass('walfill.journal_files') IS NOT NULL
                AND has_table_privilege('walfill.journal_anchors', 'SELECT')
                AND has_table_privilege('walfill.journal_files', 'SELECT')",
            &[],
        )
        .await
        .map_err(|e| failed("looking for the catalog journal", e))?
        .get(0);
    if !readable {
        return Ok(None);
    }
    let anchors = source
        .query(
            "SELECT lsn::text FROM walfill.journal_anchors ORDER BY lsn",
            &[],
        )
        .await
        .map_err(|e| failed("reading the catalog journal's anchors", e))?
        .iter()
        .map(|r| parse_lsn(r.get(0)))
        .collect::<Result<Vec<_>>>()?;
    let files = source
        .query(
            "SELECT relid::bigint, spc::bigint, relfilenode::bigint, toast_spc::bigint,
                    toast_relfilenode::bigint, lsn::text
               FROM walfill.journal_files ORDER BY lsn, relid",
            &[],
        )
        .await
        .map_err(|e| failed("reading the catalog journal's files", e))?
        .iter()
        .map(|r| {
            let oid = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v as u32);
            Ok(RecordedFiles {
                relid: oid(0).unwrap_or(0),
                spc: oid(1).unwrap_or(0),
                relfilenode: oid(2).unwrap_or(0),
                toast: oid(3).zip(oid(4)),
                lsn: parse_lsn(r.get(5))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Recorded { anchors, files }))
}

fn parse_lsn(text: &str) -> Result<Lsn> {
    text.parse::<Lsn>().map_err(|e| {
        Error::Internal(format!(
            "the server returned an unreadable LSN {text:?}: {e}"
        ))
    })
}

fn failed(context: &str, e: tokio_postgres::Error) -> Error {
    Error::Source(walfill_snapshot::SnapshotError::query(context, e))
}
