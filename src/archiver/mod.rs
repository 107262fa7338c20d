//! Filling the WAL archive: `walfill archive` and `walfill wal-push`.
//!
//! Both write the layout the decoder reads (`walfill_replay::archive`):
//! segments under `<archive>/wal/`, named as PostgreSQL names them and
//! compressed with zstd, the unfinished tail as `.partial.zst`, timeline
//! history files as they are.
//!
//! **`walfill archive`** ([`archive`]) streams WAL from the source through a
//! physical replication slot, the way a standby receives it:
//!
//! ```text
//! source ──XLogData──▶ session (stream.rs) ──segments──▶ writer (writer.rs) ──▶ object store
//!    ▲                    │ cut into segments                │ zstd, one put per file
//!    └── status update ◀──┴── flush = durable position ◀────┘ progress
//! ```
//!
//! The session keeps the segment being filled in memory (the assembler
//! of `segment.rs`); a completed segment goes to the writer at
//! once, the tail every flush interval as `.partial`. The writer stores
//! them in order and publishes the *durable* position: every byte before it
//! is in the object store. Only that position is sent to the server as the
//! flush position, which is what moves a physical slot, so the source keeps
//! every byte the archive may lack, through crashes and `kill -9` included.
//! Where a run starts is described in `run.rs`: from the first segment the
//! archive does not hold complete, re-sending a `.partial` segment whole.
//! Transient errors reconnect with backoff; a timeline switch stops the
//! command (following one is not supported).
//!
//! **`walfill wal-push`** ([`wal_push`]) is the alternative for clusters that
//! archive with `archive_command = 'walfill wal-push %p'`: one file per call,
//! idempotent, never replacing a stored file with other bytes.

mod error;
mod frame;
mod push;
mod replication;
mod run;
mod segment;
mod slot;
mod stream;
mod writer;

use std::time::Duration;

use walfill_replay::Lsn;

use crate::config::Config;

pub use error::ArchiverError;
pub use push::{wal_push, PushOutcome};
pub use run::{archive, default_slot_name};
pub use slot::{describe as describe_dropped_slot, drop_slot, in_use as slot_in_use, Dropped};

/// The configured archive's URL, or an error saying how to configure one
/// for `command`.
fn archive_url(config: &Config, command: &str) -> Result<String, ArchiverError> {
    config.archive.clone().ok_or_else(|| ArchiverError::Config {
        path: config.path.clone(),
        message: format!(
            "no archive configured: add an [archive] section with url = \"file:///path\" \
             or \"s3://bucket/prefix\" (walfill {command} stores WAL there)"
        ),
    })
}

/// How `walfill archive` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveOptions {
    /// The physical slot to stream through (default:
    /// [`default_slot_name`]); created if missing.
    pub slot: Option<String>,
    /// How often the unfinished tail segment is stored as `.partial`.
    pub flush_interval: Duration,
    /// Stop once the archive has every byte of WAL before this LSN.
    pub until: Option<Lsn>,
}

impl Default for ArchiveOptions {
    fn default() -> ArchiveOptions {
        ArchiveOptions {
            slot: None,
            flush_interval: Duration::from_secs(5),
            until: None,
        }
    }
}
