//! What can stop `walfill archive` and `walfill wal-push`, and what each
//! means for the operator (through the service's [`Error`]).

use std::path::PathBuf;

use walfill_replay::archive::ArchiveError;
use walfill_replay::{Lsn, TimelineId};
use walfill_snapshot::SnapshotError;

use crate::config::ConfigError;
use crate::error::Error;

/// A failure of the archiver or of a push.
#[derive(Debug, thiserror::Error)]
pub enum ArchiverError {
    /// The configuration lacks what the command needs, or a flag is unusable.
    #[error("config file {path}: {message}")]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// What is missing and how to add it.
        message: String,
    },
    /// The object store refused or failed a request (after retries).
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// A replication command or the replication stream failed.
    #[error("{context}: {source}")]
    Replication {
        /// What walfill was doing.
        context: String,
        /// The replication error.
        source: pg_walstream::ReplicationError,
    },
    /// The replication stream sent something that cannot be archived as is
    /// (a frame out of order, an unknown message); reconnecting resends it.
    #[error("replication stream: {0}")]
    Protocol(String),
    /// The slot cannot be used by this command.
    #[error("replication slot {slot}: {problem}")]
    Slot {
        /// The slot's name.
        slot: String,
        /// What is wrong, and the fix.
        problem: String,
    },
    /// Another process streams from the slot.
    #[error("replication slot {slot} is in use by process {pid} (another `walfill archive`?): stop it, or give this one --slot NAME")]
    SlotBusy {
        /// The slot's name.
        slot: String,
        /// The server process using it.
        pid: String,
    },
    /// The archive holds WAL beyond the source's end: not this cluster's.
    #[error(
        "archive {url} holds complete WAL segments up to {archived}, beyond the source's WAL \
         end {server_end}: it is another cluster's archive, or the source was restored from a \
         backup; give walfill archive an archive URL of its own"
    )]
    AheadOfSource {
        /// The archive.
        url: String,
        /// Where the archive's complete segments end.
        archived: Lsn,
        /// The source's flushed WAL.
        server_end: Lsn,
    },
    /// The source moved to another timeline (a promotion): not followed.
    #[error(
        "the source is now on timeline {now} but the archive was being filled from timeline \
         {was}: following a timeline switch is not supported; archive the new timeline into a \
         new archive URL (or a new --slot)"
    )]
    TimelineSwitch {
        /// The timeline that was streamed.
        was: TimelineId,
        /// The server's timeline now.
        now: TimelineId,
    },
    /// The file to push cannot be read.
    #[error("cannot read WAL file {path}: {source}")]
    ReadFile {
        /// The path as given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file to push is not a WAL file walfill archives.
    #[error("{path}: {reason}")]
    NotWal {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with its name or content.
        reason: String,
    },
    /// The archive already holds the file with other content; it is never
    /// replaced.
    #[error(
        "archive {url} already holds {name} with different content: refusing to replace it \
         (is another cluster archiving into the same URL?)"
    )]
    Conflict {
        /// The archive.
        url: String,
        /// The object.
        name: String,
    },
}

impl ArchiverError {
    /// A failed replication command, with what walfill was doing.
    pub(crate) fn replication(
        context: impl Into<String>,
        source: pg_walstream::ReplicationError,
    ) -> ArchiverError {
        ArchiverError::Replication {
            context: context.into(),
            source,
        }
    }

    /// Whether reconnecting (after a pause) may get past this error: network
    /// trouble, a server restart, a stream that lost its place. Object store
    /// errors are retried where they happen, so they are final here.
    pub fn is_transient(&self) -> bool {
        match self {
            ArchiverError::Replication { source, .. } => !source.is_permanent(),
            ArchiverError::Protocol(_) => true,
            _ => false,
        }
    }
}

impl From<ArchiverError> for Error {
    fn from(e: ArchiverError) -> Error {
        match e {
            ArchiverError::Config { path, message } => {
                Error::Config(ConfigError::Invalid { path, message })
            }
            ArchiverError::Archive(e) => Error::Archive(e),
            ArchiverError::Replication { context, source } => {
                Error::Source(SnapshotError::Replication { context, source })
            }
            ArchiverError::Protocol(m) => Error::Source(SnapshotError::Protocol(m)),
            ArchiverError::SlotBusy { slot, pid } => Error::Busy {
                work: format!("replication slot {slot}"),
                holder: format!("process {pid} (another `walfill archive`?)"),
                fix: "stop it, or give this one --slot NAME".into(),
            },
            ArchiverError::Slot { .. }
            | ArchiverError::TimelineSwitch { .. }
            | ArchiverError::AheadOfSource { .. }
            | ArchiverError::ReadFile { .. }
            | ArchiverError::NotWal { .. }
            | ArchiverError::Conflict { .. } => Error::refused_no_fix(e.to_string()),
        }
    }
}
