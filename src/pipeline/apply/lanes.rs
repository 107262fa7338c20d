//! The apply loop over several destination sessions at once, for a fresh
//! version's load.
//!
//! When nothing else writes a version's table and its batches touch
//! disjoint keys with plain inserts (a snapshot copy into a table loaded
//! without its key, the merged rows of a replay), batches need not wait
//! for each other to be *stored*: each of N sessions (lanes) stores the
//! next batch in a transaction of its own while the others store theirs.
//! On a destination that spends its time evaluating the transform and
//! writing rows, that is N backends working instead of one.
//!
//! Batches still *commit* in the order the source handed them out: the
//! lane holding batch k records its cursor and commits only after batch
//! k-1 has committed, so the recorded cursor never gets ahead of what is
//! stored, and the source hears of each batch in order, as with
//! [`super::run`].

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{watch, Mutex};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::batch::{HistorySource, RecordProgress};
use super::run::Applied;
use super::store::Store;
use crate::error::{Error, Result};
use crate::failpoint;

/// What the lanes share.
struct Shared<'a, S, P> {
    store: &'a Store,
    state: Mutex<&'a mut P>,
    /// The source, and the number the next batch it hands out gets.
    source: Mutex<(&'a mut S, u64)>,
    /// How many batches have committed, in order.
    committed: watch::Sender<u64>,
    applied: Mutex<Applied>,
    cancel: &'a CancellationToken,
    prefix: &'a str,
    next_span: AtomicU64,
}

/// Stores every batch `source` hands out into the version whose progress
/// `state` records, each
/// lane (destination session) storing one batch at a time, until the
/// source has nothing more or `cancel` fires between transactions. Every
/// batch must carry a cursor and touch keys no other batch does (see the
/// module's notes). One lane is [`super::run`].
pub async fn run_lanes<S: HistorySource, P: RecordProgress>(
    lanes: Vec<&mut Client>,
    store: &Store,
    state: &mut P,
    source: &mut S,
    cancel: &CancellationToken,
    failpoint_prefix: &str,
) -> Result<Applied> {
    let shared = Shared {
        store,
        state: Mutex::new(state),
        source: Mutex::new((source, 1)),
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
        let (number, mut batch, confirms) = {
            let mut source = shared.source.lock().await;
            let Some(batch) = source.0.next().await? else {
                return Ok(());
            };
            let number = source.1;
            source.1 += 1;
            (number, batch, source.0.confirms_upstream())
        };
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
        let truncated = shared.state.lock().await.truncated();
        let stored = shared
            .store
            .store(&tx, &mut batch, truncated)
            .instrument(span.clone())
            .await;
        let stored = match stored {
            Ok(stored) => Some(stored),
            // A chunk cut off on the source is read again; its number is
            // skipped in the turn order, which the next lane sees.
            Err(Error::Source(walfill_snapshot::SnapshotError::Cut(why))) => {
                tracing::warn!(parent: &span, cause = %why, "a chunk was cut off; it is stored again");
                None
            }
            Err(e) => return Err(e),
        };
        // Our turn: every earlier batch has committed (or was cut off).
        turn_rx
            .wait_for(|done| *done + 1 >= number)
            .await
            .map_err(|_| Error::Internal("the lanes stopped".into()))?;
        let Some(stored) = stored else {
            drop(tx);
            shared.committed.send_modify(|done| *done = number);
            continue;
        };
        let mut cursor = batch
            .cursor
            .take()
            .ok_or_else(|| Error::Internal("a batch stored by lanes has no cursor".into()))?;
        if let Some(read) = &stored.chunk {
            cursor.end_chunk(read);
        }
        span.record("changes", batch.changes);
        {
            let mut state = shared.state.lock().await;
            let truncated = state.truncated().max(batch.truncate);
            state
                .record_batch(&tx, &cursor, batch.changes, truncated)
                .instrument(span.clone())
                .await?;
        }
        failpoint::hit(&format!("{}.before_commit", shared.prefix));
        tx.commit()
            .instrument(span.clone())
            .await
            .map_err(|e| Error::destination("committing a batch", e))?;
        tracing::debug!(parent: &span, "stored");
        {
            let mut applied = shared.applied.lock().await;
            applied.commits += 1;
            applied.changes += batch.changes;
            applied.unfilled += stored.unfilled;
        }
        failpoint::hit(&format!("{}.batch", shared.prefix));
        shared.source.lock().await.0.stored(&cursor).await?;
        shared.committed.send_modify(|done| *done = number);
    }
}
