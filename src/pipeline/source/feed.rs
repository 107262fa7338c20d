//! The side of a keyset copy that the apply loop meets: chunks a reader
//! task has started, handed over one at a time, counted on the progress
//! line and paced to the copy's rate cap.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use walfill_core::Version;
use walfill_snapshot::ChunkRows;

use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, ChunkSnapshot, Cursor, Writes};
use crate::progress::Progress;

/// How big the chunks are and how fast they may come.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Rows per chunk.
    pub chunk_rows: u32,
    /// Optional cap on rows per second.
    pub max_rows_per_second: Option<u32>,
}

/// Chunks from a reader task.
pub(super) struct Feed<T> {
    chunks: mpsc::Receiver<Result<T>>,
    pace: Pace,
    progress: Option<Progress>,
    /// When the chunk being stored was handed over.
    started: Instant,
    /// The copy's recent rate, rows per second.
    pub(super) rate: f64,
    cancel: CancellationToken,
}

impl<T> Feed<T> {
    /// The chunks `chunks` brings, paced by `pace`, counted on `progress`.
    pub(super) fn new(
        chunks: mpsc::Receiver<Result<T>>,
        pace: Pace,
        progress: Progress,
        cancel: CancellationToken,
    ) -> Feed<T> {
        Feed {
            chunks,
            pace,
            progress: Some(progress),
            started: Instant::now(),
            rate: 0.0,
            cancel,
        }
    }

    /// The next chunk the reader started; `None` when it has no more.
    pub(super) async fn next(&mut self) -> Result<Option<T>> {
        if self.cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        self.started = Instant::now();
        self.chunks.recv().await.transpose()
    }

    /// A chunk of `rows` is stored: counts it, and waits, when the copy
    /// has a rate cap, until the rows read since it was handed over are
    /// within it.
    pub(super) async fn stored(&mut self, rows: i64) -> Result<()> {
        let rows = u64::try_from(rows).unwrap_or(0);
        if let Some(progress) = self.progress.as_mut() {
            self.rate = progress.advance(rows);
        }
        let Some(cap) = self.pace.max_rows_per_second else {
            return Ok(());
        };
        let wanted = Duration::from_secs_f64(rows as f64 / f64::from(cap));
        if let Some(rest) = wanted.checked_sub(self.started.elapsed()) {
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(Error::Interrupted),
                _ = tokio::time::sleep(rest) => {}
            }
        }
        Ok(())
    }

    /// Closes the progress line and stops taking chunks.
    pub(super) fn close(&mut self) {
        if let Some(progress) = self.progress.take() {
            progress.finish();
        }
        self.chunks.close();
    }
}

/// The batch of one chunk whose rows are all versioned `version`; its
/// cursor is completed from what the chunk read once it is stored.
pub(super) fn chunk_batch(
    rows: ChunkRows,
    projected: bool,
    (version, snapshot): (Version, Option<ChunkSnapshot>),
    after: Option<Vec<String>>,
    cursor: Cursor,
) -> Batch {
    Batch {
        writes: Writes::Chunk {
            rows,
            projected,
            version,
            snapshot,
            after,
        },
        truncate: None,
        truncate_xid: None,
        changes: 0,
        cursor: Some(cursor),
    }
}
