//! Archived PostgreSQL WAL to committed row changes.
//!
//! This crate knows nothing of jobs or destinations. It defines the change
//! stream every history source produces ([`change`]) and the WAL positions
//! they are versioned by ([`lsn`]), and decodes WAL itself:
//!
//! - [`wal`]: segment pages and records (framing, CRC, block references) and
//!   the resource-manager records logical decoding needs;
//! - [`tuple`]: heap tuples, varlena values, inline compression and TOAST;
//! - [`types`]: stored datums to PostgreSQL's text output;
//! - [`decode`]: records to committed transactions (reorder buffer, TOAST,
//!   spilling), as PostgreSQL's logical decoding assembles them;
//! - `archive` (the `archive` feature): WAL segments in object storage, fed
//!   to the decoder (the only async part).

#[cfg(feature = "archive")]
pub mod archive;
pub mod change;
pub mod decode;
pub mod lsn;
pub mod summary;
pub mod tuple;
pub mod types;
pub mod wal;

pub use change::{Column, Datum, Relation, RowChange, Transaction, TxnVersions, Version};
pub use lsn::{Lsn, ParseLsnError, SegmentName, SegmentNo, TimelineId};
