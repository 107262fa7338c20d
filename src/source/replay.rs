//! Archived WAL as a history source: segments decoded on a blocking thread,
//! the table's changes versioned and folded to one write per key there, and
//! handed over as batches whose cursor is the last transaction completed.
//!
//! Folding on the decoding thread lets decoding go on while the apply loop
//! stores the previous batch. A batch may hold part of a transaction still
//! being decoded: the version's table is not visible to readers during a
//! replay, and a rerun decodes from the start again and stores, by the
//! version rule, only what is newer.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use walfill_core::{Lsn, RowChange, TxnVersions, Version};
use walfill_replay::archive::{Archive, ReadOptions};
use walfill_replay::decode::{
    decode_segments, Catalog, DecodeOptions, Decoder, Identity, LostRelation, NewRelation,
    RelationSchema, Sink, SinkError, TxnInfo, UnsupportedColumn,
};
use walfill_replay::TimelineId;

use crate::apply::{Batch, Cursor, Era, Fold, Folder, HistorySource, Writes};
use crate::decode::{change_budget, READ_AHEAD};
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::progress::Progress;

/// The progress of decoding is reported every this many bytes of WAL.
const PROGRESS_STEP: u64 = 16 << 20;

/// Replayed changes pending in the fold are stored at least this often, so
/// an interrupted replay resumes from a recent position.
const FLUSH_INTERVAL: Duration = Duration::from_secs(30);

/// Memory for transactions being decoded; larger ones spill to disk.
const DECODE_MEMORY: usize = 512 << 20;

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
}

/// A replay of `range` for one plan, as batches.
pub struct ReplaySource {
    batches: mpsc::Receiver<Batch>,
    decoding: Option<JoinHandle<Result<ReplayOutcome>>>,
    cancel: CancellationToken,
}

impl ReplaySource {
    /// Starts decoding on a blocking thread.
    pub async fn start(
        archive: &Archive,
        range: ReplayRange,
        plan: &Plan,
        fold_bytes: usize,
        label: String,
        cancel: CancellationToken,
    ) -> Result<ReplaySource> {
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
        // One batch being stored, one waiting, one being filled.
        let fold_bytes = (fold_bytes / 3).max(1);
        let (tx, batches) = mpsc::channel::<Batch>(1);
        let runtime = tokio::runtime::Handle::current();
        let archive = archive.clone();
        let folder = Folder::new(plan.clone(), Era::Past);
        let total = range.boundary.checked_sub(range.restart).unwrap_or(0);
        let decoding = tokio::task::spawn_blocking(move || {
            let segments = archive.read_blocking(
                &runtime,
                range.restart,
                Some(range.boundary),
                ReadOptions::default()
                    .with_read_ahead(READ_AHEAD)
                    .following(TimelineId(range.identity.timeline)),
            );
            let mut decoder = Decoder::new(catalog, options);
            let mut sink = BatchSink {
                tx,
                folder,
                versions: TxnVersions::new(relid),
                fold: Fold::default(),
                fold_bytes,
                changes: 0,
                truncate: None,
                committed: None,
                transactions: 0,
                sent_at: Instant::now(),
                progress: Progress::bytes(label, Some(total), 0),
                position: range.restart,
                read: range.restart,
                rate: 0.0,
                written: 0,
                failed: None,
            };
            let fed = decode_segments(
                segments,
                range.restart,
                Some(range.boundary),
                &mut decoder,
                &mut sink,
            );
            if let Some(e) = sink.failed.take() {
                return Err(e);
            }
            let sent = sink.send();
            let fed = fed.map_err(|e| match e.is_history_gap() {
                true => Error::History(e.to_string()),
                false => Error::Decode(e.to_string()),
            })?;
            sent.map_err(|e| Error::Internal(e.to_string()))?;
            sink.progress.finish();
            Ok(ReplayOutcome {
                reached_boundary: fed.reached_to,
                end: fed.end,
                lost: decoder.lost().to_vec(),
                unsupported: decoder.unsupported().clone(),
                relation: decoder.catalog().by_oid(relid).map(|r| r.spec.clone()),
                transactions: sink.transactions,
            })
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
}

/// Folds the table's changes into batches on the decoding thread.
struct BatchSink {
    tx: mpsc::Sender<Batch>,
    folder: Folder,
    versions: TxnVersions,
    fold: Fold,
    fold_bytes: usize,
    changes: i64,
    truncate: Option<Version>,
    committed: Option<Lsn>,
    transactions: u64,
    sent_at: Instant,
    progress: Progress,
    position: Lsn,
    /// End of the last transaction read.
    read: Lsn,
    /// Recent rate of reading WAL, bytes per second.
    rate: f64,
    /// Rows handed to the apply loop so far.
    written: i64,
    /// Why folding failed, when it did (the decoder sees only that it did).
    failed: Option<Error>,
}

impl BatchSink {
    /// Hands what is pending to the apply loop.
    fn send(&mut self) -> Result<(), SinkError> {
        if self.fold.is_empty() && self.committed.is_none() && self.truncate.is_none() {
            return Ok(());
        }
        let rows = self.fold.len() as i64;
        self.written += rows;
        self.progress
            .set_detail(format!("{} rows written", self.written));
        let batch = Batch {
            writes: Writes::Folded(std::mem::take(&mut self.fold)),
            truncate: self.truncate.take(),
            truncate_xid: None,
            changes: std::mem::take(&mut self.changes),
            cursor: Some(Cursor::Replayed {
                committed: self.committed.take(),
                read: self.read,
                rows,
                rate: self.rate,
            }),
        };
        self.sent_at = Instant::now();
        self.tx
            .blocking_send(batch)
            .map_err(|_| "the apply loop stopped".into())
    }
}

impl Sink for BatchSink {
    fn begin(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.versions.begin(txn.commit_lsn);
        Ok(())
    }

    fn change(&mut self, _: &TxnInfo, change: RowChange) -> Result<(), SinkError> {
        let Some(version) = self.versions.next(&change) else {
            return Ok(());
        };
        self.changes += 1;
        if let RowChange::Truncate { .. } = change {
            self.truncate = self.truncate.max(Some(version));
            return Ok(());
        }
        if let Err(e) = self.folder.fold(&mut self.fold, version, None, &change) {
            self.failed = Some(e);
            return Err("folding a change failed".into());
        }
        // A huge transaction may fill the fold by itself.
        if self.fold.bytes() >= self.fold_bytes {
            self.send()?;
        }
        Ok(())
    }

    fn commit(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.committed = Some(txn.commit_lsn);
        self.read = txn.commit_lsn;
        self.transactions += 1;
        let moved = txn.commit_lsn.checked_sub(self.position).unwrap_or(0);
        if moved >= PROGRESS_STEP {
            self.position = txn.commit_lsn;
            self.rate = self.progress.advance(moved);
        }
        if self.fold.bytes() >= self.fold_bytes || self.sent_at.elapsed() >= FLUSH_INTERVAL {
            self.send()?;
        }
        Ok(())
    }

    fn message(&mut self, _: Lsn, _: &str, _: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
}
