//! Row changes and the versions that order them.
//!
//! Every history source — a snapshot copy, a base snapshot, WAL replay, the
//! live stream — produces row changes of committed transactions. Every
//! change gets a [`Version`]: the LSN of its transaction's commit record and
//! its 1-based position among that transaction's changes to the same
//! relation, assigned in one place, [`TxnVersions`]. Snapshot rows are
//! versioned `(boundary, 0)`, so any change committed at or after the
//! boundary wins over them.

use std::sync::Arc;

use crate::lsn::Lsn;
use crate::relation::Relation;

/// The version of a row: `(commit LSN, position in the transaction)`.
///
/// Ordered lexicographically; the apply lets a row change win only over an
/// older version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// LSN of the commit record of the change's transaction.
    pub commit_lsn: Lsn,
    /// Position of the change inside its transaction, from 1; 0 for snapshot rows.
    pub seq: u32,
}

impl Version {
    /// The version of rows read by a snapshot consistent at `boundary`.
    pub fn snapshot(boundary: Lsn) -> Version {
        Version {
            commit_lsn: boundary,
            seq: 0,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.commit_lsn, self.seq)
    }
}

/// One column value in PostgreSQL's text output form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datum {
    /// SQL NULL.
    Null,
    /// The value as the type's output function prints it.
    Text(String),
    /// A TOASTed value the change did not modify and did not log: its value is
    /// whatever the row held before this change.
    Unchanged,
}

impl Datum {
    /// The text of a non-null, known value.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Datum::Text(t) => Some(t),
            _ => None,
        }
    }
}

/// A row change: the values follow the relation's columns, one datum each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowChange {
    /// A new row.
    Insert {
        /// The relation.
        relation: Arc<Relation>,
        /// The new row.
        new: Vec<Datum>,
    },
    /// A changed row. `old` holds the old key (only key columns non-null) when
    /// the key changed, or the whole old row under `REPLICA IDENTITY FULL`.
    Update {
        /// The relation.
        relation: Arc<Relation>,
        /// The old key or old row, when the source sent one.
        old: Option<Vec<Datum>>,
        /// The new row; unmodified TOASTed columns are [`Datum::Unchanged`].
        new: Vec<Datum>,
    },
    /// A removed row, identified by its old key (or whole old row).
    Delete {
        /// The relation.
        relation: Arc<Relation>,
        /// The old key or old row.
        old: Vec<Datum>,
    },
    /// Every row of these relations removed.
    Truncate {
        /// The truncated relations.
        relations: Vec<Arc<Relation>>,
        /// `TRUNCATE ... CASCADE`.
        cascade: bool,
        /// `TRUNCATE ... RESTART IDENTITY`.
        restart_seqs: bool,
    },
    /// A transactional logical message (`pg_logical_emit_message(true, ...)`),
    /// part of its transaction's change stream.
    Message {
        /// The message's prefix.
        prefix: String,
        /// Its content.
        content: Vec<u8>,
    },
}

impl RowChange {
    /// The relation a row change is about (`None` for truncates and messages).
    pub fn relation(&self) -> Option<&Arc<Relation>> {
        match self {
            RowChange::Insert { relation, .. }
            | RowChange::Update { relation, .. }
            | RowChange::Delete { relation, .. } => Some(relation),
            RowChange::Truncate { .. } | RowChange::Message { .. } => None,
        }
    }

    /// Whether this change is about relation `oid` (for a truncate: whether
    /// that relation is among those truncated).
    pub fn touches(&self, oid: u32) -> bool {
        match self {
            RowChange::Truncate { relations, .. } => relations.iter().any(|r| r.oid == oid),
            RowChange::Message { .. } => false,
            _ => self.relation().is_some_and(|r| r.oid == oid),
        }
    }
}

/// A committed source transaction, whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    /// Top-level transaction id.
    pub xid: u32,
    /// LSN of the commit record: the version of every change inside.
    pub commit_lsn: Lsn,
    /// LSN just past the commit record: where a consumer resumes after it.
    pub end_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 00:00:00 UTC.
    pub commit_time: i64,
    /// The changes, in the order they were made.
    pub changes: Vec<RowChange>,
}

/// Numbers the changes of one relation inside each transaction: the one
/// place versions are assigned.
///
/// The position counts only changes to the relation (its inserts, updates,
/// deletes and the truncates that include it), so every history source —
/// the WAL decoder, which sees every table, and pgoutput, which sees
/// published ones — gives the same change the same version.
#[derive(Clone, Debug)]
pub struct TxnVersions {
    relid: u32,
    commit_lsn: Lsn,
    seq: u32,
}

impl TxnVersions {
    /// Versions of relation `relid`'s changes.
    pub fn new(relid: u32) -> TxnVersions {
        TxnVersions {
            relid,
            commit_lsn: Lsn::INVALID,
            seq: 0,
        }
    }

    /// A transaction committing at `commit_lsn` starts.
    pub fn begin(&mut self, commit_lsn: Lsn) {
        self.commit_lsn = commit_lsn;
        self.seq = 0;
    }

    /// The version of the transaction's next change, if it is one of the
    /// relation's.
    pub fn next(&mut self, change: &RowChange) -> Option<Version> {
        if !change.touches(self.relid) {
            return None;
        }
        self.seq = self.seq.saturating_add(1);
        Some(Version {
            commit_lsn: self.commit_lsn,
            seq: self.seq,
        })
    }

    /// The versions of a whole transaction's changes to the relation, in order.
    pub fn of_transaction(relid: u32, txn: &Transaction) -> Vec<(Version, &RowChange)> {
        let mut versions = TxnVersions::new(relid);
        versions.begin(txn.commit_lsn);
        txn.changes
            .iter()
            .filter_map(|c| versions.next(c).map(|v| (v, c)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_commits_and_later_changes_win() {
        let b = Version::snapshot(Lsn(100));
        let same_commit = Version {
            commit_lsn: Lsn(100),
            seq: 1,
        };
        let later = Version {
            commit_lsn: Lsn(101),
            seq: 1,
        };
        assert!(b < same_commit && same_commit < later);
        let earlier = Version {
            commit_lsn: Lsn(99),
            seq: 7,
        };
        assert!(earlier < b);
    }

    fn rel(oid: u32) -> Arc<Relation> {
        Arc::new(Relation {
            oid,
            schema: "s".into(),
            name: format!("t{oid}"),
            columns: Vec::new(),
            full_identity: false,
        })
    }

    #[test]
    fn only_the_relations_changes_are_numbered() {
        let (mine, other) = (rel(1), rel(2));
        let insert = |r: &Arc<Relation>| RowChange::Insert {
            relation: r.clone(),
            new: Vec::new(),
        };
        let mut versions = TxnVersions::new(1);
        versions.begin(Lsn(50));
        assert_eq!(versions.next(&insert(&other)), None);
        assert_eq!(versions.next(&insert(&mine)).map(|v| v.seq), Some(1));
        let message = RowChange::Message {
            prefix: "p".into(),
            content: Vec::new(),
        };
        assert_eq!(versions.next(&message), None);
        let truncate = RowChange::Truncate {
            relations: vec![other.clone(), mine.clone()],
            cascade: false,
            restart_seqs: false,
        };
        assert_eq!(
            versions.next(&truncate),
            Some(Version {
                commit_lsn: Lsn(50),
                seq: 2
            })
        );
        versions.begin(Lsn(60));
        assert_eq!(versions.next(&insert(&mine)).map(|v| v.seq), Some(1));
    }
}
