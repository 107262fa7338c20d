//! Segment summaries: what a replay needs from an archived WAL segment that
//! holds none of its table's changes, in a few kilobytes.
//!
//! A summary lists, in WAL order, the records that start in one segment:
//! - whole, the records every decoding follows whatever table it wants:
//!   transaction ends and assignments, running-transactions snapshots,
//!   checkpoints and other XLOG records (not page images), file creations,
//!   TRUNCATEs and logical messages (the catalog journal's among them);
//! - as a *touch* (transaction, relation file, what the record did), every
//!   heap record that writes or locks a row: enough to tell whether the
//!   segment changes a table of interest, and to keep the decoder's
//!   bookkeeping of other tables' changes;
//! - the top-level transaction of every subtransaction's first record.
//!
//! [`Decoder::summary_verdict`](crate::decode::Decoder::summary_verdict)
//! decides from it whether a replay can take the summary for the segment;
//! `archive::decode_planned` then feeds the
//! whole records and touches to the decoder in place of the segment.
//!
//! A summary is tied to the archived object it was made from (its name and
//! stored size) and, when the segment's last record continues into the next
//! segment, to that next object too; a CRC-32C over those names and the
//! content catches any change. A summary that does not match is not used:
//! the segment is read whole.

mod build;
mod codec;

pub use build::{summarize, SummaryBuilder};
pub use codec::SummaryError;

use crate::lsn::Lsn;
use crate::wal::RelFileLocator;

/// Where summaries live under a store's prefix: `summary/<segment file>`.
pub const SUMMARY_DIR: &str = "summary";

/// What a touch's record did (bits).
pub mod touch {
    /// The decoder looks the file's relation up (an insert with its row,
    /// a multi-insert, an update, a delete): a change of a wanted table.
    pub const LOOKUP: u8 = 1;
    /// The record carries row data for logical decoding.
    pub const DATA: u8 = 2;
    /// An insert into a TOAST table (a chunk of a value).
    pub const TOAST: u8 = 4;
    /// A speculative insertion was confirmed.
    pub const CONFIRM: u8 = 8;
    /// A speculative insertion was taken back (super-delete).
    pub const SUPER: u8 = 16;
    /// Any other heap record of a transaction that gives it a snapshot
    /// (an in-place catalog update).
    pub const SNAPSHOT: u8 = 32;
}

/// One entry of a summary, in WAL order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SummaryEvent {
    /// A record kept whole.
    Kept {
        /// Where it starts.
        lsn: Lsn,
        /// Where the next record starts.
        end: Lsn,
        /// The database it concerns (0: none, or shared).
        db: u32,
        /// Its resource manager.
        rmid: u8,
        /// The whole record, header included.
        bytes: Vec<u8>,
    },
    /// A heap record (the first of its kind since the last kept record).
    Touch {
        /// Where it starts.
        lsn: Lsn,
        /// `xl_xid`.
        xid: u32,
        /// The relation file.
        file: RelFileLocator,
        /// What it did ([`touch`] bits).
        kind: u8,
    },
    /// A subtransaction's first record named its top-level transaction.
    Link {
        /// Where the record starts.
        lsn: Lsn,
        /// The subtransaction.
        sub: u32,
        /// Its top-level transaction.
        top: u32,
    },
}

impl SummaryEvent {
    /// Where the record it stands for starts.
    pub fn lsn(&self) -> Lsn {
        match self {
            SummaryEvent::Kept { lsn, .. }
            | SummaryEvent::Touch { lsn, .. }
            | SummaryEvent::Link { lsn, .. } => *lsn,
        }
    }
}

/// An archived object, as the archive lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectId {
    /// Its name relative to the archive (as listed).
    pub name: String,
    /// Its stored size in bytes.
    pub size: u64,
}

/// The summary of one archived segment. See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    /// The segment's object it was made from.
    pub object: ObjectId,
    /// The next segment's object, when the last record starting in this
    /// segment continues into it.
    pub next: Option<ObjectId>,
    /// The cluster's system identifier, from the segment's first page.
    pub system_id: u64,
    /// The timeline of the segment's first page.
    pub timeline: u32,
    /// Its pages' `XLOG_PAGE_MAGIC`.
    pub magic: u16,
    /// The segment's first byte.
    pub start: Lsn,
    /// Where the record after the last one starting in the segment starts.
    pub last_end: Lsn,
    /// The records starting in the segment, summarized.
    pub events: Vec<SummaryEvent>,
}

impl SegmentSummary {
    /// Whether this summary is of the archived object `object`, and (when
    /// its last record continues) was completed from `next`.
    pub fn matches(&self, object: &ObjectId, next: Option<&ObjectId>) -> bool {
        self.object == *object && self.next.as_ref().is_none_or(|n| Some(n) == next)
    }
}

#[cfg(test)]
mod tests;
