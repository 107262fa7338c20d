//! Segment summaries in a store of walfill's layout (`summary/<segment>`),
//! and reading a range of WAL with them: only the segments whose summary
//! cannot stand in for them are fetched.

use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::feed::{PlannedSegment, SegmentSource};
use crate::lsn::{Lsn, SegmentName, SegmentNo, TimelineId};
use crate::summary::{touch, ObjectId, SegmentSummary, SummaryError, SummaryEvent, SUMMARY_DIR};
use crate::wal::RmgrId;

use super::error::ArchiveError;
use super::list::{ArchivedSegment, SegmentList};
use super::read::{fetch, ReadOptions, SegmentData};
use super::Archive;

/// How many summaries are fetched at once.
const SUMMARY_FETCHES: usize = 16;

impl Archive {
    fn summary_object(&self, name: SegmentName, segment_size: u32) -> Path {
        self.prefix()
            .clone()
            .join(SUMMARY_DIR)
            .join(name.file_name(u64::from(segment_size)))
    }

    /// Stores `summary` (this archive must be of walfill's layout).
    pub async fn put_summary(
        &self,
        summary: &SegmentSummary,
        segment_size: u32,
    ) -> Result<(), ArchiveError> {
        self.check_writable().await?;
        let name = SegmentName {
            timeline: TimelineId(summary.timeline),
            segno: SegmentNo::containing(summary.start, u64::from(segment_size)),
        };
        let location = self.summary_object(name, segment_size);
        self.store()
            .put(&location, PutPayload::from(summary.encode()))
            .await
            .map_err(|e| self.store_error("put", &location, e))?;
        Ok(())
    }

    /// Deletes the summaries (in this store) of segments before `oldest`,
    /// the archive's oldest: WAL its tool's retention expired. Returns how
    /// many.
    pub async fn retire_summaries(
        &self,
        oldest: SegmentNo,
        segment_size: u32,
    ) -> Result<usize, ArchiveError> {
        let dir = self.prefix().clone().join(SUMMARY_DIR);
        let mut listed = self.store().list(Some(&dir));
        let mut old = Vec::new();
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(|e| self.store_error("list", &dir, e))?;
            let name = meta.location.filename().unwrap_or_default();
            if SegmentName::parse(name, u64::from(segment_size)).is_some_and(|n| n.segno < oldest) {
                old.push(meta.location);
            }
        }
        for location in &old {
            match self.store().delete(location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.store_error("delete", location, e)),
            }
        }
        Ok(old.len())
    }

    /// The stored summary of segment `name`: `None` without one; an error
    /// inside when it cannot be used (damaged, changed, another format).
    pub async fn load_summary(
        &self,
        name: SegmentName,
        segment_size: u32,
    ) -> Result<Option<Result<SegmentSummary, SummaryError>>, ArchiveError> {
        let location = self.summary_object(name, segment_size);
        let got = match self.store().get(&location).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        match got {
            Ok(bytes) => Ok(Some(SegmentSummary::decode(&bytes))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_error("get", &location, e)),
        }
    }

    /// The segments of `[from, to)` as [`plan_read`](Archive::plan_read)
    /// finds them, each with its summary from `store`.
    async fn with_summaries(
        &self,
        from: Lsn,
        to: Option<Lsn>,
        options: &ReadOptions,
        store: Option<&Archive>,
        rejected: &mut (dyn FnMut(String, SummaryError) + Send),
    ) -> Result<(SegmentList, Vec<PlannedSegment>), ArchiveError> {
        let list = self.plan_read(from, to, options).await?;
        let size = list.segment_size;
        let loaded: Vec<_> = match store {
            Some(store) => {
                let names: Vec<(SegmentName, bool)> =
                    list.segments.iter().map(|s| (s.name, s.partial)).collect();
                let store = store.clone();
                stream::iter(names.into_iter().map(move |(name, partial)| {
                    let store = store.clone();
                    async move {
                        match partial {
                            true => Ok(None),
                            false => store.load_summary(name, size).await,
                        }
                    }
                }))
                .buffered(SUMMARY_FETCHES)
                .collect()
                .await
            }
            None => list.segments.iter().map(|_| Ok(None)).collect(),
        };
        let mut plan = Vec::with_capacity(list.segments.len());
        for (segment, summary) in list.segments.iter().zip(loaded) {
            let summary = match summary? {
                Some(Ok(s)) => Some(Arc::new(s)),
                Some(Err(e)) => {
                    rejected(segment.file.clone(), e);
                    None
                }
                None => None,
            };
            plan.push(PlannedSegment {
                start: segment.name.segno.start_lsn(u64::from(size)),
                object: ObjectId {
                    name: segment.file.clone(),
                    size: segment.size,
                },
                partial: segment.partial,
                summary,
            });
        }
        Ok((list, plan))
    }

    /// How much of the WAL from `from` to the archive's end a replay of a
    /// table of `database` would take from summaries in `store` (by their
    /// content alone, before decoding: what the decoder accepts depends on
    /// where it is).
    pub async fn survey_summaries(
        &self,
        store: &Archive,
        from: Lsn,
        options: ReadOptions,
        database: u32,
    ) -> Result<Survey, ArchiveError> {
        let (list, plan) = self
            .with_summaries(from, None, &options, Some(store), &mut |_, _| {})
            .await?;
        let size = u64::from(list.segment_size);
        let mut survey = Survey::default();
        for p in &plan {
            survey.segments += 1;
            let skippable = p
                .summary
                .as_deref()
                .is_some_and(|s| s.start == p.start && !may_matter(s, database));
            if skippable {
                survey.summarized += 1;
                survey.summarized_bytes += (p.start.advance(size))
                    .checked_sub(from.max(p.start))
                    .unwrap_or(0);
            }
        }
        Ok(survey)
    }

    /// Plans a read of `[from, to)` as [`read`](Archive::read) does, with
    /// each segment's summary from `summaries`' store (unusable ones are
    /// handed to `rejected` with the reason, and the segment is read
    /// whole), then starts fetching, ahead of the decoder, the segments
    /// whose summary shows a record of `summaries`' database that may
    /// matter, and the segment after each of them.
    pub async fn read_planned(
        &self,
        runtime: &tokio::runtime::Handle,
        from: Lsn,
        to: Option<Lsn>,
        options: ReadOptions,
        summaries: Option<(&Archive, u32)>,
        rejected: &mut (dyn FnMut(String, SummaryError) + Send),
    ) -> Result<PlannedRead, ArchiveError> {
        let (list, plan) = self
            .with_summaries(from, to, &options, summaries.map(|(s, _)| s), rejected)
            .await?;
        let size = list.segment_size;
        let database = summaries.map_or(0, |(_, db)| db);
        // What to fetch ahead: what may be read whole.
        let mut ahead = vec![false; plan.len()];
        for (i, p) in plan.iter().enumerate() {
            if p.summary.as_deref().is_none_or(|s| may_matter(s, database)) {
                ahead[i] = true;
                if let Some(next) = ahead.get_mut(i + 1) {
                    *next = true;
                }
            }
        }
        let wanted: Vec<(usize, ArchivedSegment)> = list
            .segments
            .iter()
            .enumerate()
            .filter(|(i, _)| ahead[*i])
            .map(|(i, s)| (i, s.clone()))
            .collect();
        let (tx, rx) = mpsc::channel(1);
        let archive = self.clone();
        let read_ahead = options.read_ahead.max(2) - 1;
        let task = runtime.spawn(async move {
            let fetches = stream::iter(wanted).map(|(i, segment)| {
                let archive = archive.clone();
                let lsn = segment.name.segno.start_lsn(u64::from(size)).max(from);
                async move {
                    let task = tokio::spawn(fetch(archive, segment, size, lsn));
                    (i, task)
                }
            });
            let mut fetches = std::pin::pin!(fetches.buffered(read_ahead));
            while let Ok(permit) = tx.reserve().await {
                match fetches.next().await {
                    Some((i, task)) => {
                        let result = match task.await {
                            Ok(result) => result,
                            Err(e) => Err(archive.task_error(e)),
                        };
                        permit.send((i, result));
                    }
                    None => break,
                }
            }
        });
        Ok(PlannedRead {
            archive: self.clone(),
            runtime: runtime.clone(),
            from,
            segment_size: size,
            segments: list.segments,
            plan,
            ahead: rx,
            ahead_of: ahead,
            task,
        })
    }
}

impl Archive {
    /// Summarizes the segment before `name`, which was just stored with
    /// `bytes`, into `store`, when both are complete segments of the same
    /// timeline in this archive; `previous` is that segment's content, if
    /// at hand (otherwise it is read). `false` when there is nothing to
    /// summarize (no such segment, or one that cannot be summarized alone).
    pub async fn summarize_before(
        &self,
        store: &Archive,
        name: SegmentName,
        bytes: bytes::Bytes,
        previous: Option<bytes::Bytes>,
    ) -> Result<bool, ArchiveError> {
        let size = self.segment_size().await?;
        let Some(before) = name.segno.0.checked_sub(1).map(SegmentNo) else {
            return Ok(false);
        };
        let before = SegmentName {
            timeline: name.timeline,
            segno: before,
        };
        let start = before.segno.start_lsn(u64::from(size));
        let list = self.segments_from(start, Some(name.timeline)).await?;
        let (Some(first), Some(second)) = (list.get(before), list.get(name)) else {
            return Ok(false);
        };
        if first.partial || second.partial {
            return Ok(false);
        }
        let previous = match previous {
            Some(bytes) => bytes,
            None => fetch(self.clone(), first.clone(), size, start)
                .await?
                .bytes
                .into(),
        };
        let object = |s: &ArchivedSegment| ObjectId {
            name: s.file.clone(),
            size: s.size,
        };
        let (first, second) = (object(first), object(second));
        let summary = tokio::task::spawn_blocking(move || {
            crate::summary::summarize(&previous, start, first, Some((&bytes, second)))
        })
        .await
        .map_err(|e| self.task_error(e))?;
        match summary {
            Some(summary) => {
                store.put_summary(&summary, size).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// What [`Archive::survey_summaries`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Survey {
    /// Segments in the range.
    pub segments: u64,
    /// Those whose summary shows nothing of the database that may matter.
    pub summarized: u64,
    /// Bytes of WAL in those.
    pub summarized_bytes: u64,
}

/// Whether a summary shows a record of `database` that a decoding of some
/// of its tables could need: the segment is fetched ahead.
fn may_matter(summary: &SegmentSummary, database: u32) -> bool {
    summary.events.iter().any(|e| match e {
        SummaryEvent::Kept { db, rmid, .. } => {
            !matches!(RmgrId(*rmid), RmgrId::XACT | RmgrId::STANDBY | RmgrId::XLOG)
                && (*db == database || *db == u32::MAX)
        }
        SummaryEvent::Touch { file, kind, .. } => {
            file.db == database && kind & (touch::LOOKUP | touch::CONFIRM | touch::TOAST) != 0
        }
        SummaryEvent::Link { .. } => false,
    })
}

/// A planned read ([`Archive::read_planned`]) for a synchronous decoder.
/// Dropping it stops the fetches.
pub struct PlannedRead {
    archive: Archive,
    runtime: tokio::runtime::Handle,
    from: Lsn,
    segment_size: u32,
    segments: Vec<ArchivedSegment>,
    plan: Vec<PlannedSegment>,
    ahead: mpsc::Receiver<(usize, Result<SegmentData, ArchiveError>)>,
    /// Which segments are fetched ahead.
    ahead_of: Vec<bool>,
    task: JoinHandle<()>,
}

impl PlannedRead {
    /// The segments of the range, with their summaries.
    pub fn plan(&self) -> &[PlannedSegment] {
        &self.plan
    }

    /// The segment size.
    pub fn segment_size(&self) -> u32 {
        self.segment_size
    }
}

impl SegmentSource for PlannedRead {
    fn planned(&mut self, i: usize) -> Option<Result<PlannedSegment, ArchiveError>> {
        self.plan.get(i).cloned().map(Ok)
    }

    /// Blocks the calling thread (never call it from async code).
    fn fetch(&mut self, i: usize) -> Result<SegmentData, ArchiveError> {
        if self.ahead_of.get(i).copied().unwrap_or(false) {
            // Fetched ahead: skip those the decoder took from their summary.
            while let Some((at, got)) = self.ahead.blocking_recv() {
                if at == i {
                    return got;
                }
                if at > i {
                    break;
                }
            }
        }
        let segment = self.segments[i].clone();
        let lsn = segment
            .name
            .segno
            .start_lsn(u64::from(self.segment_size))
            .max(self.from);
        let archive = self.archive.clone();
        self.runtime
            .block_on(fetch(archive, segment, self.segment_size, lsn))
    }
}

impl Drop for PlannedRead {
    fn drop(&mut self) {
        self.task.abort();
    }
}
