//! The service's errors, and the one place that decides what each means:
//! the exit code, and whether trying again may help ([`Error::directive`]).

use walfill_core::sql::{describe_pg_error, error_chain, sql_class, SqlClass};
use walfill_snapshot::SnapshotError;

use walfill_replay::archive::ArchiveError;
use walfill_replay::decode::ReplayError;

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
    Archive(#[from] ArchiveError),
    /// WAL could not be decoded: names the LSN and segment file.
    #[error(transparent)]
    Decode(Box<ReplayError>),
    /// The archived history cannot serve a replay (a missing or damaged
    /// segment or base snapshot, a table the journal lost track of): a
    /// snapshot can.
    #[error(transparent)]
    History(#[from] Gap),
    /// Checks found problems; each names its fix.
    #[error("{}", format_problems(.0))]
    Problems(Vec<String>),
    /// The request does not fit the current state (nothing to roll back to,
    /// a retired version...); the message says what would.
    #[error("{0}")]
    Request(String),
    /// The source table changed under a version in a way the version cannot
    /// follow (a column it reads dropped or retyped, the table dropped).
    #[error("{0}")]
    SchemaChanged(String),
    /// The source's enum types have labels the destination's lack, so
    /// changes carrying them cannot be stored (see `crate::pipeline::enum_labels`).
    #[error("{}", format_enum_labels(.target, .labels))]
    EnumLabels {
        /// The target whose version met them.
        target: String,
        /// The missing labels, in the order to add them.
        labels: Vec<EnumLabel>,
    },
    /// A version lost changes for good (its slot is gone): it must be
    /// rebuilt before it can be published.
    #[error("{0}")]
    Lost(String),
    /// Another walfill process holds the work.
    #[error("{0}")]
    Busy(String),
    /// Another walfill process took the version over; this one's writes
    /// would be stale.
    #[error("{0}")]
    Fenced(String),
    /// The operator stopped the command.
    #[error("interrupted")]
    Interrupted,
    /// Something walfill did not expect of itself (a task that died).
    #[error("{0}")]
    Internal(String),
    /// Writing the command's output failed (its reader went away, say).
    #[error("writing the output: {0}")]
    Output(#[source] std::io::Error),
}

/// Why the archived history cannot serve a replay.
#[derive(Debug, thiserror::Error)]
pub enum Gap {
    /// The decoder met a gap in the archived WAL (a segment missing or of
    /// another timeline, a table the journal lost track of).
    #[error(transparent)]
    Wal(Box<ReplayError>),
    /// The archive could not give what a replay needs.
    #[error(transparent)]
    Archive(ArchiveError),
    /// What walfill found missing, in words.
    #[error("{0}")]
    Missing(String),
}

impl From<ReplayError> for Error {
    fn from(e: ReplayError) -> Error {
        Error::Decode(Box::new(e))
    }
}

impl Error {
    /// The archived history cannot serve a replay: `reason` says what is
    /// missing.
    pub fn history(reason: impl Into<String>) -> Error {
        Error::History(Gap::Missing(reason.into()))
    }
}

/// A label of a source enum type that the destination's type lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumLabel {
    /// The type, `schema.name`, quoted where needed.
    pub type_name: String,
    /// The label.
    pub label: String,
    /// The statement that adds it at the source's position.
    pub ddl: String,
}

fn format_enum_labels(target: &str, labels: &[EnumLabel]) -> String {
    let mut named: Vec<String> = Vec::new();
    for l in labels {
        let text = format!(
            "{} of {}",
            walfill_core::sql::quote_literal(&l.label),
            l.type_name
        );
        if !named.contains(&text) {
            named.push(text);
        }
    }
    let mut text = format!(
        "the source's enum types have labels the destination's lack ({}), so changes that carry \
         them cannot be stored. Add them in the destination, each in its own transaction:",
        named.join(", ")
    );
    for l in labels {
        text.push_str(&format!("\n    {}", l.ddl));
    }
    text.push_str(&format!(
        "\n  walfill goes on by itself once the destination accepts them; or set \
         `sync_enum_labels = true` on target {target} to have walfill add them"
    ));
    text
}

fn format_problems(problems: &[String]) -> String {
    if let [only] = problems {
        return format!("1 problem found:\n  - {only}");
    }
    let mut text = format!(
        "{} problems found (fix them in this order):",
        problems.len()
    );
    for (i, p) in problems.iter().enumerate() {
        text.push_str(&format!("\n  {}. {p}", i + 1));
    }
    text
}

/// What to do about an error, decided in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Directive {
    /// Transient (a network blip, a server restart, a busy slot): try again
    /// after a pause.
    Retry,
    /// The archive cannot serve a replay: build from a snapshot instead.
    FallBack,
    /// Trying again changes nothing until the operator acts on the message.
    Manual,
    /// The operator asked to stop.
    Stop,
}

impl Error {
    /// A failed destination statement, with what walfill was doing.
    pub fn destination(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        Error::Destination {
            context: context.into(),
            source,
        }
    }

    /// A failed source query, with what walfill was doing.
    pub fn source_query(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        Error::Source(SnapshotError::query(context, source))
    }

    /// What to do about this error.
    pub fn directive(&self) -> Directive {
        match self {
            Error::Interrupted => Directive::Stop,
            Error::History(_) => Directive::FallBack,
            Error::Source(e) => match e.is_transient() {
                true => Directive::Retry,
                false => Directive::Manual,
            },
            Error::Destination { source, .. } => match transient(source) {
                true => Directive::Retry,
                false => Directive::Manual,
            },
            Error::Archive(e) if e.is_misconfigured() => Directive::Manual,
            Error::Connect { .. } | Error::Busy(_) | Error::Archive(_) => Directive::Retry,
            Error::Config(_)
            | Error::Decode(_)
            | Error::Problems(_)
            | Error::Request(_)
            | Error::SchemaChanged(_)
            | Error::EnumLabels { .. }
            | Error::Lost(_)
            | Error::Fenced(_)
            | Error::Internal(_)
            | Error::Output(_) => Directive::Manual,
        }
    }

    /// The process exit code for this error.
    ///
    /// - 2: the configuration or the request is wrong (fix it, then rerun);
    /// - 3: checks found problems in the source or destination, or the
    ///   source changed so that a version must be rebuilt;
    /// - 4: another process holds the work;
    /// - 130: interrupted;
    /// - 1: anything else (often transient: rerunning resumes where it stopped).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::Request(_) => 2,
            Error::Archive(e) if e.is_misconfigured() => 2,
            Error::Problems(_)
            | Error::SchemaChanged(_)
            | Error::EnumLabels { .. }
            | Error::Lost(_) => 3,
            Error::Source(SnapshotError::Unusable { .. }) => 3,
            Error::Busy(_) | Error::Fenced(_) => 4,
            Error::Interrupted => 130,
            _ => 1,
        }
    }

    /// The message with every cause under it.
    pub fn describe(&self) -> String {
        error_chain(self)
    }
}

/// Whether a destination error may go away by itself: the connection broke,
/// or the server asked to retry (serialization, deadlock, shutdown, lack of
/// resources).
fn transient(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => true,
        Some(code) => matches!(
            sql_class(code),
            SqlClass::ConnectionException
                | SqlClass::TransactionRollback
                | SqlClass::InsufficientResources
                | SqlClass::OperatorIntervention
        ),
    }
}

/// The service's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
