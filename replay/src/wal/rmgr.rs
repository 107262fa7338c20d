//! Resource manager ids: which subsystem wrote a record.
//!
//! The ids and names are those of `access/rmgrlist.h`, identical in
//! PostgreSQL 15 to 18. Ids from 128 up belong to extensions (custom
//! resource managers).

use std::fmt;

/// A resource manager id (`xl_rmid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RmgrId(pub u8);

/// Names of the built-in resource managers, indexed by id, as `pg_waldump` prints them.
const BUILTIN_NAMES: [&str; 22] = [
    "XLOG",
    "Transaction",
    "Storage",
    "CLOG",
    "Database",
    "Tablespace",
    "MultiXact",
    "RelMap",
    "Standby",
    "Heap2",
    "Heap",
    "Btree",
    "Hash",
    "Gin",
    "Gist",
    "Sequence",
    "SPGist",
    "BRIN",
    "CommitTs",
    "ReplicationOrigin",
    "Generic",
    "LogicalMessage",
];

impl RmgrId {
    /// WAL infrastructure: checkpoints, segment switches, full-page images.
    pub const XLOG: RmgrId = RmgrId(0);
    /// Transaction commit, abort, prepare, subtransaction assignment.
    pub const XACT: RmgrId = RmgrId(1);
    /// Relation file creation and truncation.
    pub const SMGR: RmgrId = RmgrId(2);
    /// Hot-standby support: running transactions, locks.
    pub const STANDBY: RmgrId = RmgrId(8);
    /// Heap operations of the second group (multi-insert, pruning, ...).
    pub const HEAP2: RmgrId = RmgrId(9);
    /// Heap insert, update, delete, truncate.
    pub const HEAP: RmgrId = RmgrId(10);
    /// Logical decoding messages (`pg_logical_emit_message`).
    pub const LOGICAL_MESSAGE: RmgrId = RmgrId(21);
    /// The first id available to custom resource managers.
    pub const MIN_CUSTOM: u8 = 128;

    /// Whether a PostgreSQL 15-18 server can have written this id.
    pub fn is_valid(self) -> bool {
        usize::from(self.0) < BUILTIN_NAMES.len() || self.0 >= Self::MIN_CUSTOM
    }

    /// The built-in name, or `None` for custom and unknown ids.
    pub fn builtin_name(self) -> Option<&'static str> {
        BUILTIN_NAMES.get(usize::from(self.0)).copied()
    }
}

impl fmt::Display for RmgrId {
    /// The name `pg_waldump` prints: the built-in name, `custom###` for
    /// custom ids, `unknown###` otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.builtin_name() {
            Some(name) => f.write_str(name),
            None if self.0 >= Self::MIN_CUSTOM => write!(f, "custom{:03}", self.0),
            None => write!(f, "unknown{:03}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_validity() {
        assert_eq!(RmgrId::HEAP.to_string(), "Heap");
        assert_eq!(RmgrId::LOGICAL_MESSAGE.to_string(), "LogicalMessage");
        assert_eq!(RmgrId(130).to_string(), "custom130");
        assert!(RmgrId(21).is_valid());
        assert!(!RmgrId(22).is_valid());
        assert!(!RmgrId(127).is_valid());
        assert!(RmgrId(128).is_valid());
    }
}
