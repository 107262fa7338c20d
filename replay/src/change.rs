//! Committed row changes: what every history source produces.
//!
//! A [`Transaction`] is one committed source transaction with its changes in
//! the order they were made. Every change gets a [`Version`]: the LSN of its
//! transaction's commit record and its 1-based position inside that
//! transaction. Snapshot rows are versioned `(boundary, 0)`, so any change
//! committed at or after the boundary wins over them.

use std::sync::Arc;

use crate::lsn::Lsn;

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

/// A column of a relation as a history source describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
    /// Type modifier (-1 if none).
    pub type_modifier: i32,
    /// The type's name as `format_type` prints it without a modifier, when
    /// the source knows it (the WAL decoder does; pgoutput does not say).
    pub type_name: String,
    /// Whether the column belongs to the replica identity (the key sent with
    /// updates and deletes).
    pub is_key: bool,
}

/// A source relation, as of the change that refers to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relation {
    /// The relation's OID in the source database.
    pub oid: u32,
    /// Schema name.
    pub schema: String,
    /// Relation name.
    pub name: String,
    /// Columns in attribute order (dropped and generated columns left out).
    pub columns: Vec<Column>,
    /// `REPLICA IDENTITY FULL`: updates and deletes carry the whole old row
    /// (otherwise only the key, with every other column null).
    pub full_identity: bool,
}

impl Relation {
    /// Position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
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

    /// Whether this change is about the relation `schema.name` (for a
    /// truncate: whether that relation is among those truncated).
    pub fn touches(&self, schema: &str, name: &str) -> bool {
        match self {
            RowChange::Truncate { relations, .. } => relations
                .iter()
                .any(|r| r.schema == schema && r.name == name),
            RowChange::Message { .. } => false,
            _ => self
                .relation()
                .is_some_and(|r| r.schema == schema && r.name == name),
        }
    }
}

/// A committed source transaction.
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

impl Transaction {
    /// The versions of the changes to `schema.name`, in order: the version of
    /// a change counts only changes to the same relation, so every source of
    /// history (the WAL decoder, which sees every table, and pgoutput, which
    /// sees published ones) numbers the same change alike.
    pub fn versions_for<'a>(
        &'a self,
        schema: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = (Version, &'a RowChange)> + 'a {
        let mut seq = 0u32;
        self.changes
            .iter()
            .filter(move |c| c.touches(schema, name))
            .map(move |c| {
                seq = seq.saturating_add(1);
                (
                    Version {
                        commit_lsn: self.commit_lsn,
                        seq,
                    },
                    c,
                )
            })
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
}
