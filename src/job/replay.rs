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

use crate::apply::Applier;
use crate::base::{read_part, relation_of, Manifest};
use crate::decode::{change_budget, READ_AHEAD};
use crate::error::{Error, Result};
use crate::planner::{blocking_loss, ReplayStart};
use crate::progress::Progress;
use crate::state::VersionState;

/// Batches in flight between the decoding thread and the applier.
const CHANNEL_BATCHES: usize = 2;

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
    /// Changes per destination transaction.
    pub(super) batch_changes: usize,
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

/// A batch of replayed changes.
struct Batch {
    changes: Vec<(Version, RowChange)>,
    /// Commit LSN of the last transaction the batch completes.
    committed: Option<Lsn>,
    transactions: u64,
}

/// Sends whole transactions' changes to the applier in batches.
struct ChannelSink {
    tx: mpsc::Sender<Batch>,
    batch: Batch,
    batch_changes: usize,
    seq: u32,
}

impl ChannelSink {
    fn send(&mut self) -> Result<(), SinkError> {
        let batch = std::mem::replace(
            &mut self.batch,
            Batch {
                changes: Vec::with_capacity(self.batch_changes),
                committed: None,
                transactions: 0,
            },
        );
        self.tx
            .blocking_send(batch)
            .map_err(|_| "the applier stopped".into())
    }
}

impl Sink for ChannelSink {
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
        self.batch.changes.push((version, change));
        // A huge transaction goes in several batches.
        if self.batch.changes.len() >= 4 * self.batch_changes {
            self.send()?;
        }
        Ok(())
    }

    fn commit(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.batch.committed = Some(txn.commit_lsn);
        self.batch.transactions += 1;
        if self.batch.changes.len() >= self.batch_changes {
            self.send()?;
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
    let (tx, mut rx) = mpsc::channel::<Batch>(CHANNEL_BATCHES);
    let batch_changes = source.batch_changes.max(1);
    let runtime = tokio::runtime::Handle::current();
    let archive = source.archive.clone();
    let boundary = source.boundary;
    let decoding = tokio::task::spawn_blocking(move || {
        let segments = archive.read_blocking(
            &runtime,
            restart,
            Some(boundary),
            ReadOptions::default().with_read_ahead(READ_AHEAD),
        );
        let mut decoder = Decoder::new(catalog, options);
        let mut sink = ChannelSink {
            tx,
            batch: Batch {
                changes: Vec::with_capacity(batch_changes),
                committed: None,
                transactions: 0,
            },
            batch_changes,
            seq: 0,
        };
        let fed = decode_segments(segments, restart, Some(boundary), &mut decoder, &mut sink);
        let sent = sink.send();
        let fed = fed.map_err(|e| match e.is_history_gap() {
            true => Error::History(e.to_string()),
            false => Error::Decode(e.to_string()),
        })?;
        sent.map_err(|e| Error::State(e.to_string()))?;
        Ok::<_, Error>((fed, decoder.lost().to_vec(), decoder.unsupported().clone()))
    });

    let label = format!("replay {}/{}", state.target, state.version);
    let total = boundary.checked_sub(restart).unwrap_or(0);
    let mut progress = Progress::bytes(label, Some(total), 0);
    let mut position = restart;
    let mut transactions = 0;
    let mut changes = 0;
    let applied = async {
        loop {
            let batch = tokio::select! {
                _ = cancel.cancelled() => return Err(Error::Interrupted),
                batch = rx.recv() => batch,
            };
            let Some(batch) = batch else {
                return Ok(());
            };
            let started = Instant::now();
            let tx = dest
                .transaction()
                .await
                .map_err(|e| Error::destination("starting a replay batch", e))?;
            let outcome = applier
                .apply_versioned(
                    &tx,
                    batch.changes.iter().map(|(v, c)| (*v, c)),
                    state.truncated,
                )
                .await?;
            state
                .record_replayed(&tx, batch.committed, outcome.changes, outcome.truncated)
                .await?;
            tx.commit()
                .await
                .map_err(|e| Error::destination("committing a replay batch", e))?;
            transactions += batch.transactions;
            changes += outcome.changes;
            if let Some(commit) = batch.committed {
                let moved = commit.checked_sub(position).unwrap_or(0);
                position = position.max(commit);
                progress.advance(moved, started.elapsed());
            }
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
    progress.finish();
    Ok(WalOutcome {
        reached_boundary: fed.reached_to,
        end: fed.end,
        lost,
        unsupported,
        transactions,
        changes,
    })
}
