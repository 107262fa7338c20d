//! What a WAL record means for logical decoding, independent of the
//! PostgreSQL version that wrote it.
//!
//! [`interpret`](super::interpret) turns a [`Record`](super::Record) into
//! a [`WalEvent`]. Only the records the server's own logical decoding acts
//! on get a variant; everything else is [`WalEvent::Other`]. Row data stays
//! undecoded here: a [`TupleFragment`] is the tuple as WAL carries it, to be
//! decoded against the relation's schema later.
//!
//! The flag constants are those of `access/heapam_xlog.h`; their values are
//! the same in PostgreSQL 15 to 18.

use crate::lsn::Lsn;

mod heap;
mod xact;

use super::record::{ForkNumber, RelFileLocator};
use super::rmgr::RmgrId;

pub use heap::{Confirm, Delete, Insert, MultiInsert, Truncate, Update};
pub use xact::{Abort, Commit, Prepare, TwoPhase, XactOrigin};

/// A heap tuple as WAL carries it: the header fields kept by
/// `xl_heap_header` and the bytes from the null bitmap to the end of the
/// tuple.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TupleFragment {
    /// `t_infomask2`: number of attributes (low 11 bits) and flags.
    pub infomask2: u16,
    /// `t_infomask`: null bitmap / varwidth / external flags and visibility bits.
    pub infomask: u16,
    /// `t_hoff`: offset of the user data from the start of the on-disk tuple.
    pub hoff: u8,
    /// The tuple from its null bitmap (on-disk offset 23) on; user data starts at `hoff - 23`.
    pub data: Vec<u8>,
}

impl TupleFragment {
    /// Number of attributes stored in the tuple.
    pub fn natts(&self) -> u16 {
        self.infomask2 & 0x07FF
    }
}

/// A snapshot of running transactions (`XLOG_RUNNING_XACTS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningXacts {
    /// Next xid to be assigned.
    pub next_xid: u32,
    /// Oldest running xid.
    pub oldest_running_xid: u32,
    /// Latest completed xid.
    pub latest_completed_xid: u32,
    /// Running top-level xids.
    pub xids: Vec<u32>,
    /// Running subtransaction xids.
    pub subxids: Vec<u32>,
    /// Whether the subxid list is incomplete.
    pub subxid_overflow: bool,
}

/// A logical decoding message (`pg_logical_emit_message`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogicalMessage {
    /// Database it was emitted in.
    pub db: u32,
    /// Whether it belongs to its transaction (else delivered immediately).
    pub transactional: bool,
    /// The prefix, without its NUL.
    pub prefix: Vec<u8>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// A shutdown checkpoint (`XLOG_CHECKPOINT_SHUTDOWN`): no transaction is
/// running there except prepared ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Redo pointer.
    pub redo: Lsn,
    /// Timeline.
    pub timeline: u32,
    /// Next full transaction id (epoch in the high 32 bits).
    pub next_full_xid: u64,
    /// Oldest active xid (0 at shutdown).
    pub oldest_active_xid: u32,
}

/// What a record means for logical decoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalEvent {
    /// A transaction committed.
    Commit(Commit),
    /// A transaction or subtransaction aborted.
    Abort(Abort),
    /// A transaction was prepared for two-phase commit.
    Prepare(Prepare),
    /// Subtransactions were assigned to a top-level transaction (`XLOG_XACT_ASSIGNMENT`).
    Assignment {
        /// The top-level xid.
        top: u32,
        /// Its subtransactions.
        subxacts: Vec<u32>,
    },
    /// Catalog invalidations of a command (`XLOG_XACT_INVALIDATIONS`): its
    /// transaction counts as having changed the catalog.
    Invalidations {
        /// Number of invalidation messages.
        count: u32,
    },
    /// Running transactions snapshot.
    RunningXacts(RunningXacts),
    /// A row was inserted.
    Insert(Insert),
    /// Rows were inserted by COPY.
    MultiInsert(MultiInsert),
    /// A row was deleted.
    Delete(Delete),
    /// A row was updated.
    Update(Update),
    /// Relations were truncated.
    Truncate(Truncate),
    /// A speculative insertion was confirmed.
    Confirm(Confirm),
    /// A logical decoding message.
    LogicalMessage(LogicalMessage),
    /// A relation fork file was created.
    SmgrCreate {
        /// The relation.
        rel: RelFileLocator,
        /// The fork.
        fork: ForkNumber,
    },
    /// `XLOG_SWITCH`: the rest of the segment is unused.
    Switch,
    /// A shutdown checkpoint.
    CheckpointShutdown(Checkpoint),
    /// End of recovery (like a shutdown checkpoint for running transactions).
    EndOfRecovery {
        /// The new timeline.
        timeline: u32,
        /// The previous timeline.
        prev_timeline: u32,
    },
    /// Server parameters changed; carries `wal_level` (0 minimal, 1 replica, 2 logical).
    ParameterChange {
        /// The new `wal_level`.
        wal_level: i32,
    },
    /// Any other record.
    Other {
        /// Its resource manager.
        rmid: RmgrId,
        /// Its `xl_info`.
        info: u8,
    },
}
