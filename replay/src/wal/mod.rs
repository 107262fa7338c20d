//! Reading PostgreSQL WAL: segments, pages, records, and what records mean.
//!
//! WAL is a stream of bytes addressed by [`Lsn`](crate::lsn::Lsn), stored in
//! segment files of a fixed size and cut into 8 kB pages, each starting with
//! a page header. Records are written one after the other at 8-byte aligned positions and continue across pages and
//! segments; each carries a CRC-32C and a link to the previous record.
//!
//! Reading happens in three layers, none doing I/O:
//!
//! 1. [`WalDecoder`] takes bytes as they are read, checks page
//!    headers, reassembles records, checks their CRC and back links, and
//!    recognises the end of the WAL. Input can be split anywhere.
//! 2. [`Record`] splits a record into its block references (relation, fork,
//!    block, full-page image, block data), origin, top-level xid and main
//!    data.
//! 3. [`interpret`] reads the main and block data of the records logical
//!    decoding acts on (transactions, heap changes, messages, ...) into a
//!    [`WalEvent`], using the layouts of the PostgreSQL version named by the
//!    page magic ([`PgMajor`]); the version-specific layouts live in one
//!    module per version (`pg15`).
//!
//! ```no_run
//! use walfill_replay::lsn::Lsn;
//! use walfill_replay::wal::{interpret, Poll, WalDecoder, WalEvent};
//!
//! # fn segment_bytes() -> Vec<u8> { Vec::new() }
//! let mut decoder = WalDecoder::new(Lsn(0x0100_0000), 16 << 20);
//! decoder.feed(&segment_bytes());
//! loop {
//!     match decoder.poll()? {
//!         Poll::Record(record) => {
//!             let major = decoder.pg_major().expect("known after the first page");
//!             if let WalEvent::Commit(commit) = interpret(&record, major)? {
//!                 println!("{} committed at {}", commit.xid, record.lsn);
//!             }
//!         }
//!         Poll::NeedMore => break, // feed the next segment
//!         Poll::EndOfWal { lsn, .. } => {
//!             println!("WAL ends at {lsn}");
//!             break;
//!         }
//!     }
//! }
//! # Ok::<(), walfill_replay::wal::DecodeError>(())
//! ```

mod decode;
mod error;
mod event;
mod page;
mod pg15;
mod reader;
mod record;
mod rmgr;
mod stream;

pub use decode::interpret;
pub use error::{DecodeError, DecodeErrorKind};
pub use event::{
    Abort, Checkpoint, Commit, Confirm, Delete, Insert, LogicalMessage, MultiInsert, Prepare,
    RunningXacts, Truncate, TupleFragment, TwoPhase, Update, WalEvent, XactOrigin,
};
pub use page::{
    header_len_at, is_valid_segment_size, LongHeader, PageContext, PageHeader, PageVerdict,
    PgMajor, LONG_HEADER_LEN, SHORT_HEADER_LEN, WAL_PAGE_SIZE, XLP_ALL_FLAGS, XLP_BKP_REMOVABLE,
    XLP_FIRST_IS_CONTRECORD, XLP_FIRST_IS_OVERWRITE_CONTRECORD, XLP_LONG_HEADER,
};
pub use record::{
    record_crc, BlockImage, BlockRef, ForkNumber, ImageCompression, Record, RecordHeader,
    RelFileLocator, BKPBLOCK_HAS_DATA, BKPBLOCK_HAS_IMAGE, BKPBLOCK_SAME_REL, BKPBLOCK_WILL_INIT,
    BKPIMAGE_APPLY, BKPIMAGE_COMPRESS_LZ4, BKPIMAGE_COMPRESS_PGLZ, BKPIMAGE_COMPRESS_ZSTD,
    BKPIMAGE_HAS_HOLE, BLCKSZ, MAX_BLOCK_ID, MAX_RECORD_LEN, RECORD_HEADER_LEN, XLR_INFO_MASK,
};
pub use rmgr::RmgrId;
pub use stream::{EndReason, Poll, WalDecoder};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
