//! Base snapshots: a table's rows as of an LSN, kept in the archive so a
//! later replay can start from them instead of from the table's creation.
//!
//! A snapshot backfill writes the rows it copies (before the transform) as
//! Parquet files under `base/<database oid>/<table oid>/<boundary>/` in the
//! archive, and, once the copy is complete, a `manifest.json` that makes the
//! base usable: the LSN each file is consistent at, the LSN to start
//! decoding from to follow the table after it, and the table's description
//! (the decoder's catalog entry). Bases are found by listing the archive, so
//! losing the destination loses no base.

mod read;
mod write;

pub use read::{find_bases, find_bases_of, read_part, relation_of};
pub use write::BaseWriter;

use object_store::path::Path;
use serde::{Deserialize, Serialize};
use walfill_replay::archive::{decode_planned, FeedOutcome};
use walfill_replay::decode::{Decoder, NewRelation, ReplayError, Sink};
use walfill_replay::Lsn;

/// A base's manifest, written last: its presence makes the base usable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version (1).
    pub v: u32,
    /// Source database OID.
    pub database: u32,
    /// Table OID.
    pub relid: u32,
    /// The slot boundary the copy started at (names the base's directory).
    pub boundary: Lsn,
    /// Decode from here to follow the table after the base.
    pub restart_lsn: Lsn,
    /// The earliest LSN any part is consistent at: transactions committing
    /// from here on are applied on top of the base.
    pub from_lsn: Lsn,
    /// The table's description when it was copied.
    pub relation: NewRelation,
    /// Column names, in the order of the Parquet columns.
    pub columns: Vec<String>,
    /// The data files.
    pub parts: Vec<Part>,
    /// Rows in all parts.
    pub rows: u64,
    /// The source cluster's system identifier (bases written before it
    /// was recorded lack it): compaction checks the archived WAL against it
    /// without asking the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_id: Option<u64>,
}

/// One Parquet file of a base.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// Object name relative to the base's directory.
    pub file: String,
    /// The LSN its rows are consistent at (their version is `(lsn, 0)`).
    pub lsn: Lsn,
    /// Rows in it.
    pub rows: u64,
}

/// `base/<database>/<relid>/` under the archive's prefix.
pub(crate) fn table_dir(prefix: &Path, database: u32, relid: u32) -> Path {
    prefix
        .clone()
        .join("base")
        .join(database.to_string())
        .join(relid.to_string())
}

/// The directory of the base started at `boundary`.
pub(crate) fn base_dir(prefix: &Path, database: u32, relid: u32, boundary: Lsn) -> Path {
    table_dir(prefix, database, relid).join(format!("{:016X}", boundary.0))
}

/// Why no base snapshot of `relation` can be kept, if none can: a column
/// whose type walfill cannot decode from WAL (a base is every column's
/// rows, and compaction rolls it forward by decoding).
pub fn undecodable(relation: &NewRelation) -> Option<String> {
    relation
        .attrs
        .attrs
        .iter()
        .zip(&relation.types)
        .zip(&relation.type_names)
        .find(|((attr, ty), _)| {
            !attr.dropped
                && !ty
                    .as_ref()
                    .is_some_and(walfill_replay::decode::is_supported)
        })
        .map(|((attr, _), type_name)| {
            format!(
                "column {}.{}.{} has type {type_name}, which walfill cannot decode from WAL",
                relation.schema, relation.name, attr.name
            )
        })
}

/// Where segment summaries are read and written: the store of bases (the
/// archive itself in walfill's layout), when walfill may write there.
/// Another tool's archive without `[archive] bases_url` has none.
pub async fn summary_store(
    archive: &walfill_replay::archive::Archive,
    bases: Option<&walfill_replay::archive::Archive>,
) -> Option<walfill_replay::archive::Archive> {
    let store = bases.unwrap_or(archive).clone();
    store.check_writable().await.ok().map(|()| store)
}

/// Decodes `[from, to)` of `archive` into `decoder` and `sink`, taking
/// each segment from its summary in `summaries` (a store, and the
/// database of the tables decoded) where the decoder accepts it, and
/// storing the summaries of the segments read whole that had none. Blocks:
/// call it from a blocking thread.
pub fn decode_summarized(
    runtime: &tokio::runtime::Handle,
    archive: &walfill_replay::archive::Archive,
    (from, to): (Lsn, Option<Lsn>),
    options: walfill_replay::archive::ReadOptions,
    summaries: Option<(walfill_replay::archive::Archive, u32)>,
    (decoder, sink): (&mut Decoder, &mut dyn Sink),
) -> Result<FeedOutcome, ReplayError> {
    let mut planned = runtime.block_on(archive.read_planned(
        runtime,
        from,
        to,
        options,
        summaries.as_ref().map(|(store, db)| (store, *db)),
        &mut |file, why| {
            tracing::warn!(
                segment = %file,
                "the summary of this segment is unusable ({why}); reading the segment whole"
            )
        },
    ))?;
    let saving = summaries.map(|(store, _)| summary_writer(runtime, store, planned.segment_size()));
    let fed = decode_planned(&mut planned, from, to, decoder, sink, &mut |summary| {
        if let Some((tx, _)) = &saving {
            let _ = tx.send(summary);
        }
    });
    if let Some((tx, task)) = saving {
        drop(tx);
        let _ = runtime.block_on(task);
    }
    fed
}

/// A task storing the summaries a replay or journal scan made of the segments it read
/// whole, for the next replays to read only those summaries. A summary not
/// stored costs a later replay reading its segment whole, nothing more.
fn summary_writer(
    runtime: &tokio::runtime::Handle,
    store: walfill_replay::archive::Archive,
    segment_size: u32,
) -> (
    tokio::sync::mpsc::UnboundedSender<walfill_replay::summary::SegmentSummary>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<walfill_replay::summary::SegmentSummary>();
    let task = runtime.spawn(async move {
        let mut failed = 0u64;
        while let Some(summary) = rx.recv().await {
            match store.put_summary(&summary, segment_size).await {
                // Said once: a store walfill may not write (read-only
                // credentials) would otherwise fill the log.
                Err(e) if failed == 0 => {
                    failed += 1;
                    tracing::warn!(
                        error = %e,
                        "could not store a segment summary; the segments go on being read whole"
                    );
                }
                Err(_) => failed += 1,
                Ok(()) => {}
            }
        }
        if failed > 1 {
            tracing::warn!(failed, "segment summaries not stored");
        }
    });
    (tx, task)
}
