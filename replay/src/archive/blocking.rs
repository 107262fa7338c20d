//! Handing segments to a synchronous decoder.
//!
//! WAL decoding is plain synchronous code and runs on its own thread (or in
//! `spawn_blocking`). [`Archive::read_blocking`] runs the read on the
//! runtime and passes segments over a bounded channel, which the decoding
//! thread drains in order with [`SegmentReceiver::recv`]; the bound is the
//! backpressure.

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::lsn::Lsn;

use super::error::ArchiveError;
use super::read::{ReadOptions, SegmentData};
use super::Archive;

/// The receiving end of [`Archive::read_blocking`]: segments in order, then
/// `None`. After an error nothing more comes. Dropping it stops the read.
#[derive(Debug)]
pub struct SegmentReceiver {
    rx: mpsc::Receiver<Result<SegmentData, ArchiveError>>,
    task: JoinHandle<()>,
}

impl SegmentReceiver {
    /// The next segment, waiting for it; `None` once the range is read.
    ///
    /// Blocks the calling thread: call it from a plain thread or from
    /// `spawn_blocking`, never from async code (it panics there, as
    /// Tokio's `blocking_recv` does).
    pub fn recv(&mut self) -> Option<Result<SegmentData, ArchiveError>> {
        self.rx.blocking_recv()
    }

    /// The next segment, for async code.
    pub async fn recv_async(&mut self) -> Option<Result<SegmentData, ArchiveError>> {
        self.rx.recv().await
    }
}

impl Iterator for SegmentReceiver {
    type Item = Result<SegmentData, ArchiveError>;

    /// Same as [`SegmentReceiver::recv`].
    fn next(&mut self) -> Option<Self::Item> {
        self.recv()
    }
}

impl Drop for SegmentReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Archive {
    /// Like [`read`](Archive::read), for a consumer on a synchronous thread:
    /// spawns the read on `runtime` and returns the receiving end of a
    /// bounded channel. Can be called from any thread.
    ///
    /// Memory: the channel holds one segment, so the read fetches ahead by
    /// `read_ahead - 1` (at least 1); at most `max(read_ahead, 2) + 1`
    /// segments exist at once, the one the consumer holds included.
    pub fn read_blocking(
        &self,
        runtime: &tokio::runtime::Handle,
        from: Lsn,
        to: Option<Lsn>,
        options: ReadOptions,
    ) -> SegmentReceiver {
        let (tx, rx) = mpsc::channel(1);
        let ahead = options.read_ahead.max(2) - 1;
        let segments = self.read(from, to, options.with_read_ahead(ahead));
        let task = runtime.spawn(async move {
            let mut segments = std::pin::pin!(segments);
            // Take the next segment only once there is room for it.
            while let Ok(permit) = tx.reserve().await {
                match segments.next().await {
                    Some(item) => permit.send(item),
                    None => break,
                }
            }
        });
        SegmentReceiver { rx, task }
    }
}
