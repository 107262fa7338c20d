//! The writer: one task storing segments in the archive, in the order they
//! were handed over, and publishing how far the archive is durable.
//!
//! Complete segments are written zstd-compressed and their `.partial` files
//! deleted after; tails are written as `.partial`. A write that fails for a
//! reason that may pass (network, throttling, a server error) is retried
//! with backoff, so nothing is ever skipped: the stream waits (the queue is
//! short) and the slot keeps the WAL on the source meanwhile. A permanent
//! failure (refused credentials, a bad bucket) ends the task, and the
//! archiver with it. After a stop was requested a failing write is given up
//! after a few more attempts.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use walfill_replay::archive::{Archive, ArchiveError};
use walfill_replay::{Lsn, SegmentName};

use super::error::ArchiverError;
use super::segment::SegmentBytes;
use crate::retry::Backoff;

/// Segments waiting to be written, at most. Each costs one segment of memory.
const QUEUE: usize = 2;
/// Pauses before retrying a failed write: 500 ms, doubling up to 30 s.
/// Only what the archive calls transient is retried
/// ([`ArchiveError::is_permanent`], which [`crate::error::Error::directive`]
/// follows too).
const WRITE_RETRY: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
/// Attempts still made for a failing write once a stop was requested.
const ATTEMPTS_AFTER_STOP: u32 = 3;

/// How far the archive is, as the writer last published it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Every WAL byte before this LSN is in the archive.
    pub(crate) durable: Lsn,
    /// Complete segments written since the start.
    pub(crate) segments: u64,
}

/// A segment to write.
struct Job {
    segment: SegmentBytes,
    partial: bool,
}

/// The handle of the writer task.
pub(crate) struct Writer {
    url: String,
    tx: Option<mpsc::Sender<Job>>,
    progress: watch::Receiver<Progress>,
    task: Option<JoinHandle<Result<(), ArchiverError>>>,
    enqueued: Lsn,
}

impl Writer {
    /// Starts the writer. `durable` is how far the archive already is.
    /// `server_end` is read for the lag in log lines.
    pub(crate) fn spawn(
        archive: Archive,
        summaries: Option<Archive>,
        durable: Lsn,
        server_end: Arc<AtomicU64>,
        cancel: CancellationToken,
    ) -> Writer {
        let (tx, rx) = mpsc::channel(QUEUE);
        let progress = Progress {
            durable,
            segments: 0,
        };
        let (progress_tx, progress_rx) = watch::channel(progress);
        let url = archive.url().to_string();
        let task = tokio::spawn(run(
            (archive, summaries),
            rx,
            progress_tx,
            server_end,
            cancel,
        ));
        Writer {
            url,
            tx: Some(tx),
            progress: progress_rx,
            task: Some(task),
            enqueued: durable,
        }
    }

    /// A receiver of the published progress (it changes after every write).
    pub(crate) fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    /// Whether the task has stopped (it only stops early on a failure).
    pub(crate) fn has_stopped(&self) -> bool {
        self.progress.has_changed().is_err()
    }

    /// Queues a segment, waiting for room. `partial` for an unfinished tail.
    pub(crate) async fn send(
        &mut self,
        segment: SegmentBytes,
        partial: bool,
    ) -> Result<(), ArchiverError> {
        let end = segment.end;
        let sent = match &self.tx {
            Some(tx) => tx.send(Job { segment, partial }).await.is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.failure().await);
        }
        self.enqueued = self.enqueued.max(end);
        Ok(())
    }

    /// Queues an unfinished tail if there is room now; `false` if not.
    pub(crate) async fn try_send_partial(
        &mut self,
        segment: SegmentBytes,
    ) -> Result<bool, ArchiverError> {
        let end = segment.end;
        let Some(tx) = &self.tx else {
            return Err(self.failure().await);
        };
        match tx.try_send(Job {
            segment,
            partial: true,
        }) {
            Ok(()) => {
                self.enqueued = self.enqueued.max(end);
                Ok(true)
            }
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(self.failure().await),
        }
    }

    /// Waits until everything queued so far is in the archive.
    pub(crate) async fn drain(&mut self) -> Result<Progress, ArchiverError> {
        let mut rx = self.progress.clone();
        loop {
            let now = *rx.borrow_and_update();
            if now.durable >= self.enqueued {
                return Ok(now);
            }
            if rx.changed().await.is_err() {
                return Err(self.failure().await);
            }
        }
    }

    /// Why the task stopped.
    pub(crate) async fn failure(&mut self) -> ArchiverError {
        self.tx = None;
        let outcome = match self.task.take() {
            Some(task) => task.await,
            None => Ok(Ok(())),
        };
        match outcome {
            Ok(Err(e)) => e,
            Err(source) => ArchiverError::Archive(ArchiveError::Task {
                url: self.url.clone(),
                source,
            }),
            // The task only ends by itself on an error; stopping it is `failure`.
            Ok(Ok(())) => {
                ArchiverError::Protocol(format!("the writer of archive {} has stopped", self.url))
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The writer task: jobs in order until the channel closes or a write fails for good.
async fn run(
    (archive, summaries): (Archive, Option<Archive>),
    mut rx: mpsc::Receiver<Job>,
    progress_tx: watch::Sender<Progress>,
    server_end: Arc<AtomicU64>,
    cancel: CancellationToken,
) -> Result<(), ArchiverError> {
    let mut progress = *progress_tx.borrow();
    // The last complete segment stored, to summarize once the next one is.
    let mut previous: Option<(SegmentName, Bytes)> = None;
    while let Some(Job { segment, partial }) = rx.recv().await {
        let SegmentBytes { name, bytes, end } = segment;
        let bytes = Bytes::from(bytes);
        let started = Instant::now();
        let object = with_retries(&cancel, "store a WAL segment", || {
            archive.put_segment(name, bytes.clone(), true, partial)
        })
        .await?;
        // Named under the archive's URL, as the archive's messages name it.
        let object = archive.relative(&object_store::path::Path::from(object.as_str()));
        let lag = server_end.load(Ordering::Relaxed).saturating_sub(end.0);
        if partial {
            tracing::debug!(object = %object, wal_end = %end, lag_bytes = lag, "tail stored");
        } else {
            // The complete file is there: the tail files of the segment are not needed.
            if let Err(e) = with_retries(&cancel, "delete a .partial file", || {
                archive.delete_partials(name)
            })
            .await
            {
                tracing::warn!(error = %e, segment = %object, "could not delete the segment's .partial files; readers prefer the complete file");
            }
            progress.segments += 1;
            if let Some(store) = &summaries {
                let before = previous
                    .take()
                    .filter(|(n, _)| n.timeline == name.timeline && n.segno.next() == name.segno)
                    .map(|(_, b)| b);
                // A segment without a summary is read whole: nothing to retry.
                if let Err(e) = archive
                    .summarize_before(store, name, bytes.clone(), before)
                    .await
                {
                    tracing::warn!(error = %e, segment = %object, "could not summarize the segment before this one");
                }
                previous = Some((name, bytes.clone()));
            }
            tracing::info!(
                object = %object,
                wal_end = %end,
                lag_bytes = lag,
                ms = started.elapsed().as_millis() as u64,
                "segment archived"
            );
        }
        progress.durable = progress.durable.max(end);
        progress_tx.send_replace(progress);
    }
    Ok(())
}

/// Runs `op` until it succeeds, fails permanently, or (after a stop was
/// requested) fails [`ATTEMPTS_AFTER_STOP`] more times.
async fn with_retries<T, F, Fut>(
    cancel: &CancellationToken,
    what: &'static str,
    mut op: F,
) -> Result<T, ArchiveError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ArchiveError>>,
{
    let mut failures = 0;
    let mut after_stop = 0;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(e) if e.is_permanent() => return Err(e),
            Err(e) => {
                if cancel.is_cancelled() {
                    after_stop += 1;
                    if after_stop > ATTEMPTS_AFTER_STOP {
                        return Err(e);
                    }
                }
                failures += 1;
                let delay = WRITE_RETRY.after(failures);
                tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "failed to {what}; retrying");
                tokio::time::sleep(delay).await;
            }
        }
    }
}
