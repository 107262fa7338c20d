//! Errors of snapshot and stream work against the source database.

use tokio_postgres::error::SqlState;

use crate::sql::describe_pg_error;

/// What a failed replication command says of its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotProblem {
    /// There is no slot of that name (SQLSTATE 42704).
    Missing,
    /// Another process streams from it (SQLSTATE 55006).
    InUse,
}

impl SlotProblem {
    /// The problem a replication error reports, if it is one of these.
    /// The replication client gives the server's SQLSTATE only inside its
    /// message: this is the one place that reads it there.
    pub fn of(e: &pg_walstream::ReplicationError) -> Option<SlotProblem> {
        let text = e.to_string();
        if text.contains(SqlState::UNDEFINED_OBJECT.code()) {
            Some(SlotProblem::Missing)
        } else if text.contains(SqlState::OBJECT_IN_USE.code()) {
            Some(SlotProblem::InUse)
        } else {
            None
        }
    }
}

/// Something went wrong reading the source.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A query on an ordinary connection failed.
    #[error("{context}: {}", describe_pg_error(.source))]
    Query {
        /// What walfill was doing.
        context: String,
        /// The client error.
        source: tokio_postgres::Error,
    },
    /// The replication connection failed.
    #[error("{context}: {source}")]
    Replication {
        /// What walfill was doing.
        context: String,
        /// The replication error.
        source: pg_walstream::ReplicationError,
    },
    /// The source table cannot be backfilled as it is.
    #[error("source table {table} {problem}; fix: {fix}")]
    Unusable {
        /// `schema.table`.
        table: String,
        /// What is wrong.
        problem: String,
        /// What the operator can do.
        fix: String,
    },
    /// The replication stream sent something walfill cannot follow.
    #[error("replication stream: {0}")]
    Protocol(String),
    /// The source connection was lost while a chunk's rows were on their
    /// way; the reader reads the chunk again, and its consumer drops what
    /// it received of it.
    #[error("the source connection was lost while a chunk was read ({0}); it is read again")]
    Cut(String),
}

impl SnapshotError {
    /// A failed query, with what walfill was doing.
    pub fn query(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        SnapshotError::Query {
            context: context.into(),
            source,
        }
    }

    /// What the failed replication command said of its slot.
    pub fn slot_problem(&self) -> Option<SlotProblem> {
        match self {
            SnapshotError::Replication { source, .. } => SlotProblem::of(source),
            _ => None,
        }
    }

    /// A failed replication command, with what walfill was doing.
    pub fn replication(context: impl Into<String>, source: pg_walstream::ReplicationError) -> Self {
        SnapshotError::Replication {
            context: context.into(),
            source,
        }
    }

    /// Whether retrying later may succeed (a network blip, a busy slot).
    pub fn is_transient(&self) -> bool {
        match self {
            SnapshotError::Query { source, .. } => {
                source.is_closed() || source.as_db_error().is_none()
            }
            SnapshotError::Replication { source, .. } => source.is_transient(),
            SnapshotError::Cut(_) => true,
            SnapshotError::Unusable { .. } | SnapshotError::Protocol(_) => false,
        }
    }
}
