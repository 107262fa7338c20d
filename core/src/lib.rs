//! walfill's shared vocabulary.
//!
//! Every part of walfill speaks these words, and none of them owns them:
//!
//! - [`Lsn`]: a position in the WAL; [`xid`]: transaction ids and their
//!   circular order.
//! - [`Relation`]: a source table as a history source describes it, named by
//!   its OID, its columns by attribute number.
//! - [`RowChange`] and [`Datum`]: one change to one row, values in
//!   PostgreSQL's text form.
//! - [`Version`]: the `(commit LSN, position)` every stored row carries, and
//!   [`TxnVersions`], the one place that numbers a transaction's changes.
//! - [`sql`]: quoting, and descriptions of PostgreSQL errors (feature
//!   `postgres`).
//!
//! The WAL decoder (`walfill-replay`) and the snapshot and stream reader
//! (`walfill-snapshot`) both depend on this crate and not on each other.

pub mod change;
pub mod lsn;
pub mod name;
pub mod relation;
pub mod sql;
pub mod xid;

pub use change::{Datum, RowChange, Transaction, TxnVersions, Version};
pub use lsn::{Lsn, ParseLsnError};
pub use relation::{Column, Relation};
