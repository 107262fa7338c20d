//! The replay phase: a version filled from its base (the table's creation,
//! or a base snapshot in the archive) and the archived WAL after it, up to
//! the slot's boundary, where the live stream takes over. The source table
//! is never read.
//!
//! WAL is decoded on a blocking thread; whole transactions reach the
//! applier in batches over a bounded channel, and each batch is stored in
//! one destination transaction with the commit LSN of the last transaction
//! it completes. A rerun decodes from the start again but stores only what
//! committed after that LSN.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_replay::archive::{Archive, ArchiveError, ReadOptions};
use walfill_replay::decode::{
    decode_segments, Catalog, DecodeOptions, Decoder, LostRelation, RelationSchema, Sink,
    SinkError, TxnInfo, UnsupportedColumn,
};
use walfill_replay::{Lsn, RowChange, Version};

use crate::apply::{Applier, Fold, Folder};
use crate::base::{read_part, relation_of, Manifest};
use crate::decode::{change_budget, READ_AHEAD};
use crate::error::{Error, Result};
use crate::planner::{blocking_loss, ReplayStart};
use crate::progress::Progress;
use crate::state::VersionState;

/// The progress of decoding is reported every this many bytes of WAL.
const PROGRESS_STEP: u64 = 16 << 20;

/// Replayed changes pending in the fold are stored at least this often, so
/// an interrupted replay resumes from a recent position.
const FLUSH_INTERVAL: Duration = Duration::from_secs(30);

/// Memory for transactions being decoded; larger ones spill to disk.
const DECODE_MEMORY: usize = 512 << 20;

/// What a replay reads.
pub(super) struct ReplaySource<'a> {
    /// Where the WAL and the base are.
    pub(super) archive: &'a Archive,
    /// The source database's OID.
    pub(super) database: u32,
    /// Where the replay starts.
    pub(super) start: &'a ReplayStart,
    /// The slot's consistent point: transactions committing before it are
    /// replayed, the rest come from the stream.
    pub(super) boundary: Lsn,
    /// Replayed changes are folded to one write per key in this much memory
    /// before they are stored.
    pub(super) fold_bytes: usize,
}

/// Fills the staging table from the base and the WAL up to the boundary.
/// Resumes from what `state` records.
pub(super) async fn replay(
    dest: &mut Client,
    applier: &mut Applier,
    state: &mut VersionState,
    source: &ReplaySource<'_>,
    wait: Duration,
    cancel: &CancellationToken,
) -> Result<()> {
    if let ReplayStart::Snapshot { manifest } = source.start {
        if state.replayed_lsn.is_none() {
            load_base(dest, applier, state, source.archive, manifest, cancel).await?;
        }
    }
    let started = Instant::now();
    loop {
        let outcome = replay_wal(dest, applier, state, source, cancel).await?;
        check(applier, source, &outcome)?;
        if outcome.reached_boundary {
            tracing::info!(
                target = %state.target,
                version = %state.version,
                transactions = outcome.transactions,
                changes = outcome.changes,
                seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                "replayed up to the boundary"
            );
            return Ok(());
        }
        // The archive's unfinished segment ends before the boundary: wait
        // for the archiver to store more of it, then go on from what is
        // stored.
        if started.elapsed() > wait {
            return Err(Error::History(format!(
                "the archived WAL ends at {} (in an unfinished .partial segment), before the \
                 replay's boundary {}; is the archiver running?",
                outcome.end, source.boundary
            )));
        }
        tracing::info!(end = %outcome.end, boundary = %source.boundary, "waiting for the archive to reach the boundary");
        pause(Duration::from_secs(2), cancel).await?;
    }
}

/// Fails when the replayed rows cannot be right: the table's changes could
/// not be followed, or a column the transform reads could not be decoded.
fn check(applier: &Applier, source: &ReplaySource<'_>, outcome: &WalOutcome) -> Result<()> {
    let plan = applier.plan();
    let from = source.start.from();
    if let Some(lost) = blocking_loss(&outcome.lost, plan, from) {
        return Err(Error::History(format!(
            "{} cannot be followed through the archive from {}: {}",
            plan.source, lost.lsn, lost.reason
        )));
    }
    if let Some(column) = outcome
        .unsupported
        .iter()
        .find(|c| plan.referenced.contains(&c.column) || plan.key.contains(&c.column))
    {
        return Err(Error::History(format!(
            "column {}.{} has type {}, which walfill cannot decode from WAL",
            column.relation, column.column, column.type_name
        )));
    }
    Ok(())
}

async fn pause(duration: Duration, cancel: &CancellationToken) -> Result<()> {
    tokio::select! {
        _ = cancel.cancelled() => Err(Error::Interrupted),
        _ = tokio::time::sleep(duration) => Ok(()),
    }
}

/// Waits until the archive holds every segment from `from` to the one
/// holding `boundary`, asking the source to switch to a new segment so the
/// one holding the boundary is archived without waiting for it to fill.
pub(super) async fn wait_for_archive(
    source: &Client,
    archive: &Archive,
    from: Lsn,
    boundary: Lsn,
    wait: Duration,
    cancel: &CancellationToken,
) -> Result<()> {
    let started = Instant::now();
    let mut switched = false;
    loop {
        let Some(missing) = missing(archive, from, boundary).await? else {
            return Ok(());
        };
        if !switched {
            switched = true;
            match source.execute("SELECT pg_switch_wal()", &[]).await {
                Ok(_) => tracing::info!("asked the source to switch WAL segments"),
                Err(e) => tracing::info!(
                    error = %e,
                    "could not switch WAL segments (needs pg_switch_wal permission); \
                     waiting for the archiver"
                ),
            }
        }
        if started.elapsed() > wait {
            return Err(Error::History(format!(
                "{missing}, and the replay needs WAL up to its boundary {boundary}; is WAL being \
                 archived (archive_command, or `walfill archive`)? [archive] wait_seconds sets \
                 how long to wait"
            )));
        }
        tracing::info!(%missing, %boundary, "waiting for the archive");
        pause(Duration::from_secs(1), cancel).await?;
    }
}

/// What the archive lacks of `[from, boundary)`, if anything. A segment
/// missing before WAL the archive already holds will never come: an error.
async fn missing(archive: &Archive, from: Lsn, boundary: Lsn) -> Result<Option<String>> {
    match archive
        .plan_read(from, Some(boundary), &ReadOptions::default())
        .await
    {
        Ok(_) => Ok(None),
        Err(ArchiveError::MissingSegment { name, lsn, .. }) => {
            let list = archive.segments(None).await?;
            let size = u64::from(list.segment_size);
            let later = list
                .segments
                .iter()
                .any(|s| s.name.segno.start_lsn(size) > lsn);
            if later {
                return Err(Error::History(format!(
                    "segment {name} (WAL from {lsn}) is missing from the archive, which holds \
                     later WAL"
                )));
            }
            Ok(Some(format!(
                "segment {name} (WAL from {lsn}) is not archived yet"
            )))
        }
        Err(ArchiveError::NoSegments { .. }) => Ok(Some("the archive holds no WAL".into())),
        Err(e) => Err(Error::History(e.to_string())),
    }
}

/// Stores the base snapshot's parts not stored yet, one destination
/// transaction per part.
async fn load_base(
    dest: &mut Client,
    applier: &mut Applier,
    state: &mut VersionState,
    archive: &Archive,
    manifest: &Manifest,
    cancel: &CancellationToken,
) -> Result<()> {
    let relation = relation_of(manifest);
    let done = state
        .copy_cursor
        .as_ref()
        .and_then(|c| c.first().cloned())
        .unwrap_or_default();
    let label = format!("base {}/{}", state.target, state.version);
    let mut progress = Progress::new(label, Some(manifest.rows), state.rows_copied.max(0) as u64);
    for part in manifest.parts.iter().filter(|p| p.file > done) {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        let started = Instant::now();
        let rows = read_part(archive, manifest, part, &relation).await?;
        let count = rows.len();
        let changes: Vec<RowChange> = rows
            .into_iter()
            .map(|new| RowChange::Insert {
                relation: relation.clone(),
                new,
            })
            .collect();
        let version = Version::snapshot(part.lsn);
        let tx = dest
            .transaction()
            .await
            .map_err(|e| Error::destination("starting a base part", e))?;
        applier
            .apply_versioned(&tx, changes.iter().map(|c| (version, c)), state.truncated)
            .await?;
        state
            .record_base_part(&tx, &part.file, count as i64)
            .await?;
        tx.commit()
            .await
            .map_err(|e| Error::destination("committing a base part", e))?;
        progress.advance(count as u64, started.elapsed());
    }
    progress.finish();
    Ok(())
}

/// What the decoding thread hands the applier, in order.
enum Staged {
    /// Writes folded from the changes of transactions up to `committed`
    /// (and maybe part of the next one).
    Writes {
        fold: Fold,
        changes: i64,
        committed: Option<Lsn>,
        transactions: u64,
    },
    /// A TRUNCATE of the table, after the writes sent before it.
    Truncate(Version),
}

/// Folds decoded changes to one write per key and hands the fold to the
/// applier when it fills its memory, every [`FLUSH_INTERVAL`] and at the
/// end. Folding here, on the decoding thread, lets decoding go on while the
/// applier stores the previous fold.
struct FoldingSink {
    tx: mpsc::Sender<Staged>,
    folder: Folder,
    fold: Fold,
    fold_bytes: usize,
    changes: i64,
    committed: Option<Lsn>,
    transactions: u64,
    sent_at: Instant,
    seq: u32,
    progress: Progress,
    position: Lsn,
    stepped_at: Instant,
    /// Why folding failed, when it did (the decoder sees only that it did).
    failed: Option<Error>,
}

impl FoldingSink {
    fn send(&mut self, staged: Staged) -> Result<(), SinkError> {
        self.tx
            .blocking_send(staged)
            .map_err(|_| "the applier stopped".into())
    }

    fn send_fold(&mut self) -> Result<(), SinkError> {
        if self.fold.is_empty() && self.committed.is_none() {
            return Ok(());
        }
        let staged = Staged::Writes {
            fold: std::mem::take(&mut self.fold),
            changes: std::mem::take(&mut self.changes),
            committed: self.committed.take(),
            transactions: std::mem::take(&mut self.transactions),
        };
        self.sent_at = Instant::now();
        self.send(staged)
    }
}

impl Sink for FoldingSink {
    fn begin(&mut self, _: &TxnInfo) -> Result<(), SinkError> {
        self.seq = 0;
        Ok(())
    }

    fn change(&mut self, txn: &TxnInfo, change: RowChange) -> Result<(), SinkError> {
        if matches!(change, RowChange::Message { .. }) {
            return Ok(());
        }
        self.seq += 1;
        let version = Version {
            commit_lsn: txn.commit_lsn,
            seq: self.seq,
        };
        if let RowChange::Truncate { .. } = change {
            self.send_fold()?;
            return self.send(Staged::Truncate(version));
        }
        match self.folder.fold_change(&mut self.fold, version, &change) {
            Ok(true) => self.changes += 1,
            Ok(false) => {}
            Err(e) => {
                self.failed = Some(e);
                return Err("folding a change failed".into());
            }
        }
        // A huge transaction may fill the fold by itself.
        if self.fold.bytes() >= self.fold_bytes {
            self.send_fold()?;
        }
        Ok(())
    }

    fn commit(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.committed = Some(txn.commit_lsn);
        self.transactions += 1;
        let moved = txn.commit_lsn.checked_sub(self.position).unwrap_or(0);
        if moved >= PROGRESS_STEP {
            self.position = txn.commit_lsn;
            self.progress.advance(moved, self.stepped_at.elapsed());
            self.stepped_at = Instant::now();
        }
        if self.fold.bytes() >= self.fold_bytes || self.sent_at.elapsed() >= FLUSH_INTERVAL {
            self.send_fold()?;
        }
        Ok(())
    }

    fn message(&mut self, _: Lsn, _: &str, _: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
}

/// What decoding the WAL found.
struct WalOutcome {
    reached_boundary: bool,
    end: Lsn,
    lost: Vec<LostRelation>,
    unsupported: BTreeSet<UnsupportedColumn>,
    transactions: u64,
    changes: i64,
}

/// Decodes `[restart, boundary)` and stores the changes of transactions
/// committing after what is already stored.
async fn replay_wal(
    dest: &mut Client,
    applier: &mut Applier,
    state: &mut VersionState,
    source: &ReplaySource<'_>,
    cancel: &CancellationToken,
) -> Result<WalOutcome> {
    let start = source.start;
    let restart = start.restart();
    let emit_from = match state.replayed_lsn {
        Some(done) => done.advance(1).max(start.from()),
        None => start.from(),
    };
    let mut catalog = Catalog::new(source.database);
    if let ReplayStart::Snapshot { manifest } = start {
        catalog.insert(RelationSchema::new(manifest.relation.clone()));
    }
    let segment_size = source.archive.segment_size().await?;
    let options = DecodeOptions {
        emit_from,
        memory_limit: change_budget(DECODE_MEMORY, segment_size),
        only: Some(BTreeSet::from([applier.plan().source.oid])),
        strict_types: false,
        unsupported_as_null: true,
        ..DecodeOptions::default()
    };
    // One fold being stored, one waiting, one being filled.
    let fold_bytes = (source.fold_bytes / 3).max(1);
    let (tx, mut rx) = mpsc::channel::<Staged>(1);
    let runtime = tokio::runtime::Handle::current();
    let archive = source.archive.clone();
    let boundary = source.boundary;
    let label = format!("replay {}/{}", state.target, state.version);
    let total = boundary.checked_sub(restart).unwrap_or(0);
    let folder = applier.folder();
    let decoding = tokio::task::spawn_blocking(move || {
        let segments = archive.read_blocking(
            &runtime,
            restart,
            Some(boundary),
            ReadOptions::default().with_read_ahead(READ_AHEAD),
        );
        let mut decoder = Decoder::new(catalog, options);
        let mut sink = FoldingSink {
            tx,
            folder,
            fold: Fold::default(),
            fold_bytes,
            changes: 0,
            committed: None,
            transactions: 0,
            sent_at: Instant::now(),
            seq: 0,
            progress: Progress::bytes(label, Some(total), 0),
            position: restart,
            stepped_at: Instant::now(),
            failed: None,
        };
        let fed = decode_segments(segments, restart, Some(boundary), &mut decoder, &mut sink);
        if let Some(e) = sink.failed.take() {
            return Err(e);
        }
        let sent = sink.send_fold();
        let fed = fed.map_err(|e| match e.is_history_gap() {
            true => Error::History(e.to_string()),
            false => Error::Decode(e.to_string()),
        })?;
        sent.map_err(|e| Error::State(e.to_string()))?;
        sink.progress.finish();
        Ok::<_, Error>((fed, decoder.lost().to_vec(), decoder.unsupported().clone()))
    });

    let mut transactions = 0;
    let mut changes = 0;
    let applied = async {
        loop {
            let staged = tokio::select! {
                _ = cancel.cancelled() => return Err(Error::Interrupted),
                staged = rx.recv() => staged,
            };
            let Some(staged) = staged else {
                return Ok(());
            };
            let tx = dest
                .transaction()
                .await
                .map_err(|e| Error::destination("starting a replay batch", e))?;
            match staged {
                Staged::Writes {
                    mut fold,
                    changes: folded,
                    committed,
                    transactions: completed,
                } => {
                    applier
                        .flush_pending(&tx, &mut fold, state.truncated)
                        .await?;
                    state.record_replayed(&tx, committed, folded, None).await?;
                    changes += folded;
                    transactions += completed;
                }
                Staged::Truncate(version) => {
                    applier.apply_truncate(&tx, version).await?;
                    // The position stays: the transaction may go on after it.
                    state.record_replayed(&tx, None, 1, Some(version)).await?;
                    changes += 1;
                }
            }
            tx.commit()
                .await
                .map_err(|e| Error::destination("committing a replay batch", e))?;
        }
    }
    .await;
    // Stop the decoder (its sends fail once the receiver is gone).
    drop(rx);
    let decoded = decoding
        .await
        .map_err(|e| Error::State(format!("the decoding thread failed: {e}")))?;
    applied?;
    let (fed, lost, unsupported) = decoded?;
    Ok(WalOutcome {
        reached_boundary: fed.reached_to,
        end: fed.end,
        lost,
        unsupported,
        transactions,
        changes,
    })
}
