//! Archived WAL in object storage: listing, reading with read-ahead, writing.
//!
//! An [`Archive`] is a prefix in an object store (a local directory, an S3
//! bucket, memory), opened from a URL ([`Archive::open`]). In walfill's own
//! layout, WAL segments live under `wal/` in it, named as PostgreSQL names
//! them, plain or compressed with zstd, and the unfinished tail of the WAL
//! as a `.partial` file (see [`SegmentFile`]):
//!
//! ```text
//! <prefix>/wal/000000010000000000000007.zst
//! <prefix>/wal/000000010000000000000008
//! <prefix>/wal/000000010000000000000009.partial.zst
//! <prefix>/wal/00000002.history
//! ```
//!
//! Other files under `wal/` and other prefixes (such as `base/`) are ignored.
//!
//! **Layouts.** Archives that other tools fill are read where they are: a
//! flat folder of segment files, WAL-G's `wal_005/`, a pgBackRest stanza's
//! archive folder (see [`Layout`]). The layout is detected from what the URL
//! holds ([`Archive::layout`]) or named ([`Archive::with_layout`]). walfill
//! writes only into its own layout: writes into another fail with
//! [`ArchiveError::ReadOnly`].
//!
//! **Segment size.** Turning a segment file name into a segment number needs
//! the segment size, a power of two from 1 MiB to 1 GiB chosen at `initdb`.
//! The archive learns it from the long page header at the start of a segment
//! (`xlp_seg_size`) and keeps it, or takes it from the caller
//! ([`Archive::with_segment_size`], [`ReadOptions::segment_size`]).
//!
//! **Timelines.** A promoted standby continues the WAL on a new timeline, and
//! the archive then holds segments of several. Listing shows them all.
//! Reading follows a target timeline as recovery does when asked to
//! ([`ReadOptions::follow`]): the target's history file in the archive says
//! which timeline each position is on, and each segment is read from the
//! newest timeline that had begun by its start. Otherwise reading uses the
//! one timeline that covers the range, or the one chosen in
//! [`ReadOptions::timeline`], and fails with
//! [`ArchiveError::SeveralTimelines`] when the choice is ambiguous.
//!
//! **Reading.** [`Archive::read`] lists once, checks the range is there
//! without gaps, then fetches segments concurrently (a bounded read-ahead,
//! each fetch a task of its own so it progresses while the consumer works)
//! and yields them in order, decompressed on blocking threads. A segment
//! whose content is not exactly the segment size is corrupt. For a decoder
//! running on a plain thread, [`Archive::read_blocking`] delivers the same
//! segments through a bounded channel ([`SegmentReceiver`]).
//!
//! **Writing.** [`Archive::put_segment`] stores a segment (zstd level
//! [`ZSTD_LEVEL`] when compressing) with one atomic put, so readers never see
//! part of a file; a `.partial` file is overwritten as the tail grows.
//!
//! This is the only async part of the crate. Everything on the CPU
//! (decompression, compression) runs on blocking threads.
//!
//! ```no_run
//! use futures_util::TryStreamExt;
//! use walfill_replay::archive::{Archive, ReadOptions};
//! use walfill_replay::lsn::Lsn;
//!
//! # async fn run() -> Result<(), walfill_replay::archive::ArchiveError> {
//! let archive = Archive::open("s3://bucket/cluster-a")?;
//! let mut segments = Box::pin(archive.read(Lsn(0x0700_0000), None, ReadOptions::default()));
//! while let Some(segment) = segments.try_next().await? {
//!     println!("{} from {} ({} bytes)", segment.file, segment.start, segment.bytes.len());
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::{Arc, OnceLock};

use object_store::path::Path;
use object_store::ObjectStore;

use crate::wal::is_valid_segment_size;

mod blocking;
mod codec;
mod error;
mod feed;
mod history;
mod layout;
mod list;
mod name;
mod open;
mod read;
mod summaries;
mod write;

pub use blocking::SegmentReceiver;
pub use codec::{Codec, ZSTD_LEVEL};
pub use error::ArchiveError;
pub use feed::{decode_planned, decode_segments, FeedOutcome, PlannedSegment, SegmentSource};
pub use layout::Layout;
pub use list::{ArchivedSegment, SegmentList};
pub use name::SegmentFile;
pub use read::{ReadOptions, SegmentData};
pub use summaries::{PlannedRead, Survey};

/// Name of the directory holding WAL under the archive prefix.
const WAL_DIR: &str = "wal";

/// A WAL archive: a prefix in an object store. Cheap to clone; clones share
/// the store and the learned segment size.
#[derive(Clone)]
pub struct Archive {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    wal: Path,
    url: String,
    segment_size: OnceLock<u32>,
    /// The layout named by the caller; `None` to detect it.
    layout: Option<Layout>,
    /// The layout and WAL folder, once named or found.
    located: OnceLock<layout::Located>,
}

impl fmt::Debug for Archive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("url", &self.inner.url)
            .field("segment_size", &self.inner.segment_size.get())
            .field("layout", &self.inner.located.get().map(|l| l.layout))
            .finish()
    }
}

impl Archive {
    /// Opens the archive at a URL: `file:///absolute/path`,
    /// `s3://bucket/prefix` (configured from the `AWS_*` environment
    /// variables) or `memory://` (a new, empty in-memory store each time;
    /// use [`Archive::from_store`] to share one). Makes no request.
    pub fn open(url: &str) -> Result<Archive, ArchiveError> {
        let opened = open::open_url(url)?;
        Ok(Archive::with_url(
            opened.store,
            opened.prefix,
            url.to_string(),
        ))
    }

    /// The archive at `prefix` in an existing store.
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: Path) -> Archive {
        let url = format!("{store}/{prefix}");
        Archive::with_url(store, prefix, url)
    }

    fn with_url(store: Arc<dyn ObjectStore>, prefix: Path, url: String) -> Archive {
        let wal = prefix.clone().join(WAL_DIR);
        Archive {
            inner: Arc::new(Inner {
                store,
                prefix,
                wal,
                url,
                segment_size: OnceLock::new(),
                layout: None,
                located: OnceLock::new(),
            }),
        }
    }

    /// Reads the archive in `layout` (`None`: detect it, the default),
    /// keeping the segment size already known.
    pub fn with_layout(self, layout: Option<Layout>) -> Archive {
        let inner = &self.inner;
        let segment_size = OnceLock::new();
        if let Some(size) = inner.segment_size.get() {
            segment_size.get_or_init(|| *size);
        }
        Archive {
            inner: Arc::new(Inner {
                store: inner.store.clone(),
                prefix: inner.prefix.clone(),
                wal: inner.wal.clone(),
                url: inner.url.clone(),
                segment_size,
                layout,
                located: OnceLock::new(),
            }),
        }
    }

    /// The layout named with [`with_layout`](Archive::with_layout), if one was.
    pub fn named_layout(&self) -> Option<Layout> {
        self.inner.layout
    }

    /// States the segment size instead of learning it from a segment.
    /// Fails if it is not a valid size or the archive already knows another.
    pub fn with_segment_size(self, segment_size: u32) -> Result<Archive, ArchiveError> {
        self.remember_segment_size(segment_size, "the given segment size")?;
        Ok(self)
    }

    /// The URL the archive was opened with (or a description of the store).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// An object's name under the archive's URL (`wal/000000010000000000000003`),
    /// as messages that also name the URL show it.
    pub fn relative(&self, location: &Path) -> String {
        location
            .as_ref()
            .strip_prefix(self.inner.prefix.as_ref())
            .unwrap_or(location.as_ref())
            .trim_start_matches('/')
            .to_string()
    }

    /// Where an object is, as a URL an operator can open: the archive's URL
    /// and the object's name under it (`file:///var/lib/wal/0000...`, with
    /// the path's leading `/`; `s3://bucket/prefix/0000...`).
    pub fn object_url(&self, location: &Path) -> String {
        format!(
            "{}/{}",
            self.url().trim_end_matches('/'),
            self.relative(location)
        )
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The archive's prefix in the store.
    pub fn prefix(&self) -> &Path {
        &self.inner.prefix
    }

    /// Where walfill writes WAL files: `<prefix>/wal`. (The folder WAL is
    /// read from depends on the layout.)
    pub fn wal_prefix(&self) -> &Path {
        &self.inner.wal
    }

    /// The segment size, if stated or already learned.
    pub fn known_segment_size(&self) -> Option<u32> {
        self.inner.segment_size.get().copied()
    }

    /// The object name of a WAL file walfill writes under `wal/`.
    fn wal_object(&self, file_name: &str) -> Path {
        self.inner.wal.clone().join(file_name)
    }

    /// Keeps a segment size, checking it is valid and agrees with the one known.
    fn remember_segment_size(&self, size: u32, what: &'static str) -> Result<(), ArchiveError> {
        self.check_segment_size(u64::from(size), what)?;
        let kept = *self.inner.segment_size.get_or_init(|| size);
        if kept != size {
            return Err(ArchiveError::InvalidSegmentSize {
                url: self.inner.url.clone(),
                what,
                size: u64::from(size),
                expected: format!("the archive's segments are {kept} bytes"),
            });
        }
        Ok(())
    }

    /// Fails unless `size` is a segment size PostgreSQL allows.
    fn check_segment_size(&self, size: u64, what: &'static str) -> Result<u32, ArchiveError> {
        match u32::try_from(size) {
            Ok(s) if is_valid_segment_size(s) => Ok(s),
            _ => Err(ArchiveError::InvalidSegmentSize {
                url: self.inner.url.clone(),
                what,
                size,
                expected: "a power of two from 1 MiB to 1 GiB".to_string(),
            }),
        }
    }

    fn store_error(
        &self,
        operation: &'static str,
        name: &Path,
        source: object_store::Error,
    ) -> ArchiveError {
        ArchiveError::Store {
            url: self.inner.url.clone(),
            operation,
            name: self.relative(name),
            source: Box::new(source),
        }
    }

    fn corrupt(&self, name: &str, damage: codec::Damage) -> ArchiveError {
        ArchiveError::Corrupt {
            url: self.inner.url.clone(),
            name: name.to_string(),
            reason: damage.reason,
            source: damage.source,
        }
    }

    fn task_error(&self, source: tokio::task::JoinError) -> ArchiveError {
        ArchiveError::Task {
            url: self.inner.url.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests;
