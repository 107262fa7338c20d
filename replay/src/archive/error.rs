//! What can go wrong with an archive, and whether trying again can help.

use std::fmt;

use crate::lsn::{Lsn, TimelineId};

use super::Layout;

/// An archive operation failed.
///
/// Every variant names the archive (`url`) and, where one is involved, the
/// object (`name`, the full object name such as
/// `wal/000000010000000000000007.zst`) and the WAL position. The underlying
/// error, when there is one, is kept as the [`source`](std::error::Error::source).
/// [`is_permanent`](ArchiveError::is_permanent) says whether retrying the
/// same request can help.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive URL cannot be used.
    #[error("invalid archive URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong and what to write instead.
        reason: String,
    },

    /// The object store for the URL could not be set up (bad configuration).
    #[error("cannot open archive {url}: check the URL and the AWS_* environment variables")]
    Open {
        /// The URL as given.
        url: String,
        /// The object store's complaint.
        #[source]
        source: Box<object_store::Error>,
    },

    /// Talking to the object store failed.
    #[error("{operation} of {name} in archive {url} failed")]
    Store {
        /// The archive.
        url: String,
        /// What was being done: `list`, `get`, `put`, `delete`.
        operation: &'static str,
        /// The object (or listing prefix) concerned.
        name: String,
        /// The object store's error.
        #[source]
        source: Box<object_store::Error>,
    },

    /// A segment that the requested range needs is not in the archive.
    #[error("WAL segment {name} is missing from archive {url}: it should hold WAL from {lsn}")]
    MissingSegment {
        /// The archive.
        url: String,
        /// The object that should be there (without compression suffix).
        name: String,
        /// The first LSN of the requested range it would hold.
        lsn: Lsn,
    },

    /// A segment file is damaged: wrong size, not decompressible, a
    /// checksum its name states that its content does not have, no WAL page
    /// header.
    #[error("WAL segment {name} in archive {url} is corrupt: {reason}")]
    Corrupt {
        /// The archive.
        url: String,
        /// The object.
        name: String,
        /// What is wrong with it.
        reason: String,
        /// The decompressor's error, if it was one.
        #[source]
        source: Option<std::io::Error>,
    },

    /// The archive has no WAL segment, so its segment size cannot be learned.
    #[error("archive {url} has no WAL segments under {prefix}: cannot learn the segment size")]
    NoSegments {
        /// The archive.
        url: String,
        /// Where segments were looked for.
        prefix: String,
    },

    /// Several timelines hold WAL for the requested range and none was chosen.
    #[error(
        "archive {url} holds WAL of several timelines ({}) from {from}: choose one \
         (ReadOptions::timeline)",
        TimelineList(timelines)
    )]
    SeveralTimelines {
        /// The archive.
        url: String,
        /// The timelines found, in increasing order.
        timelines: Vec<TimelineId>,
        /// Start of the requested range.
        from: Lsn,
    },

    /// A segment size is not one PostgreSQL allows, or disagrees with the archive's.
    #[error("archive {url}: {what} {size} is not usable as a WAL segment size ({expected})")]
    InvalidSegmentSize {
        /// The archive.
        url: String,
        /// Where the size came from.
        what: &'static str,
        /// The size found.
        size: u64,
        /// What was expected instead.
        expected: String,
    },

    /// Compressing a segment for the archive failed.
    #[error("compressing {name} for archive {url} failed")]
    Compress {
        /// The archive.
        url: String,
        /// The object that was to be written.
        name: String,
        /// The compressor's error.
        #[source]
        source: std::io::Error,
    },

    /// The archive's layout cannot be told or used.
    #[error("archive {url}: {reason}")]
    Layout {
        /// The archive.
        url: String,
        /// What was found and what to give instead.
        reason: String,
    },

    /// A write into an archive of another tool's layout.
    #[error(
        "archive {url} has the {layout} layout, which walfill reads but never writes into: \
         keep it filled by the tool that owns it (an archive_command, pgBackRest, WAL-G) and \
         leave walfill's archiving off (`[serve] archiver = \"auto\"`, no `walfill archive` \
         or `wal-push` on it); walfill writes WAL and base snapshots only into an archive of \
         its own layout (an empty location, or one holding wal/)"
    )]
    ReadOnly {
        /// The archive.
        url: String,
        /// Its layout.
        layout: Layout,
    },

    /// A timeline history file in the archive cannot be read.
    #[error("timeline history file {name} in archive {url} is unusable: {reason}")]
    History {
        /// The archive.
        url: String,
        /// The object.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A background task reading the archive panicked or was cancelled.
    #[error("a background task of archive {url} failed")]
    Task {
        /// The archive.
        url: String,
        /// The runtime's report.
        #[source]
        source: tokio::task::JoinError,
    },
}

impl ArchiveError {
    /// Whether the configuration is wrong (the URL, the layout it points
    /// at): fix it, then rerun.
    pub fn is_misconfigured(&self) -> bool {
        matches!(
            self,
            ArchiveError::InvalidUrl { .. }
                | ArchiveError::Layout { .. }
                | ArchiveError::ReadOnly { .. }
        )
    }

    /// Whether the same request would fail again: missing or corrupt data,
    /// bad configuration, refused credentials. `false` for transport errors
    /// (network, throttling, server errors) worth retrying after a pause.
    pub fn is_permanent(&self) -> bool {
        match self {
            ArchiveError::InvalidUrl { .. }
            | ArchiveError::Open { .. }
            | ArchiveError::MissingSegment { .. }
            | ArchiveError::Corrupt { .. }
            | ArchiveError::NoSegments { .. }
            | ArchiveError::SeveralTimelines { .. }
            | ArchiveError::InvalidSegmentSize { .. }
            | ArchiveError::Compress { .. }
            | ArchiveError::Layout { .. }
            | ArchiveError::ReadOnly { .. }
            | ArchiveError::History { .. } => true,
            ArchiveError::Store { source, .. } => store_error_is_permanent(source),
            ArchiveError::Task { source, .. } => source.is_panic(),
        }
    }

    /// Whether this is a [`MissingSegment`](ArchiveError::MissingSegment).
    pub fn is_missing_segment(&self) -> bool {
        matches!(self, ArchiveError::MissingSegment { .. })
    }
}

/// Errors of the object store that retrying does not cure.
fn store_error_is_permanent(error: &object_store::Error) -> bool {
    use object_store::Error as E;
    matches!(
        error,
        E::NotFound { .. }
            | E::InvalidPath { .. }
            | E::NotSupported { .. }
            | E::NotImplemented { .. }
            | E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::UnknownConfigurationKey { .. }
    )
}

/// Timelines printed as `1, 2`.
struct TimelineList<'a>(&'a [TimelineId]);

impl fmt::Display for TimelineList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, tli) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{tli}")?;
        }
        Ok(())
    }
}
