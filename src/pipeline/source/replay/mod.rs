//! Archived WAL as a history source: segments decoded on a blocking thread
//! (see [`sink`]), the table's changes versioned there and folded on
//! another thread (see [`folding`]) to one write per key in an
//! [`ExternalFold`] (bounded memory, sorted runs spilled to local disk), on
//! top of the base snapshot's rows when the replay starts from one.
//!
//! Nothing is stored while the WAL is decoded: the apply loop only records
//! how far decoding has read. Once every record before the boundary is
//! decoded, the fold's runs are merged and each key's final row is handed
//! over once, in key order, in batches a table being loaded takes with
//! plain inserts, while the merge goes on. The cursor of each batch is its
//! last key: an interrupted load decodes again and goes on after it.

mod folding;
mod sink;
pub(crate) mod start;

use std::collections::BTreeSet;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use walfill_core::{Lsn, TxnVersions};
use walfill_replay::archive::{Archive, ReadOptions};
use walfill_replay::decode::{
    Catalog, DecodeOptions, Decoder, Identity, LostRelation, NewRelation, RelationSchema,
    UnsupportedColumn,
};
use walfill_replay::TimelineId;

use crate::error::{Error, Gap, Result};
use crate::pipeline::apply::{Batch, Era, ExternalFold, Folder, HistorySource, Spilled};
use crate::pipeline::base::{BaseWriter, Manifest};
use crate::pipeline::version_sql::Plan;
use crate::progress::Progress;

/// Memory for the segments in flight and the transactions being decoded
/// (larger ones spill to disk); the fold has `replay_memory_mb` besides.
const DECODE_MEMORY: usize = 128 << 20;

/// What a replay decodes.
#[derive(Clone, Debug)]
pub struct ReplayRange {
    /// The source database's OID.
    pub database: u32,
    /// Where decoding starts.
    pub restart: Lsn,
    /// Transactions committing from here on are stored.
    pub emit_from: Lsn,
    /// The slot's consistent point: transactions committing before it are
    /// replayed, the rest come from the stream.
    pub boundary: Lsn,
    /// The table's description at `restart`, when decoding starts from a
    /// base snapshot (otherwise the catalog journal describes it).
    pub known: Option<NewRelation>,
    /// The base snapshot whose rows come before the WAL's changes.
    pub base: Option<Box<Manifest>>,
    /// The store the base is read from (`None`: the archive itself).
    pub bases: Option<Archive>,
    /// Keys up to this one (in the merge's order) are stored already.
    pub loaded: Option<Vec<String>>,
    /// Decoding starts before the table's creation: every change to a
    /// relation file created while decoding is decoded, whatever
    /// transaction made it (see `DecodeOptions::follow_new_files`).
    pub from_creation: bool,
    /// Whose WAL it must be.
    pub identity: Identity,
}

/// What decoding the WAL found.
#[derive(Debug)]
pub struct ReplayOutcome {
    /// Every record before the boundary was decoded.
    pub reached_boundary: bool,
    /// The end of the WAL read.
    pub end: Lsn,
    /// Relations the decoder lost track of.
    pub lost: Vec<LostRelation>,
    /// Columns whose type could not be decoded.
    pub unsupported: BTreeSet<UnsupportedColumn>,
    /// The table as the WAL describes it at the end.
    pub relation: Option<NewRelation>,
    /// Transactions completed.
    pub transactions: u64,
    /// What the fold wrote to local disk.
    pub spilled: Spilled,
    /// The archived WAL read.
    pub read: crate::pipeline::apply::WalRead,
}

/// A replay of `range` for one plan, as batches.
pub struct ReplaySource {
    batches: mpsc::Receiver<Batch>,
    decoding: Option<JoinHandle<Result<ReplayOutcome>>>,
    cancel: CancellationToken,
}

/// How much a replay's fold may hold in memory, and where it spills.
#[derive(Clone, Debug)]
pub struct FoldSpace {
    /// Bytes of folded rows in memory.
    pub memory: usize,
    /// The directory sorted runs go to.
    pub spill_dir: std::path::PathBuf,
    /// Merged rows per stored batch.
    pub batch_rows: usize,
}

/// What a replay's merged rows become.
pub enum Output {
    /// Batches for the apply loop to store.
    Store,
    /// Those, and a base snapshot at the boundary (when the history decoded
    /// every column of the table).
    StoreAndBase(BaseWriter),
    /// A base snapshot alone (a compaction): the batches carry only the
    /// count of rows, not the rows.
    BaseOnly(BaseWriter),
}

impl ReplaySource {
    /// Starts decoding on a blocking thread; the merged rows go where
    /// `output` says.
    pub async fn start(
        archive: &Archive,
        range: ReplayRange,
        plan: &Plan,
        space: FoldSpace,
        label: String,
        cancel: CancellationToken,
        output: Output,
    ) -> Result<ReplaySource> {
        let (leaves, store) = match output {
            Output::Store => (None, true),
            Output::StoreAndBase(writer) => (Some(writer), true),
            Output::BaseOnly(writer) => (Some(writer), false),
        };
        let mut catalog = Catalog::new(range.database);
        if let Some(known) = &range.known {
            catalog.insert(RelationSchema::new(known.clone()));
        }
        let segment_size = archive.segment_size().await?;
        let relid = plan.source.oid;
        let options = DecodeOptions {
            emit_from: range.emit_from,
            memory_limit: change_budget(DECODE_MEMORY, segment_size),
            only: Some(BTreeSet::from([relid])),
            strict_types: false,
            unsupported_as_null: true,
            follow_new_files: range.from_creation,
            identity: Some(range.identity.clone()),
            ..DecodeOptions::default()
        };
        let (tx, batches) = mpsc::channel::<Batch>(2);
        let runtime = tokio::runtime::Handle::current();
        let archive = archive.clone();
        let summaries = crate::pipeline::base::summary_store(&archive, range.bases.as_ref()).await;
        let folder = match &leaves {
            Some(_) => Folder::new(plan.clone(), Era::Past).keeping_every_column(),
            None => Folder::new(plan.clone(), Era::Past),
        };
        let plan = plan.clone();
        let total = range.boundary.checked_sub(range.restart).unwrap_or(0);
        let decoding = tokio::task::spawn_blocking(move || {
            let batch_rows = space.batch_rows.max(1);
            let (to_fold, messages) = std::sync::mpsc::sync_channel(48);
            let folder = folding::FoldThread {
                fold: ExternalFold::new(folder, space.memory, space.spill_dir),
                batches: tx,
                base: range.base.clone().map(|m| {
                    let store = range.bases.clone().unwrap_or_else(|| archive.clone());
                    (store, m, runtime.clone())
                }),
                leaves: leaves.map(|writer| (writer, runtime.clone())),
                store,
            };
            let fold_thread = std::thread::Builder::new()
                .name("walfill-fold".into())
                .spawn(move || folder.run(messages))
                .map_err(|e| Error::Internal(format!("starting the fold thread: {e}")))?;
            let mut decoder = Decoder::new(catalog, options);
            let mut sink = sink::ForwardSink {
                out: to_fold,
                versions: TxnVersions::new(relid),
                pending: Vec::new(),
                transactions: 0,
                reported_at: Instant::now(),
                progress: Progress::bytes(label, Some(total), 0),
                position: range.restart,
                read: range.restart,
                rate: 0.0,
            };
            let fed = crate::pipeline::base::decode_summarized(
                &runtime,
                &archive,
                (range.restart, Some(range.boundary)),
                ReadOptions::default()
                    .with_read_ahead(READ_AHEAD)
                    .following(TimelineId(range.identity.timeline)),
                summaries.map(|store| (store, range.database)),
                (&mut decoder, &mut sink),
            );
            let fed = fed.map_err(|e| match e.is_history_gap() {
                true => Error::History(Gap::Wal(Box::new(e))),
                false => Error::from(e),
            });
            let fed = match fed.and_then(|fed| match fed.reached_to {
                true => sink
                    .report()
                    .map(|()| fed)
                    .map_err(|_| Error::Internal("the fold thread stopped".into())),
                false => Ok(fed),
            }) {
                Ok(fed) => fed,
                Err(e) => {
                    drop(sink);
                    // A fold that failed first has the error to tell.
                    joined(fold_thread)?;
                    return Err(e);
                }
            };
            let sink::ForwardSink {
                out,
                transactions,
                progress,
                ..
            } = sink;
            progress.finish();
            let mut outcome = ReplayOutcome {
                reached_boundary: fed.reached_to,
                end: fed.end,
                read: crate::pipeline::apply::WalRead {
                    segments: fed.segments,
                    summarized: fed.summarized,
                    bytes: fed.wal_bytes,
                    first: fed.first_segment,
                },
                lost: decoder.lost().to_vec(),
                unsupported: decoder.unsupported().clone(),
                relation: decoder.catalog().by_oid(relid).map(|r| r.spec.clone()),
                transactions,
                spilled: Spilled::default(),
            };
            // Rows are stored only from a complete history they can be
            // right from.
            let usable =
                outcome.reached_boundary && check(&plan, range.emit_from, &outcome).is_ok();
            if usable {
                let loaded = range.loaded.clone();
                let whole = whole_table(relid, range.emit_from, &outcome);
                let _ = out.send(folding::Folding::Load {
                    loaded,
                    batch_rows,
                    whole,
                });
            }
            drop(out);
            outcome.spilled = joined(fold_thread)?;
            Ok(outcome)
        });
        Ok(ReplaySource {
            batches,
            decoding: Some(decoding),
            cancel,
        })
    }

    /// Stops decoding (if it still runs) and returns what it found.
    pub async fn finish(mut self) -> Result<ReplayOutcome> {
        // The decoder's sends fail once the receiver is gone.
        self.batches.close();
        while self.batches.recv().await.is_some() {}
        let decoding = self
            .decoding
            .take()
            .ok_or_else(|| Error::Internal("the replay finished twice".into()))?;
        decoding
            .await
            .map_err(|e| Error::Internal(format!("the decoding thread failed: {e}")))?
    }
}

impl HistorySource for ReplaySource {
    async fn next(&mut self) -> Result<Option<Batch>> {
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Error::Interrupted),
            batch = self.batches.recv() => Ok(batch),
        }
    }

    fn confirms_upstream(&self) -> bool {
        false
    }
}

/// The fold thread's result.
fn joined(thread: std::thread::JoinHandle<Result<Spilled>>) -> Result<Spilled> {
    thread
        .join()
        .map_err(|_| Error::Internal("the fold thread panicked".into()))?
}

/// The table at the boundary when the replay decoded every one of its
/// columns from `from` on (its merged rows are then the table's, and can be
/// a base snapshot); else why not.
fn whole_table(
    relid: u32,
    from: Lsn,
    outcome: &ReplayOutcome,
) -> std::result::Result<NewRelation, String> {
    if let Some(column) = outcome.unsupported.iter().next() {
        return Err(format!(
            "column {}.{} has type {}, which walfill cannot decode from WAL",
            column.relation, column.column, column.type_name
        ));
    }
    if let Some(lost) = outcome
        .lost
        .iter()
        .find(|l| (l.relid == relid || l.relid == 0) && l.lsn >= from)
    {
        return Err(format!("from {}: {}", lost.lsn, lost.reason));
    }
    outcome
        .relation
        .clone()
        .ok_or_else(|| "the table is not described at the boundary".to_string())
}

/// Fails when the replayed rows cannot be right: the table's changes could
/// not be followed from `from` on, or a column the transform reads could
/// not be decoded.
pub fn check(plan: &Plan, from: Lsn, outcome: &ReplayOutcome) -> Result<()> {
    if let Some(lost) = plan.blocking_loss(&outcome.lost, from) {
        return Err(Error::history(format!(
            "{} cannot be followed through the archive from {}: {}",
            plan.source, lost.lsn, lost.reason
        )));
    }
    if let Some(column) = outcome.unsupported.iter().find(|c| plan.reads(&c.column)) {
        return Err(Error::history(format!(
            "column {}.{} has type {}, which walfill cannot decode from WAL",
            column.relation, column.column, column.type_name
        )));
    }
    Ok(())
}

/// Segments fetched ahead of the decoder.
pub const READ_AHEAD: usize = 2;

/// The part of a memory bound left for buffered changes once the segments
/// in flight (read ahead, being decoded) are counted.
pub fn change_budget(limit: usize, segment_size: u32) -> usize {
    let in_flight = (READ_AHEAD + 2) * segment_size as usize;
    limit.saturating_sub(in_flight).max(16 << 20)
}
