//! Listing the archive's WAL folder (in its layout), and learning the
//! segment size.
//!
//! A listing is taken in two steps: object names are split syntactically
//! first, then resolved into segments once the segment size is known (stated,
//! remembered, or read from the first page header of one of the listed
//! files). When a start position is known, the listing begins just before its
//! segment's name (`list_with_offset`), which object stores such as S3 do on
//! the server, so a long archive is not listed from its beginning.

use std::cmp::Ordering;
use std::time::SystemTime;

use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::lsn::{Lsn, SegmentName, SegmentNo, TimelineId};

use super::codec::{self, Codec};
use super::error::ArchiveError;
use super::layout::{Layout, Located, RawName};
use super::Archive;

/// A segment file found in the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedSegment {
    /// The segment.
    pub name: SegmentName,
    /// The object name, e.g. `prefix/wal/000000010000000000000007.zst`.
    pub file: String,
    /// The file is the unfinished tail (`.partial`).
    pub partial: bool,
    /// The file is compressed.
    pub compressed: bool,
    /// How it is compressed.
    pub codec: Codec,
    /// The SHA-1 of its content its name states (pgBackRest), checked on read.
    pub sha1: Option<[u8; 20]>,
    /// Stored size in bytes (compressed size for a compressed file).
    pub size: u64,
    /// When the object was last written.
    pub modified: SystemTime,
    /// The object name as listed.
    pub(super) location: Path,
}

impl ArchivedSegment {
    /// Order of preference among files of the same segment: complete before
    /// partial; among complete ones (same content) plain first, as it needs
    /// no decompression; among partial ones the latest written, then plain.
    fn preference(&self, other: &ArchivedSegment) -> Ordering {
        self.partial.cmp(&other.partial).then_with(|| {
            let newer_first = if self.partial {
                other.modified.cmp(&self.modified)
            } else {
                Ordering::Equal
            };
            newer_first.then(self.compressed.cmp(&other.compressed))
        })
    }
}

/// A timeline history file found in the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct HistoryFile {
    pub(super) timeline: TimelineId,
    pub(super) location: Path,
    pub(super) codec: Codec,
}

/// The segments a listing found: at most one file per segment (a complete
/// file wins over a `.partial` one, a newer `.partial` over an older one),
/// ordered by timeline, then segment number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentList {
    /// The segment size used to read the names.
    pub segment_size: u32,
    /// The segments.
    pub segments: Vec<ArchivedSegment>,
    /// Timelines that have a history file (all of them only for a listing
    /// without a start: one from a start sees those named after its offset).
    pub histories: Vec<TimelineId>,
    /// The archive's layout.
    pub layout: Layout,
    /// The history files, by timeline.
    pub(super) history_files: Vec<HistoryFile>,
}

impl SegmentList {
    /// The timelines having segments, in increasing order.
    pub fn timelines(&self) -> Vec<TimelineId> {
        let mut out: Vec<TimelineId> = self.segments.iter().map(|s| s.name.timeline).collect();
        out.dedup();
        out
    }

    /// The file of a segment, if listed.
    pub fn get(&self, name: SegmentName) -> Option<&ArchivedSegment> {
        self.segments
            .binary_search_by_key(&name, |s| s.name)
            .ok()
            .and_then(|i| self.segments.get(i))
    }
}

/// A listed object that looks like a segment file; its number is not known yet.
#[derive(Clone, Debug)]
struct RawEntry {
    location: Path,
    stem: String,
    partial: bool,
    codec: Codec,
    sha1: Option<[u8; 20]>,
    size: u64,
    modified: SystemTime,
}

/// Objects listed in the WAL folder, split by name.
#[derive(Debug)]
struct RawListing {
    located: Located,
    entries: Vec<RawEntry>,
    histories: Vec<HistoryFile>,
}

impl RawListing {
    fn new(located: Located) -> RawListing {
        RawListing {
            located,
            entries: Vec::new(),
            histories: Vec::new(),
        }
    }

    /// Sorts one object into the listing, if it is a WAL file.
    fn add(&mut self, meta: ObjectMeta) {
        let Some(path) = path_in(&meta.location, &self.located.wal) else {
            return;
        };
        match self.located.layout.parse_name(&path) {
            Some(RawName::Segment {
                stem,
                partial,
                codec,
                sha1,
            }) => {
                let stem = stem.to_string();
                self.entries.push(RawEntry {
                    location: meta.location,
                    stem,
                    partial,
                    codec,
                    sha1,
                    size: meta.size,
                    modified: meta.last_modified.into(),
                })
            }
            Some(RawName::History { timeline, codec }) => self.histories.push(HistoryFile {
                timeline,
                location: meta.location,
                codec,
            }),
            None => {}
        }
    }

    /// The entry to read the segment size from: the first complete plain
    /// one if any (cheapest to read), else the first.
    fn size_probe(&self) -> Option<&RawEntry> {
        let cheapest = |e: &&RawEntry| !e.partial && !e.codec.is_compressed();
        self.entries
            .iter()
            .find(cheapest)
            .or_else(|| self.entries.first())
    }
}

/// The path of `location` below `dir` (`a/b` for a file in a subfolder).
fn path_in(location: &Path, dir: &Path) -> Option<String> {
    let parts: Vec<String> = location
        .prefix_match(dir)?
        .map(|p| p.as_ref().to_string())
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

impl Archive {
    /// All segments in the archive, of one timeline or of all.
    pub async fn segments(
        &self,
        timeline: Option<TimelineId>,
    ) -> Result<SegmentList, ArchiveError> {
        self.listing(None, timeline, None).await
    }

    /// The segments holding `from` and later WAL, of one timeline or of all.
    /// Listing starts at `from`'s segment name, so earlier files cost nothing
    /// on stores that list from an offset.
    pub async fn segments_from(
        &self,
        from: Lsn,
        timeline: Option<TimelineId>,
    ) -> Result<SegmentList, ArchiveError> {
        self.listing(Some(from), timeline, None).await
    }

    /// The segment size: stated, remembered, or read from the first page
    /// header of the first segment file listed.
    pub async fn segment_size(&self) -> Result<u32, ArchiveError> {
        if let Some(size) = self.known_segment_size() {
            return Ok(size);
        }
        let probe = self.first_segment_file().await?;
        self.learn_segment_size(&probe).await
    }

    /// Lists segments from `from` (or all), of a timeline (or all), reading
    /// names with `given_size` (or the archive's segment size).
    pub(super) async fn listing(
        &self,
        from: Option<Lsn>,
        timeline: Option<TimelineId>,
        given_size: Option<u32>,
    ) -> Result<SegmentList, ArchiveError> {
        let known = match given_size {
            Some(size) => {
                Some(self.check_segment_size(u64::from(size), "the requested segment size")?)
            }
            None => self.known_segment_size(),
        };
        let located = self.locate().await?;
        let offset = from.map(|from| listing_offset(&located, from, timeline, known));
        let raw = self.list_raw(located, offset.as_ref()).await?;
        let segment_size = match (known, raw.size_probe()) {
            (Some(size), _) => size,
            (None, Some(probe)) => self.learn_segment_size(probe).await?,
            (None, None) => self.segment_size().await?,
        };
        let layout = raw.located.layout;
        let size = u64::from(segment_size);
        let first = from.map_or(SegmentNo(0), |lsn| SegmentNo::containing(lsn, size));
        let mut segments: Vec<ArchivedSegment> = raw
            .entries
            .into_iter()
            .filter_map(|e| {
                let name = SegmentName::parse(&e.stem, size)?;
                let wanted = name.segno >= first && timeline.is_none_or(|t| t == name.timeline);
                wanted.then(|| ArchivedSegment {
                    name,
                    file: e.location.to_string(),
                    partial: e.partial,
                    compressed: e.codec.is_compressed(),
                    codec: e.codec,
                    sha1: e.sha1,
                    size: e.size,
                    modified: e.modified,
                    location: e.location,
                })
            })
            .collect();
        segments.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.preference(b)));
        segments.dedup_by_key(|s| s.name);
        let mut history_files = raw.histories;
        // Of several files of one timeline, the plain one.
        history_files.sort_by_key(|h| (h.timeline, h.codec));
        history_files.dedup_by_key(|h| h.timeline);
        Ok(SegmentList {
            segment_size,
            segments,
            histories: history_files.iter().map(|h| h.timeline).collect(),
            layout,
            history_files,
        })
    }

    /// Lists the WAL folder, after `offset` if given.
    async fn list_raw(
        &self,
        located: Located,
        offset: Option<&Path>,
    ) -> Result<RawListing, ArchiveError> {
        let wal = located.wal.clone();
        let store = self.store();
        let stream = match offset {
            Some(offset) => store.list_with_offset(Some(&wal), offset),
            None => store.list(Some(&wal)),
        };
        self.gather(located, stream, |_| false).await
    }

    /// Reads `stream`, a listing of `located`'s WAL folder, into a
    /// [`RawListing`], until it ends or `enough` says the listing holds
    /// what is wanted.
    async fn gather(
        &self,
        located: Located,
        mut stream: futures_util::stream::BoxStream<'_, object_store::Result<ObjectMeta>>,
        enough: impl Fn(&RawListing) -> bool,
    ) -> Result<RawListing, ArchiveError> {
        let wal = located.wal.clone();
        let mut raw = RawListing::new(located);
        while let Some(meta) = stream
            .try_next()
            .await
            .map_err(|e| self.store_error("list", &wal, e))?
        {
            raw.add(meta);
            if enough(&raw) {
                break;
            }
        }
        Ok(raw)
    }

    /// The first segment file a listing of the WAL folder returns; stops
    /// listing there.
    async fn first_segment_file(&self) -> Result<RawEntry, ArchiveError> {
        let located = self.locate().await?;
        let wal = located.wal.clone();
        let stream = self.store().list(Some(&wal));
        let mut raw = self
            .gather(located, stream, |raw| !raw.entries.is_empty())
            .await?;
        if let Some(entry) = raw.entries.pop() {
            return Ok(entry);
        }
        Err(ArchiveError::NoSegments {
            url: self.url().to_string(),
            prefix: wal.to_string(),
        })
    }

    /// Reads the segment size from the first page header of a segment file,
    /// and remembers it.
    async fn learn_segment_size(&self, entry: &RawEntry) -> Result<u32, ArchiveError> {
        let name = entry.location.to_string();
        if entry.size == 0 {
            return Err(ArchiveError::Corrupt {
                url: self.url().to_string(),
                name,
                reason: "empty file".to_string(),
                source: None,
            });
        }
        let want = entry.codec.head_len().unwrap_or(entry.size);
        let head = self
            .store()
            .get_range(&entry.location, 0..entry.size.min(want))
            .await
            .map_err(|e| self.store_error("get", &entry.location, e))?;
        let codec = entry.codec;
        let size = tokio::task::spawn_blocking(move || codec::segment_size_in_header(&head, codec))
            .await
            .map_err(|e| self.task_error(e))?
            .map_err(|damage| self.corrupt(&name, damage))?;
        // The stem must be a segment name for this size, or the file is not what it says.
        if SegmentName::parse(&entry.stem, u64::from(size)).is_none() {
            return Err(ArchiveError::Corrupt {
                url: self.url().to_string(),
                name,
                reason: format!("its name is not a segment name for its segment size {size}"),
                source: None,
            });
        }
        self.remember_segment_size(size, "the segment size in a page header")?;
        Ok(size)
    }
}

/// An object name just before every file of segments at or after `from`
/// on `timeline` (timeline 1 when not given, so that all timelines are
/// included): the first 23 digits of the segment's name when the segment
/// size is known, else the timeline and the high half of the LSN, which all
/// segment names of that 4 GiB stretch start with. In pgBackRest's layout
/// it is in the folder named after the first 16 digits.
fn listing_offset(
    located: &Located,
    from: Lsn,
    timeline: Option<TimelineId>,
    size: Option<u32>,
) -> Path {
    let timeline = timeline.unwrap_or(TimelineId(1));
    let text = match size {
        Some(size) => {
            let size = u64::from(size);
            let mut name = SegmentName {
                timeline,
                segno: SegmentNo::containing(from, size),
            }
            .file_name(size);
            name.truncate(23);
            name
        }
        None => format!("{:08X}{:08X}", timeline.0, from.0 >> 32),
    };
    match (located.layout, text.get(..16)) {
        (Layout::PgBackRest, Some(folder)) if text.len() > 16 => {
            located.wal.clone().join(folder).join(text.as_str())
        }
        _ => located.wal.clone().join(text.as_str()),
    }
}
