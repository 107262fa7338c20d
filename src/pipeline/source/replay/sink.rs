//! The decoding thread's end of a replay: each committed transaction's
//! changes to the table versioned and sent, a few hundred at a time, to
//! the fold thread (see [`super::folding`]), with how far decoding has
//! read.

use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use walfill_core::{Lsn, RowChange, TxnVersions, Version};
use walfill_replay::decode::{Sink, SinkError, TxnInfo};

use super::folding::Folding;
use crate::progress::Progress;

/// The progress of decoding is shown every this many bytes of WAL.
const PROGRESS_STEP: u64 = 16 << 20;

/// How often the position decoded so far is recorded while nothing is
/// stored yet.
const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Changes sent to the fold thread at a time.
const CHANGES_PER_MESSAGE: usize = 512;

/// Versions the table's changes and sends them to the fold thread.
pub(super) struct ForwardSink {
    pub(super) out: SyncSender<Folding>,
    pub(super) versions: TxnVersions,
    pub(super) pending: Vec<(Version, RowChange)>,
    pub(super) transactions: u64,
    pub(super) reported_at: Instant,
    pub(super) progress: Progress,
    /// Where the progress was last shown.
    pub(super) position: Lsn,
    /// End of the last transaction read.
    pub(super) read: Lsn,
    /// Recent rate of reading WAL, bytes per second.
    pub(super) rate: f64,
}

impl ForwardSink {
    fn send(&mut self, message: Folding) -> Result<(), SinkError> {
        self.out
            .send(message)
            .map_err(|_| "the fold thread stopped".into())
    }

    /// Sends the changes gathered so far.
    pub(super) fn flush(&mut self) -> Result<(), SinkError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let changes = std::mem::replace(&mut self.pending, Vec::with_capacity(CHANGES_PER_MESSAGE));
        self.send(Folding::Changes(changes))
    }

    /// Sends the changes gathered so far and how far decoding has read.
    pub(super) fn report(&mut self) -> Result<(), SinkError> {
        self.flush()?;
        self.reported_at = Instant::now();
        let (lsn, rate) = (self.read, self.rate);
        self.send(Folding::Read { lsn, rate })
    }
}

impl Sink for ForwardSink {
    fn begin(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.versions.begin(txn.commit_lsn);
        Ok(())
    }

    fn change(&mut self, _: &TxnInfo, change: RowChange) -> Result<(), SinkError> {
        let Some(version) = self.versions.next(&change) else {
            return Ok(());
        };
        if let RowChange::Truncate { .. } = change {
            self.flush()?;
            return self.send(Folding::Truncate(version));
        }
        self.pending.push((version, change));
        if self.pending.len() >= CHANGES_PER_MESSAGE {
            self.flush()?;
        }
        Ok(())
    }

    fn commit(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.read = txn.commit_lsn;
        self.transactions += 1;
        let moved = txn.commit_lsn.checked_sub(self.position).unwrap_or(0);
        if moved >= PROGRESS_STEP {
            self.position = txn.commit_lsn;
            self.rate = self.progress.advance(moved);
        }
        if self.reported_at.elapsed() >= REPORT_INTERVAL {
            self.report()?;
        }
        Ok(())
    }

    fn message(&mut self, _: Lsn, _: &str, _: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
}
