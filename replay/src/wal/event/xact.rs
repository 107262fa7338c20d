//! Transaction events: commit, abort, prepare.

use crate::lsn::Lsn;

use super::super::record::RelFileLocator;

/// The replication origin part of a commit, abort or prepare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XactOrigin {
    /// LSN of the transaction on the origin.
    pub lsn: Lsn,
    /// Commit time on the origin (microseconds since 2000-01-01 UTC).
    pub timestamp: i64,
}

/// The two-phase part of a COMMIT PREPARED / ROLLBACK PREPARED record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwoPhase {
    /// The prepared transaction's xid.
    pub xid: u32,
    /// Its global transaction id, when logged (wal_level=logical), without the NUL.
    pub gid: Option<Vec<u8>>,
}

/// A transaction commit (`XLOG_XACT_COMMIT` or `XLOG_XACT_COMMIT_PREPARED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// The committed top-level xid: `xl_xid`, or the prepared xid for COMMIT PREPARED.
    pub xid: u32,
    /// Committed subtransactions.
    pub subxacts: Vec<u32>,
    /// Present for COMMIT PREPARED.
    pub twophase: Option<TwoPhase>,
    /// The commit time logical decoding reports: the origin's timestamp if
    /// the origin part is present, else `xact_time`.
    pub commit_time: i64,
    /// `xact_time`: when the local commit happened.
    pub xact_time: i64,
    /// Database (and tablespace) of the transaction, when logged.
    pub db: Option<u32>,
    /// Default tablespace of the database, when logged.
    pub tablespace: Option<u32>,
    /// Relation files dropped by the commit.
    pub dropped_rels: Vec<RelFileLocator>,
    /// Number of invalidation messages carried.
    pub invalidations: u32,
    /// The replication origin part.
    pub origin: Option<XactOrigin>,
    /// The `xinfo` flag word (0 when absent).
    pub xinfo: u32,
}

/// A transaction abort (`XLOG_XACT_ABORT` or `XLOG_XACT_ABORT_PREPARED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abort {
    /// The aborted xid: `xl_xid` (a subtransaction's for ROLLBACK TO SAVEPOINT),
    /// or the prepared xid for ROLLBACK PREPARED.
    pub xid: u32,
    /// Aborted subtransactions.
    pub subxacts: Vec<u32>,
    /// Present for ROLLBACK PREPARED.
    pub twophase: Option<TwoPhase>,
    /// When the abort happened.
    pub abort_time: i64,
    /// Database, when logged.
    pub db: Option<u32>,
    /// Relation files dropped by the abort.
    pub dropped_rels: Vec<RelFileLocator>,
    /// The replication origin part.
    pub origin: Option<XactOrigin>,
    /// The `xinfo` flag word (0 when absent).
    pub xinfo: u32,
}

/// PREPARE TRANSACTION (`XLOG_XACT_PREPARE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepare {
    /// The prepared xid.
    pub xid: u32,
    /// Global transaction id, without the NUL.
    pub gid: Vec<u8>,
    /// Its subtransactions.
    pub subxacts: Vec<u32>,
    /// When it was prepared.
    pub prepared_at: i64,
    /// Its database.
    pub db: u32,
    /// The replication origin, if the session had one.
    pub origin: Option<XactOrigin>,
}
