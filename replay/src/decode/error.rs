//! Errors of decoding WAL into transactions.

use crate::lsn::Lsn;
use crate::tuple::TupleError;
use crate::types::TypeError;
use crate::wal::DecodeError;

/// A column whose type the decoder cannot print.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnsupportedColumn {
    /// `schema.table`.
    pub relation: String,
    /// Column name.
    pub column: String,
    /// Type name (`format_type`).
    pub type_name: String,
}

/// An error a sink returns to stop decoding.
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// Why decoding stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The WAL itself could not be read or parsed.
    #[error(transparent)]
    Wal(#[from] DecodeError),
    /// A tuple of a known relation could not be taken apart.
    #[error("row of {relation} at {lsn}: {source}")]
    Tuple {
        /// `schema.table`.
        relation: String,
        /// The record's LSN.
        lsn: Lsn,
        /// What went wrong.
        source: TupleError,
    },
    /// A stored value could not be turned into text.
    #[error("column {relation}.{column} ({type_name}) at {lsn}: {source}")]
    Value {
        /// `schema.table`.
        relation: String,
        /// Column name.
        column: String,
        /// The column's type.
        type_name: String,
        /// The record's LSN.
        lsn: Lsn,
        /// What went wrong.
        source: TypeError,
    },
    /// A column's type cannot be decoded (in strict mode).
    #[error("column {}.{} has type {}, which walfill cannot decode from WAL", .0.relation, .0.column, .0.type_name)]
    Unsupported(UnsupportedColumn),
    /// The transaction bookkeeping met something it cannot follow.
    #[error("at {lsn}: {message}")]
    Transactions {
        /// The record's LSN.
        lsn: Lsn,
        /// What is inconsistent.
        message: String,
    },
    /// A spill file could not be written or read back.
    #[error("spill file {path}: {source}")]
    Spill {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Archived WAL could not be read (a missing or corrupt segment, storage).
    #[cfg(feature = "archive")]
    #[error(transparent)]
    Archive(#[from] crate::archive::ArchiveError),
    /// The WAL is not the source's: another cluster's, or an abandoned
    /// timeline's.
    #[error("{reason} (segment {file})")]
    Foreign {
        /// The segment file.
        file: String,
        /// Whose it is.
        reason: String,
    },
    /// The WAL in a segment file is damaged.
    #[error("WAL at {lsn} in segment {file}: {reason}")]
    Damaged {
        /// Where.
        lsn: Lsn,
        /// The segment file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The consumer of decoded changes failed.
    #[error("{0}")]
    Sink(SinkError),
}

impl ReplayError {
    /// The same error, naming the segment file it happened in.
    pub fn in_file(self, file: &str) -> ReplayError {
        match self {
            ReplayError::Wal(e) => ReplayError::Wal(e.with_segment(file.to_string())),
            ReplayError::Tuple {
                relation,
                lsn,
                source,
            } => ReplayError::Tuple {
                relation: format!("{relation} (segment {file})"),
                lsn,
                source,
            },
            other => other,
        }
    }

    /// Whether the error means the archive cannot serve this range (a
    /// missing, corrupt or damaged segment, or WAL that cannot be decoded),
    /// as opposed to the consumer failing or the archive being unreachable
    /// for now.
    pub fn is_history_gap(&self) -> bool {
        match self {
            ReplayError::Sink(_) => false,
            #[cfg(feature = "archive")]
            ReplayError::Archive(e) => e.is_permanent(),
            _ => true,
        }
    }
}
