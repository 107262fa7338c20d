//! The copy phase: keyset chunks read inside an exported snapshot, each
//! stored with the cursor after it in one destination transaction.

use std::time::Instant;

use tokio_postgres::{Client, IsolationLevel};
use tokio_util::sync::CancellationToken;
use walfill_replay::Lsn;
use walfill_snapshot::sql::quote_literal;
use walfill_snapshot::{KeysetChunk, SnapshotError};

use crate::apply::Applier;
use crate::base::BaseWriter;
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::state::VersionState;

/// An exported snapshot and the LSN it is consistent at.
pub(super) struct Snapshot<'a> {
    /// The name to import with `SET TRANSACTION SNAPSHOT`.
    pub(super) name: &'a str,
    /// Its consistent point: every copied row is versioned `(boundary, 0)`.
    pub(super) boundary: Lsn,
}

/// How big the chunks are and how fast they may come.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    /// Rows per chunk.
    pub(super) chunk_rows: u32,
    /// Optional cap on rows per second.
    pub(super) max_rows_per_second: Option<u32>,
}

/// Copies the rest of the table (after the saved cursor) as seen by
/// `snapshot`, handing each stored chunk to `base` when writing a base
/// snapshot (a failure there is logged and ends the base, not the copy).
#[allow(clippy::too_many_arguments)]
pub(super) async fn copy_snapshot(
    source: &mut Client,
    dest: &mut Client,
    applier: &Applier,
    state: &mut VersionState,
    snapshot: Snapshot<'_>,
    pace: Pace,
    base: &mut Option<BaseWriter>,
    cancel: &CancellationToken,
) -> Result<()> {
    let chunk_rows = pace.chunk_rows;
    let Snapshot {
        name: snapshot,
        boundary,
    } = snapshot;
    let snapshot_tx = source
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(|e| SnapshotError::query("opening the snapshot transaction", e))?;
    snapshot_tx
        .batch_execute(&format!(
            "SET TRANSACTION SNAPSHOT {}",
            quote_literal(snapshot)
        ))
        .await
        .map_err(|e| SnapshotError::query("importing the exported snapshot", e))?;

    let total = u64::try_from(state.rows_estimated).ok().filter(|t| *t > 0);
    let done = u64::try_from(state.rows_copied).unwrap_or(0);
    let label = format!("copy {}/{}", state.target, state.version);
    let mut progress = Progress::new(label, total, done);
    tracing::info!(
        target = %state.target,
        version = %state.version,
        %boundary,
        resume_after = ?state.copy_cursor,
        "copying"
    );
    // The next chunk is read from the source while the current one is
    // stored in the destination.
    let table = &applier.plan().source;
    let mut cursor = state.copy_cursor.clone();
    let mut pending = KeysetChunk::new(table, cursor.as_deref(), chunk_rows)
        .read(&snapshot_tx)
        .await?;
    let mut rate = state.copy_rate;
    loop {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        let started = Instant::now();
        let Some(last) = pending.read.last_key.clone() else {
            break;
        };
        let rows = pending.read.rows;
        let chunk = KeysetChunk::new(table, cursor.as_deref(), chunk_rows);
        let next = KeysetChunk::new(table, Some(&last), chunk_rows);
        let store = async {
            let tx = dest
                .transaction()
                .await
                .map_err(|e| Error::destination("starting a chunk", e))?;
            applier
                .load_chunk(&tx, &chunk, &pending, boundary, state.truncated)
                .await?;
            let copied = i64::try_from(rows).unwrap_or(i64::MAX);
            state.record_chunk(&tx, &last, copied, rate).await?;
            tx.commit()
                .await
                .map_err(|e| Error::destination("committing a chunk", e))
        };
        let fetch = async {
            if rows < u64::from(chunk_rows) {
                return Ok(None);
            }
            next.read(&snapshot_tx).await.map(Some)
        };
        let (stored, fetched) = tokio::join!(store, fetch);
        stored?;
        let fetched = fetched?;
        if let Some(writer) = base.as_mut() {
            if let Err(e) = writer.add(&pending, boundary).await {
                tracing::warn!(error = %e, "giving up the base snapshot; the copy goes on");
                *base = None;
            }
        }
        rate = progress.advance(rows, started.elapsed());
        if let Some(cap) = pace.max_rows_per_second {
            let wanted = std::time::Duration::from_secs_f64(rows as f64 / f64::from(cap));
            if let Some(rest) = wanted.checked_sub(started.elapsed()) {
                tokio::select! {
                    _ = cancel.cancelled() => return Err(Error::Interrupted),
                    _ = tokio::time::sleep(rest) => {}
                }
            }
        }
        cursor = Some(last);
        match fetched {
            Some(data) => pending = data,
            None => break,
        }
    }
    snapshot_tx
        .commit()
        .await
        .map_err(|e| SnapshotError::query("closing the snapshot transaction", e))?;
    progress.finish();
    Ok(())
}
