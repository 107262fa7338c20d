//! Heap row events. The flag constants are those of
//! `access/heapam_xlog.h`, the same in PostgreSQL 15 to 18.

use super::super::record::RelFileLocator;
use super::TupleFragment;

/// A heap insert (`XLOG_HEAP_INSERT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insert {
    /// Target relation.
    pub rel: RelFileLocator,
    /// Target block.
    pub block: u32,
    /// Offset of the new tuple on the page.
    pub offnum: u16,
    /// `XLH_INSERT_*` flags.
    pub flags: u8,
    /// The page was re-initialised (`XLOG_HEAP_INIT_PAGE`).
    pub init_page: bool,
    /// The new tuple, present when `CONTAINS_NEW_TUPLE` is set.
    pub tuple: Option<TupleFragment>,
}

impl Insert {
    /// Flag: the page's all-visible bit was cleared.
    pub const ALL_VISIBLE_CLEARED: u8 = 1 << 0;
    /// Flag: last record of one multi-insert call.
    pub const LAST_IN_MULTI: u8 = 1 << 1;
    /// Flag: speculative insertion (INSERT ... ON CONFLICT).
    pub const IS_SPECULATIVE: u8 = 1 << 2;
    /// Flag: the tuple is included for logical decoding.
    pub const CONTAINS_NEW_TUPLE: u8 = 1 << 3;
    /// Flag: the target is a TOAST table.
    pub const ON_TOAST_RELATION: u8 = 1 << 4;
    /// Flag: COPY FREEZE set the page all-frozen.
    pub const ALL_FROZEN_SET: u8 = 1 << 5;

    /// Whether this is a speculative insertion awaiting confirmation.
    pub fn is_speculative(&self) -> bool {
        self.flags & Self::IS_SPECULATIVE != 0
    }

    /// Whether the target is a TOAST table (the tuple is a TOAST chunk).
    pub fn on_toast_relation(&self) -> bool {
        self.flags & Self::ON_TOAST_RELATION != 0
    }
}

/// Several heap inserts into one page (`XLOG_HEAP2_MULTI_INSERT`, COPY).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiInsert {
    /// Target relation.
    pub rel: RelFileLocator,
    /// Target block.
    pub block: u32,
    /// `XLH_INSERT_*` flags (see [`Insert`]).
    pub flags: u8,
    /// The page was re-initialised; offsets are then implicitly 1..=n.
    pub init_page: bool,
    /// Offsets of the tuples on the page.
    pub offsets: Vec<u16>,
    /// The tuples, in offset order; empty without `CONTAINS_NEW_TUPLE`.
    pub tuples: Vec<TupleFragment>,
}

impl MultiInsert {
    /// Whether this is the last record of one multi-insert call.
    pub fn is_last_in_multi(&self) -> bool {
        self.flags & Insert::LAST_IN_MULTI != 0
    }
}

/// A heap delete (`XLOG_HEAP_DELETE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// Relation.
    pub rel: RelFileLocator,
    /// Block of the deleted tuple.
    pub block: u32,
    /// Offset of the deleted tuple.
    pub offnum: u16,
    /// The deleting xid.
    pub xmax: u32,
    /// `XLH_DELETE_*` flags.
    pub flags: u8,
    /// The old row (replica identity key or whole row), if logged.
    pub old: Option<TupleFragment>,
}

impl Delete {
    /// Flag: the page's all-visible bit was cleared.
    pub const ALL_VISIBLE_CLEARED: u8 = 1 << 0;
    /// Flag: the whole old row follows (REPLICA IDENTITY FULL).
    pub const CONTAINS_OLD_TUPLE: u8 = 1 << 1;
    /// Flag: the old replica identity key follows.
    pub const CONTAINS_OLD_KEY: u8 = 1 << 2;
    /// Flag: removal of a speculatively inserted tuple that lost a conflict.
    pub const IS_SUPER: u8 = 1 << 3;
    /// Flag: half of an UPDATE that moved the row to another partition.
    pub const IS_PARTITION_MOVE: u8 = 1 << 4;

    /// Whether this undoes a speculative insertion.
    pub fn is_super(&self) -> bool {
        self.flags & Self::IS_SUPER != 0
    }

    /// Whether this is the delete half of a cross-partition UPDATE.
    pub fn is_partition_move(&self) -> bool {
        self.flags & Self::IS_PARTITION_MOVE != 0
    }
}

/// A heap update (`XLOG_HEAP_UPDATE` or `XLOG_HEAP_HOT_UPDATE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// Relation.
    pub rel: RelFileLocator,
    /// Whether it was a HOT update.
    pub hot: bool,
    /// Block of the old tuple.
    pub old_block: u32,
    /// Offset of the old tuple.
    pub old_offnum: u16,
    /// Block of the new tuple.
    pub new_block: u32,
    /// Offset of the new tuple.
    pub new_offnum: u16,
    /// The updating xid (`old_xmax`).
    pub old_xmax: u32,
    /// `XLH_UPDATE_*` flags.
    pub flags: u8,
    /// The old row (replica identity key or whole row), if logged.
    pub old: Option<TupleFragment>,
    /// The new row, present when `CONTAINS_NEW_TUPLE` is set.
    pub new: Option<TupleFragment>,
}

impl Update {
    /// Flag: the whole old row is logged (REPLICA IDENTITY FULL).
    pub const CONTAINS_OLD_TUPLE: u8 = 1 << 2;
    /// Flag: the old replica identity key is logged.
    pub const CONTAINS_OLD_KEY: u8 = 1 << 3;
    /// Flag: the new row is logged for logical decoding.
    pub const CONTAINS_NEW_TUPLE: u8 = 1 << 4;
    /// Flag: the new row omits a prefix shared with the old row.
    pub const PREFIX_FROM_OLD: u8 = 1 << 5;
    /// Flag: the new row omits a suffix shared with the old row.
    pub const SUFFIX_FROM_OLD: u8 = 1 << 6;
}

/// TRUNCATE of one or more relations (`XLOG_HEAP_TRUNCATE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncate {
    /// Database.
    pub db: u32,
    /// OIDs (not relfilenodes) of the truncated relations.
    pub relids: Vec<u32>,
    /// TRUNCATE ... CASCADE.
    pub cascade: bool,
    /// TRUNCATE ... RESTART IDENTITY.
    pub restart_seqs: bool,
}

/// Confirmation of a speculative insertion (`XLOG_HEAP_CONFIRM`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirm {
    /// Relation.
    pub rel: RelFileLocator,
    /// Block.
    pub block: u32,
    /// Offset of the confirmed tuple.
    pub offnum: u16,
}
