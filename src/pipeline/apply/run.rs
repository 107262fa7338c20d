//! The apply loop: batches from any history source, stored with their
//! cursor in one destination transaction, then confirmed to the source.

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::batch::{HistorySource, RecordProgress};
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
}

/// Stores every batch `source` hands out into the version whose progress
/// `state` records, until the
/// source has nothing more, or `cancel` fires between transactions.
///
/// For each batch: its writes and TRUNCATE are stored, and when it carries
/// a cursor, the cursor is recorded (checking the version's lease, so a
/// process that lost the version cannot write) and the destination
/// transaction commits; only then does the source hear that the batch is
/// stored. A batch without a cursor (a piece of a large transaction) stays
/// in the open destination transaction, invisible until its transaction's
/// last batch commits, and is rolled back with it if anything fails.
pub async fn run<S: HistorySource, P: RecordProgress>(
    dest: &mut Client,
    store: &Store,
    state: &mut P,
    source: &mut S,
    cancel: &CancellationToken,
    failpoint_prefix: &str,
) -> Result<Applied> {
    let mut applied = Applied::default();
    let mut truncated = state.truncated();
    loop {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        let Some(mut batch) = source.next().await? else {
            return Ok(applied);
        };
        // One span per destination transaction: a chunk of a copy, a
        // batch of replayed or streamed transactions.
        let span = tracing::debug_span!(
            "batch",
            of = %failpoint_prefix,
            n = applied.commits + 1,
            changes = tracing::field::Empty
        );
        let tx = dest
            .transaction()
            .await
            .map_err(|e| Error::destination("starting a batch", e))?;
        if !source.confirms_upstream() {
            tx.batch_execute("SET LOCAL synchronous_commit = off")
                .await
                .map_err(|e| Error::destination("starting a batch", e))?;
        }
        let mut changes = 0;
        // Pieces of one source transaction go into this one destination
        // transaction, which commits with the batch that carries a cursor.
        let cursor = loop {
            let stored = match store
                .store(&tx, &mut batch, truncated)
                .instrument(span.clone())
                .await
            {
                Ok(stored) => stored,
                // The source was cut off in the middle of a snapshot chunk
                // (always a batch of its own): what arrived of it is rolled
                // back with the transaction, and the reader reads the chunk
                // again as the next batch.
                Err(Error::Source(walfill_snapshot::SnapshotError::Cut(why))) => {
                    tracing::warn!(parent: &span, cause = %why, "a chunk was cut off; it is stored again");
                    break None;
                }
                Err(e) => return Err(e),
            };
            applied.unfilled += stored.unfilled;
            changes += batch.changes;
            truncated = truncated.max(batch.truncate);
            if let Some(mut cursor) = batch.cursor.take() {
                if let Some(read) = &stored.chunk {
                    cursor.end_chunk(read);
                }
                break Some(cursor);
            }
            batch = match source.next().await? {
                Some(next) => next,
                // A source ends between transactions; a transaction cut
                // short is rolled back here and read again next time.
                None => return Ok(applied),
            };
        };
        let Some(cursor) = cursor else {
            drop(tx);
            continue;
        };
        span.record("changes", changes);
        state
            .record_batch(&tx, &cursor, changes, truncated)
            .instrument(span.clone())
            .await?;
        failpoint::hit(&format!("{failpoint_prefix}.before_commit"));
        tx.commit()
            .instrument(span.clone())
            .await
            .map_err(|e| Error::destination("committing a batch", e))?;
        tracing::debug!(parent: &span, "stored");
        applied.commits += 1;
        applied.changes += changes;
        failpoint::hit(&format!("{failpoint_prefix}.batch"));
        source.stored(&cursor).await?;
    }
}
