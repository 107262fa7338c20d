//! The service's errors, and the one place that decides what each means for
//! the operator: the exit code and whether running again may help.

use walfill_snapshot::sql::describe_pg_error;
use walfill_snapshot::SnapshotError;

use crate::config::ConfigError;

/// Anything that stops a command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Reading the source failed.
    #[error(transparent)]
    Source(#[from] SnapshotError),
    /// A database could not be reached or refused the credentials.
    #[error("cannot connect to the {role} database at {url}: {message}")]
    Connect {
        /// `source` or `destination`.
        role: &'static str,
        /// The URL, password hidden.
        url: String,
        /// What the server or network said, and the fix.
        message: String,
    },
    /// A statement on the destination failed.
    #[error("{context}: {}", describe_pg_error(.source))]
    Destination {
        /// What walfill was doing.
        context: String,
        /// The client error.
        source: tokio_postgres::Error,
    },
    /// Archived WAL could not be read.
    #[error(transparent)]
    Archive(#[from] walfill_replay::archive::ArchiveError),
    /// WAL could not be decoded: names the LSN and segment file.
    #[error("{0}")]
    Decode(String),
    /// The archived history cannot serve a replay (a missing or damaged
    /// segment, a table the journal lost track of): a snapshot can.
    #[error("{0}")]
    History(String),
    /// Checks found problems; each names its fix.
    #[error("{}", format_problems(.0))]
    Problems(Vec<String>),
    /// The request does not fit the current state (e.g. nothing to roll back to).
    #[error("{0}")]
    State(String),
    /// Another walfill process holds the work.
    #[error("{0}")]
    Busy(String),
    /// The operator stopped the command.
    #[error("interrupted")]
    Interrupted,
}

fn format_problems(problems: &[String]) -> String {
    let mut text = format!(
        "{} problem{} found:",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in problems {
        text.push_str("\n  - ");
        text.push_str(p);
    }
    text
}

impl Error {
    /// A failed destination statement, with what walfill was doing.
    pub fn destination(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        Error::Destination {
            context: context.into(),
            source,
        }
    }

    /// The process exit code for this error.
    ///
    /// - 2: the configuration or the request is wrong (fix it, then rerun);
    /// - 3: checks found problems in the source or destination;
    /// - 4: another process holds the work;
    /// - 130: interrupted;
    /// - 1: anything else (often transient: rerunning resumes where it stopped).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::State(_) => 2,
            Error::Problems(_) => 3,
            Error::Source(SnapshotError::Unusable { .. }) => 3,
            Error::Busy(_) => 4,
            Error::Interrupted => 130,
            _ => 1,
        }
    }
}

/// The service's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
