//! Errors of decoding WAL into transactions.

use crate::lsn::Lsn;
use crate::tuple::TupleError;
use crate::types::TypeError;
use crate::wal::DecodeError;

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
    Unsupported(super::row::UnsupportedColumn),
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
    /// The consumer of decoded changes failed.
    #[error("{0}")]
    Sink(SinkError),
}
