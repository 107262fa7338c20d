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
    /// a retired version...): what does not fit, and what would.
    #[error("{0}")]
    Refused(Refusal),
    /// The source table changed under a version in a way the version cannot
    /// follow (a column it reads dropped or retyped, the table dropped): the
    /// fix is always a new version of the target.
    #[error("{change}; {}", rebuild_hint(.target))]
    SchemaChanged {
        /// The target whose version cannot follow.
        target: String,
        /// What changed, and where.
        change: String,
    },
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
    Lost(Box<LostVersion>),
    /// Another process holds the work.
    #[error("{work} is in use by {holder}; {fix}")]
    Busy {
        /// What is held: `replication slot S`, `version V of T`.
        work: String,
        /// Who holds it, as far as known: `another walfill process (server
        /// process 123 ...)`.
        holder: String,
        /// What to do: stop the holder, or wait for it.
        fix: String,
    },
    /// Another walfill process took the version over; this one's writes
    /// would be stale.
    #[error(
        "another walfill process took version {version} of {target} over (its lease moved past \
         {lease}); this one stops without storing more"
    )]
    Fenced {
        /// The version's target.
        target: String,
        /// The version.
        version: String,
        /// The fencing token this process held.
        lease: i64,
    },
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

/// Why a request does not fit the current state, and what would.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{problem}{}", then_fix(.fix))]
pub struct Refusal {
    /// What does not fit: `version v1 of t is active`.
    pub problem: String,
    /// What to do about it, when something would help: `swap another
    /// version in first`.
    pub fix: Option<String>,
}

impl Refusal {
    /// `problem`, and the `fix` for it.
    pub fn new(problem: impl Into<String>, fix: impl Into<String>) -> Refusal {
        Refusal {
            problem: problem.into(),
            fix: Some(fix.into()),
        }
    }

    /// A `problem` with no fix to name (the message says all there is).
    pub fn no_fix(problem: impl Into<String>) -> Refusal {
        Refusal {
            problem: problem.into(),
            fix: None,
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        Error::Refused(r)
    }
}

/// A version that misses changes for good: which one, why, and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("version {version} of {target} {loss}: {reason}{}", then_fix(.fix))]
pub struct LostVersion {
    /// The version's target.
    pub target: String,
    /// The version.
    pub version: String,
    /// What the error reports: the loss itself, or a publication refused
    /// for it.
    pub loss: Loss,
    /// Why it misses changes, said of it (`its replication slot S is
    /// gone`); from a follower, what `walfill.versions.lost` records.
    pub reason: String,
    /// What to do, unless the command acts itself (a backfill rebuilds the
    /// version on its own).
    pub fix: Option<String>,
}

impl From<LostVersion> for Error {
    fn from(lost: LostVersion) -> Error {
        Error::Lost(Box::new(lost))
    }
}

/// What a [`LostVersion`] error reports: that the version lost changes (its
/// follower found out), or that it cannot be published since it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Its stream lost changes for good (found while following it).
    Changes,
    /// A swap or rollback refuses to publish it, since it misses changes.
    Publication,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Loss::Changes => "lost changes",
            Loss::Publication => "cannot be published",
        })
    }
}

/// `; fix`, or nothing without one: how every message joins its problem and
/// its fix.
fn then_fix(fix: &Option<String>) -> String {
    fix.as_deref().map(|f| format!("; {f}")).unwrap_or_default()
}

/// The fix for a version that cannot follow its source.
fn rebuild_hint(target: &str) -> String {
    format!(
        "configure a new version of target {target} (and update its select if needed), then run \
         `walfill backfill {target}`"
    )
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

    /// The request does not fit: `problem`, and the `fix` for it.
    pub fn refused(problem: impl Into<String>, fix: impl Into<String>) -> Error {
        Error::Refused(Refusal::new(problem, fix))
    }

    /// The request does not fit: `problem`, with no fix to name.
    pub fn refused_no_fix(problem: impl Into<String>) -> Error {
        Error::Refused(Refusal::no_fix(problem))
    }

    /// `target`'s version cannot follow its source any more: `change` says
    /// what changed (the message adds the fix).
    pub fn schema_changed(target: impl Into<String>, change: impl Into<String>) -> Error {
        Error::SchemaChanged {
            target: target.into(),
            change: change.into(),
        }
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
            Error::Connect { .. } | Error::Busy { .. } | Error::Archive(_) => Directive::Retry,
            Error::Config(_)
            | Error::Decode(_)
            | Error::Problems(_)
            | Error::Refused(_)
            | Error::SchemaChanged { .. }
            | Error::EnumLabels { .. }
            | Error::Lost(_)
            | Error::Fenced { .. }
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
            Error::Config(_) | Error::Refused(_) => 2,
            Error::Archive(e) if e.is_misconfigured() => 2,
            Error::Problems(_)
            | Error::SchemaChanged { .. }
            | Error::EnumLabels { .. }
            | Error::Lost(_) => 3,
            Error::Source(SnapshotError::Unusable { .. }) => 3,
            Error::Busy { .. } | Error::Fenced { .. } => 4,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_joins_its_problem_and_its_fix() {
        let e = Error::refused("version v1 of t is active", "swap another version in first");
        assert_eq!(
            e.to_string(),
            "version v1 of t is active; swap another version in first"
        );
        assert_eq!((e.exit_code(), e.directive()), (2, Directive::Manual));
        let e = Error::refused_no_fix("there is no request 7");
        assert_eq!(e.to_string(), "there is no request 7");
    }

    #[test]
    fn a_schema_change_names_the_rebuild() {
        let e = Error::schema_changed("t", "source table public.s was dropped during the copy");
        assert_eq!(
            e.to_string(),
            "source table public.s was dropped during the copy; configure a new version of \
             target t (and update its select if needed), then run `walfill backfill t`"
        );
        assert_eq!((e.exit_code(), e.directive()), (3, Directive::Manual));
    }

    #[test]
    fn a_lost_version_names_itself_its_reason_and_the_fix() {
        let mut lost = LostVersion {
            target: "t".into(),
            version: "v1".into(),
            loss: Loss::Changes,
            reason: "its replication slot s is gone".into(),
            fix: None,
        };
        let e = Error::from(lost.clone());
        assert_eq!(
            e.to_string(),
            "version v1 of t lost changes: its replication slot s is gone"
        );
        assert_eq!((e.exit_code(), e.directive()), (3, Directive::Manual));
        lost.loss = Loss::Publication;
        lost.fix = Some("rebuild it".into());
        assert_eq!(
            Error::from(lost).to_string(),
            "version v1 of t cannot be published: its replication slot s is gone; rebuild it"
        );
    }

    #[test]
    fn busy_work_is_retried_and_a_fenced_version_is_not() {
        let busy = Error::Busy {
            work: "version v1 of t".into(),
            holder: "another walfill process".into(),
            fix: "stop it first (or wait for it to finish)".into(),
        };
        assert_eq!(
            busy.to_string(),
            "version v1 of t is in use by another walfill process; stop it first (or wait for \
             it to finish)"
        );
        assert_eq!((busy.exit_code(), busy.directive()), (4, Directive::Retry));
        let fenced = Error::Fenced {
            target: "t".into(),
            version: "v1".into(),
            lease: 3,
        };
        assert_eq!(
            fenced.to_string(),
            "another walfill process took version v1 of t over (its lease moved past 3); this \
             one stops without storing more"
        );
        assert_eq!(
            (fenced.exit_code(), fenced.directive()),
            (4, Directive::Manual)
        );
    }
}
