//! Reading a range of WAL: planning from one listing, then fetching
//! segments concurrently and yielding them in order.
//!
//! Each fetch is a task of its own (aborted if the reader is dropped), so
//! up to `read_ahead` segments download and decompress while the consumer
//! is busy with an earlier one; `buffered` keeps them in order and bounds
//! how many exist at once: at most `read_ahead` held by the reader plus the
//! one the consumer holds.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{self, Stream, StreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use tokio::task::JoinHandle;

use crate::lsn::{Lsn, SegmentName, SegmentNo, TimelineId};

use super::codec;
use super::error::ArchiveError;
use super::layout::Layout;
use super::list::{ArchivedSegment, SegmentList};
use super::name::SegmentFile;
use super::Archive;

/// How [`Archive::read`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// How many segments to fetch ahead of the consumer (at least 1). Each
    /// costs up to one segment of memory. Default 4.
    pub read_ahead: usize,
    /// The timeline to read; `None` means the only one having segments in
    /// the range (several is an error).
    pub timeline: Option<TimelineId>,
    /// The segment size, if known; otherwise the archive's (learned once).
    pub segment_size: Option<u32>,
    /// Follow this timeline's history as recovery does, when
    /// [`timeline`](ReadOptions::timeline) is not set: each segment is read
    /// from the newest timeline of the history that had begun by its start.
    /// Without a history file of this timeline in the archive (for a
    /// timeline after 1), reading is as if it were not set.
    pub follow: Option<TimelineId>,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            read_ahead: 4,
            timeline: None,
            segment_size: None,
            follow: None,
        }
    }
}

impl ReadOptions {
    /// Sets [`read_ahead`](ReadOptions::read_ahead).
    pub fn with_read_ahead(mut self, read_ahead: usize) -> ReadOptions {
        self.read_ahead = read_ahead;
        self
    }

    /// Sets [`timeline`](ReadOptions::timeline).
    pub fn with_timeline(mut self, timeline: TimelineId) -> ReadOptions {
        self.timeline = Some(timeline);
        self
    }

    /// Sets [`follow`](ReadOptions::follow).
    pub fn following(mut self, timeline: TimelineId) -> ReadOptions {
        self.follow = Some(timeline);
        self
    }

    /// Sets [`segment_size`](ReadOptions::segment_size).
    pub fn with_segment_size(mut self, segment_size: u32) -> ReadOptions {
        self.segment_size = Some(segment_size);
        self
    }
}

/// A segment read from the archive.
#[derive(Clone, PartialEq, Eq)]
pub struct SegmentData {
    /// The segment.
    pub name: SegmentName,
    /// The object it was read from.
    pub file: String,
    /// The LSN of its first byte.
    pub start: Lsn,
    /// It is the unfinished tail (`.partial`): the WAL ends inside it.
    pub partial: bool,
    /// Its content, decompressed: exactly one segment size.
    pub bytes: Vec<u8>,
}

impl SegmentData {
    /// The LSN just after its last byte.
    pub fn end(&self) -> Lsn {
        self.start.advance(self.bytes.len() as u64)
    }
}

impl fmt::Debug for SegmentData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentData")
            .field("file", &self.file)
            .field("start", &self.start)
            .field("partial", &self.partial)
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl Archive {
    /// Reads the segments covering `[from, to)`, in order, as a stream.
    ///
    /// With `to`, every segment of the range must be there: a gap, or a
    /// range reaching past the last segment, is
    /// [`MissingSegment`](ArchiveError::MissingSegment), reported before any
    /// segment is yielded; a `.partial` file can only be the last one. With
    /// `to = None`, the stream ends after the last of the consecutive
    /// segments from `from` (a `.partial` one ends it); the segment holding
    /// `from` must exist. The stream ends after the first error.
    ///
    /// Must be polled within a Tokio runtime (fetches are spawned on it).
    pub fn read(
        &self,
        from: Lsn,
        to: Option<Lsn>,
        options: ReadOptions,
    ) -> impl Stream<Item = Result<SegmentData, ArchiveError>> + Send + 'static {
        let archive = self.clone();
        let read_ahead = options.read_ahead.max(1);
        stream::once(async move {
            let plan = archive.plan_read(from, to, &options).await;
            (archive, plan)
        })
        .flat_map(move |(archive, plan)| match plan {
            Err(e) => stream::iter([Err(e)]).left_stream(),
            Ok(list) => {
                let size = list.segment_size;
                stream::iter(list.segments)
                    .map(move |segment| {
                        let lsn = segment.name.segno.start_lsn(u64::from(size)).max(from);
                        let url = archive.url().to_string();
                        let task = tokio::spawn(fetch(archive.clone(), segment, size, lsn));
                        Fetch { task, url }
                    })
                    .buffered(read_ahead)
                    .right_stream()
            }
        })
        .scan(false, |failed, item| {
            if *failed {
                return std::future::ready(None);
            }
            *failed = item.is_err();
            std::future::ready(Some(item))
        })
    }

    /// The segments [`read`](Archive::read) would fetch for the same
    /// arguments, with the same checks (gaps, timelines), without fetching.
    pub async fn plan_read(
        &self,
        from: Lsn,
        to: Option<Lsn>,
        options: &ReadOptions,
    ) -> Result<SegmentList, ArchiveError> {
        let mut list = self
            .listing(Some(from), options.timeline, options.segment_size)
            .await?;
        let size = u64::from(list.segment_size);
        let last = match to {
            Some(to) if to <= from => {
                list.segments.clear();
                return Ok(list);
            }
            Some(to) => Some(SegmentNo::containing(Lsn(to.0 - 1), size)),
            None => None,
        };
        let in_range = |s: &&ArchivedSegment| last.is_none_or(|l| s.name.segno <= l);
        let path = match (options.timeline, options.follow) {
            (None, Some(target)) => self.timeline_path(&list, target).await?,
            _ => None,
        };
        let timeline = match (&path, options.timeline) {
            (Some(_), _) => TimelineId(1),
            (None, Some(t)) => t,
            (None, None) => {
                let mut timelines: Vec<TimelineId> = list
                    .segments
                    .iter()
                    .filter(in_range)
                    .map(|s| s.name.timeline)
                    .collect();
                timelines.dedup();
                match timelines.as_slice() {
                    [t] => *t,
                    [] => list.timelines().last().copied().unwrap_or(TimelineId(1)),
                    _ => {
                        return Err(ArchiveError::SeveralTimelines {
                            url: self.url().to_string(),
                            timelines,
                            from,
                        })
                    }
                }
            }
        };
        let wal = self.locate().await?.wal;
        let mut plan = Vec::new();
        let mut segno = SegmentNo::containing(from, size);
        while last.is_none_or(|l| segno <= l) {
            let timeline = path.as_ref().map_or(timeline, |p| p.timeline_of(segno));
            let name = SegmentName { timeline, segno };
            let lsn = segno.start_lsn(size).max(from);
            let missing = || ArchiveError::MissingSegment {
                url: self.url().to_string(),
                name: self.relative(&segment_object(&wal, list.layout, name, list.segment_size)),
                lsn,
            };
            match list.get(name) {
                // Only the unfinished tail is there, but later WAL is needed.
                Some(s) if s.partial && last.is_some_and(|l| segno < l) => return Err(missing()),
                Some(s) => {
                    plan.push(s.clone());
                    if s.partial {
                        break;
                    }
                }
                None if last.is_none() && !plan.is_empty() => break,
                None => return Err(missing()),
            }
            segno = segno.next();
        }
        list.segments = plan;
        Ok(list)
    }
}

/// Where a segment's file would be, without compression or checksum, for
/// messages: `wal/<name>`, `<name>`, `wal_005/<name>`, `15-1/<16 digits>/<name>`.
fn segment_object(wal: &Path, layout: Layout, name: SegmentName, segment_size: u32) -> Path {
    let file = name.file_name(u64::from(segment_size));
    match (layout, file.get(..16)) {
        (Layout::PgBackRest, Some(folder)) => wal.clone().join(folder).join(file.as_str()),
        _ => wal.clone().join(file.as_str()),
    }
}

/// A spawned fetch, aborted when dropped (a reader dropped early stops
/// its downloads).
struct Fetch {
    task: JoinHandle<Result<SegmentData, ArchiveError>>,
    url: String,
}

impl Future for Fetch {
    type Output = Result<SegmentData, ArchiveError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        Pin::new(&mut this.task)
            .poll(cx)
            .map(|joined| match joined {
                Ok(result) => result,
                Err(source) => Err(ArchiveError::Task {
                    url: std::mem::take(&mut this.url),
                    source,
                }),
            })
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Downloads one segment file and decompresses it on a blocking thread.
/// `lsn` is the first LSN of the range it holds, for errors.
pub(super) async fn fetch(
    archive: Archive,
    segment: ArchivedSegment,
    segment_size: u32,
    lsn: Lsn,
) -> Result<SegmentData, ArchiveError> {
    let mut file = SegmentFile {
        name: segment.name,
        partial: segment.partial,
        compressed: segment.compressed,
    };
    let mut location = segment.location.clone();
    let mut codec = segment.codec;
    let mut sha1 = segment.sha1;
    let mut got = archive.store().get(&location).await;
    let own = archive.locate().await?.layout == Layout::Walfill;
    if own && segment.partial && matches!(got, Err(object_store::Error::NotFound { .. })) {
        // The tail was completed after the listing: its .partial file is
        // replaced by a complete one (as walfill's archiver does).
        for compressed in [false, true] {
            let complete = SegmentFile {
                partial: false,
                compressed,
                ..file
            };
            let path = archive.wal_object(&complete.file_name(segment_size));
            let attempt = archive.store().get(&path).await;
            if !matches!(attempt, Err(object_store::Error::NotFound { .. })) {
                (file, location, got) = (complete, path, attempt);
                codec = if compressed {
                    codec::Codec::Zstd
                } else {
                    codec::Codec::Plain
                };
                sha1 = None;
                break;
            }
        }
    }
    let stored = match got {
        Ok(got) => got.bytes().await,
        Err(e) => Err(e),
    };
    let stored = stored.map_err(|e| match e {
        object_store::Error::NotFound { .. } => ArchiveError::MissingSegment {
            url: archive.url().to_string(),
            name: archive.relative(&location),
            lsn,
        },
        e => archive.store_error("get", &location, e),
    })?;
    let bytes = tokio::task::spawn_blocking(move || {
        codec::segment_bytes(stored, codec, sha1.as_ref(), segment_size)
    })
    .await
    .map_err(|e| archive.task_error(e))?
    .map_err(|damage| archive.corrupt(&archive.relative(&location), damage))?;
    Ok(SegmentData {
        name: file.name,
        file: archive.object_url(&location),
        start: file.name.segno.start_lsn(u64::from(segment_size)),
        partial: file.partial,
        bytes,
    })
}
