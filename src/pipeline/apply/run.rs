//! The apply loop: batches from any history source, stored with their
//! cursor in one destination transaction, then confirmed to the source;
//! over one destination session, or over several at once (lanes) for a
//! fresh version's load.
//!
//! For each batch: its writes and TRUNCATE are stored, and when it carries
//! a cursor, the cursor is recorded (checking the version's lease, so a
//! process that lost the version cannot write) and the destination
//! transaction commits; only then does the source hear that the batch is
//! stored. A batch without a cursor (a piece of a large transaction) stays
//! in the open destination transaction, invisible until its transaction's
//! last batch commits, and is rolled back with it if anything fails.
//!
//! Lanes: when nothing else writes a version's table and its batches touch
//! disjoint keys with plain inserts (a snapshot copy into a table loaded
//! without its key, the merged rows of a replay), batches need not wait for
//! each other to be *stored*: each of N sessions stores the next batch in a
//! transaction of its own while the others store theirs. On a destination
//! that spends its time evaluating the transform and writing rows, that is
//! N backends working instead of one. Batches still *commit* in the order
//! the source handed them out: the lane holding batch k records its cursor
//! and commits only after batch k-1 has committed, so the recorded cursor
//! never gets ahead of what is stored, and the source hears of each batch
//! in order. Over several lanes every batch must carry its cursor.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{watch, Mutex};
use tokio_postgres::{Client, Transaction};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::batch::{Batch, Cursor, HistorySource, RecordProgress};
use super::store::Store;
use crate::error::{Error, Result};
use crate::failpoint;

/// What a run of the loop did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Destination transactions committed.
    pub commits: u64,
    /// Source row changes stored.
    pub changes: i64,
    /// Updates whose unchanged TOASTed values had no stored row to come from.
    pub unfilled: i64,
    /// Dead letters applied again that failed again.
    pub set_aside: u64,
    /// Dead letters dropped (a TRUNCATE passed them).
    pub dropped: u64,
}

/// The destination sessions a run stores batches over: one (the plain
/// loop), or several lanes for a fresh version's load (see the module's
/// notes).
pub struct Lanes<'a>(Vec<&'a mut Client>);

impl<'a> From<&'a mut Client> for Lanes<'a> {
    fn from(dest: &'a mut Client) -> Lanes<'a> {
        Lanes(vec![dest])
    }
}

impl<'a> From<Vec<&'a mut Client>> for Lanes<'a> {
    fn from(lanes: Vec<&'a mut Client>) -> Lanes<'a> {
        Lanes(lanes)
    }
}

/// What the lanes share.
struct Shared<'a, S, P> {
    store: &'a Store,
    state: Mutex<&'a mut P>,
    /// The source, and the number the next batch it hands out gets.
    source: Mutex<(&'a mut S, u64)>,
    /// Whether a batch may come in pieces (one lane only).
    pieces: bool,
    /// How many batches have committed, in order.
    committed: watch::Sender<u64>,
    applied: Mutex<Applied>,
    cancel: &'a CancellationToken,
    prefix: &'a str,
    next_span: AtomicU64,
}

/// One batch as a lane stored it, in its open transaction.
struct Held {
    /// The cursor to record (`None`: the source cut the batch off; it is
    /// read again as the next batch).
    cursor: Option<Cursor>,
    changes: i64,
    unfilled: i64,
    set_aside: u64,
    dropped: u64,
    /// The TRUNCATE watermark to record with it.
    truncated: Option<walfill_core::Version>,
}

/// Stores every batch `source` hands out into the version whose progress
/// `state` records, over the destination sessions `lanes` (one, or
/// several for a fresh version's load), until the source has nothing
/// more, or `cancel` fires between transactions.
pub async fn run<'a, S: HistorySource, P: RecordProgress>(
    lanes: impl Into<Lanes<'a>>,
    store: &Store,
    state: &mut P,
    source: &mut S,
    cancel: &CancellationToken,
    failpoint_prefix: &str,
) -> Result<Applied> {
    let Lanes(lanes) = lanes.into();
    let shared = Shared {
        store,
        state: Mutex::new(state),
        source: Mutex::new((source, 1)),
        pieces: lanes.len() == 1,
        committed: watch::channel(0).0,
        applied: Mutex::new(Applied::default()),
        cancel,
        prefix: failpoint_prefix,
        next_span: AtomicU64::new(1),
    };
    futures_util::future::try_join_all(lanes.into_iter().map(|lane| lane_loop(lane, &shared)))
        .await?;
    Ok(shared.applied.into_inner())
}

/// One lane: takes the next batch, stores it, waits for its turn, records
/// its cursor and commits; until the source is done.
async fn lane_loop<S: HistorySource, P: RecordProgress>(
    dest: &mut Client,
    shared: &Shared<'_, S, P>,
) -> Result<()> {
    let mut turn_rx = shared.committed.subscribe();
    loop {
        if shared.cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        // Batches are taken (and numbered) in the source's order.
        let (number, batch, confirms) = {
            let mut source = shared.source.lock().await;
            let Some(batch) = source.0.next().await? else {
                return Ok(());
            };
            let number = source.1;
            source.1 += 1;
            (number, batch, source.0.confirms_upstream())
        };
        // One span per destination transaction: a chunk of a copy, a
        // batch of replayed or streamed transactions.
        let span = tracing::debug_span!(
            "batch",
            of = %shared.prefix,
            n = shared.next_span.fetch_add(1, Ordering::Relaxed),
            changes = tracing::field::Empty
        );
        let tx = dest
            .transaction()
            .await
            .map_err(|e| Error::destination("starting a batch", e))?;
        if !confirms {
            tx.batch_execute("SET LOCAL synchronous_commit = off")
                .await
                .map_err(|e| Error::destination("starting a batch", e))?;
        }
        let Some(held) = store_batch(shared, &tx, batch, &span).await? else {
            // The source ended inside a transaction: what arrived of it is
            // rolled back here and read again next time.
            return Ok(());
        };
        // Our turn: every earlier batch has committed (or was cut off).
        turn_rx
            .wait_for(|done| *done + 1 >= number)
            .await
            .map_err(|_| Error::Internal("the lanes stopped".into()))?;
        let Some(cursor) = &held.cursor else {
            drop(tx);
            shared.committed.send_modify(|done| *done = number);
            continue;
        };
        span.record("changes", held.changes);
        shared
            .state
            .lock()
            .await
            .record_batch(&tx, cursor, held.changes, held.truncated)
            .instrument(span.clone())
            .await?;
        failpoint::hit(&format!("{}.before_commit", shared.prefix));
        tx.commit()
            .instrument(span.clone())
            .await
            .map_err(|e| Error::destination("committing a batch", e))?;
        tracing::debug!(parent: &span, "stored");
        {
            let mut applied = shared.applied.lock().await;
            applied.commits += 1;
            applied.changes += held.changes;
            applied.unfilled += held.unfilled;
            applied.set_aside += held.set_aside;
            applied.dropped += held.dropped;
        }
        failpoint::hit(&format!("{}.batch", shared.prefix));
        shared.source.lock().await.0.stored(cursor).await?;
        shared.committed.send_modify(|done| *done = number);
    }
}

/// Stores `batch` in `tx`, and the further pieces of its source transaction
/// up to the one that carries the cursor. `None`: the source ended before
/// that piece.
async fn store_batch<S: HistorySource, P: RecordProgress>(
    shared: &Shared<'_, S, P>,
    tx: &Transaction<'_>,
    mut batch: Batch,
    span: &Span,
) -> Result<Option<Held>> {
    let mut truncated = {
        let mut state = shared.state.lock().await;
        state.before_batch(tx).await?;
        state.truncated()
    };
    let mut held = Held {
        cursor: None,
        changes: 0,
        unfilled: 0,
        set_aside: 0,
        dropped: 0,
        truncated,
    };
    loop {
        let stored = match shared
            .store
            .store(tx, &mut batch, truncated)
            .instrument(span.clone())
            .await
        {
            Ok(stored) => stored,
            // The source was cut off in the middle of a snapshot chunk
            // (always a batch of its own): what arrived of it is rolled back
            // with the transaction, and the reader reads the chunk again as
            // the next batch.
            Err(Error::Source(walfill_snapshot::SnapshotError::Cut(why))) => {
                tracing::warn!(parent: span, cause = %why, "a chunk was cut off; it is stored again");
                return Ok(Some(held));
            }
            Err(e) => return Err(e),
        };
        held.unfilled += stored.unfilled;
        held.set_aside += stored.set_aside;
        held.dropped += stored.dropped;
        held.changes += batch.changes;
        truncated = truncated.max(batch.truncate);
        held.truncated = truncated;
        if let Some(mut cursor) = batch.cursor.take() {
            if let Some(read) = &stored.chunk {
                cursor.end_chunk(read);
            }
            held.cursor = Some(cursor);
            return Ok(Some(held));
        }
        if !shared.pieces {
            return Err(Error::Internal(
                "a batch stored by several lanes has no cursor".into(),
            ));
        }
        batch = match shared.source.lock().await.0.next().await? {
            Some(next) => next,
            None => return Ok(None),
        };
    }
}
