//! Archived PostgreSQL WAL to committed row changes.
//!
//! This crate knows nothing of jobs or destinations. It defines the change
//! stream every history source produces ([`change`]) and the WAL positions
//! they are versioned by ([`lsn`]).

pub mod change;
pub mod lsn;

pub use change::{Column, Datum, Relation, RowChange, Transaction, Version};
pub use lsn::{Lsn, ParseLsnError, SegmentName, SegmentNo, TimelineId};
