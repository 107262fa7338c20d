//! Feeding archived segments through the WAL decoder into a [`Decoder`],
//! each read whole or, where its summary can stand in for it, from its
//! summary alone (see [`crate::summary`]).

use std::sync::Arc;

use super::{ArchiveError, SegmentData};
use crate::decode::{Decoder, ReplayError, Sink};
use crate::lsn::Lsn;
use crate::summary::{ObjectId, SegmentSummary, SummaryBuilder};
use crate::wal::{PgMajor, Poll, WalDecoder};

/// How far a feed got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedOutcome {
    /// Bytes of WAL decoded.
    pub wal_bytes: u64,
    /// Segments read whole.
    pub segments: u64,
    /// Segments taken from their summary alone.
    pub summarized: u64,
    /// Where the first segment read starts.
    pub first_segment: Option<Lsn>,
    /// The LSN just past the last record decoded.
    pub end: Lsn,
    /// Decoding stopped at a record at or after `to` (rather than at the
    /// end of the WAL): every record before `to` was decoded.
    pub reached_to: bool,
}

/// A segment to decode, known before it is read.
#[derive(Clone, Debug)]
pub struct PlannedSegment {
    /// Its first byte.
    pub start: Lsn,
    /// The archived object holding it.
    pub object: ObjectId,
    /// It is the unfinished tail (`.partial`).
    pub partial: bool,
    /// Its summary, when one was found (not yet checked against the
    /// objects).
    pub summary: Option<Arc<SegmentSummary>>,
}

/// Segments in order, each fetched only when it is read whole.
pub trait SegmentSource {
    /// Segment `i` of the range (counting from 0), `None` past the end.
    fn planned(&mut self, i: usize) -> Option<Result<PlannedSegment, ArchiveError>>;
    /// Segment `i`'s content; called at most once per segment, in order.
    fn fetch(&mut self, i: usize) -> Result<SegmentData, ArchiveError>;
}

/// Decodes the records of `segments` (consecutive segments, the first one
/// holding `restart`) from `restart` up to (not including) the first record
/// at or after `to`, or to the end of the WAL.
///
/// WAL that ends inside a complete (not `.partial`) segment is damage and an
/// error, as is any corrupt record; both name the LSN and the file.
pub fn decode_segments<I>(
    segments: I,
    restart: Lsn,
    to: Option<Lsn>,
    decoder: &mut Decoder,
    sink: &mut dyn Sink,
) -> Result<FeedOutcome, ReplayError>
where
    I: IntoIterator<Item = Result<SegmentData, ArchiveError>>,
{
    let mut source = Fetched {
        segments: segments.into_iter(),
        current: None,
    };
    decode_planned(&mut source, restart, to, decoder, sink, &mut |_| {})
}

/// Like [`decode_segments`], reading each segment whose summary the
/// decoder accepts from the summary alone ([`Decoder::summary_verdict`]),
/// and handing `built` the summary of every complete segment read whole
/// that had none (or one of another object).
pub fn decode_planned(
    segments: &mut dyn SegmentSource,
    restart: Lsn,
    to: Option<Lsn>,
    decoder: &mut Decoder,
    sink: &mut dyn Sink,
    built: &mut dyn FnMut(SegmentSummary),
) -> Result<FeedOutcome, ReplayError> {
    let mut wal: Option<WalDecoder> = None;
    let mut checked_page = None;
    // The segment being summarized as its records are read.
    let mut building: Option<(usize, SummaryBuilder)> = None;
    let mut outcome = FeedOutcome {
        wal_bytes: 0,
        segments: 0,
        summarized: 0,
        first_segment: None,
        end: restart,
        reached_to: false,
    };
    let mut i = 0;
    while let Some(planned) = segments.planned(i) {
        let planned = planned?;
        let carried = wal.is_some();
        if !carried && restart <= planned.start {
            if let Some((summary, major)) = usable(segments, i, &planned, decoder)? {
                if take_summary(&summary, major, &planned, to, decoder, sink, &mut outcome)? {
                    return Ok(outcome);
                }
                i += 1;
                continue;
            }
        }
        let segment = segments.fetch(i)?;
        let wal_decoder = wal.get_or_insert_with(|| {
            WalDecoder::new(restart.max(segment.start), segment.bytes.len() as u32)
        });
        let skip = wal_decoder
            .input_start()
            .checked_sub(segment.start)
            .unwrap_or(0) as usize;
        outcome.wal_bytes += (segment.bytes.len() - skip.min(segment.bytes.len())) as u64;
        outcome.segments += 1;
        let file = segment.file.clone();
        outcome.first_segment.get_or_insert(segment.start);
        let partial = segment.partial;
        let segment_start = segment.start;
        let segment_end = segment.end();
        let mut bytes = segment.bytes;
        // Every segment starts with a long page header naming its cluster.
        if let Some(identity) = decoder.identity() {
            if let Ok(header) = crate::wal::PageHeader::parse(&bytes) {
                if let Some(long) = header.long {
                    let lsn = segment_start.max(restart);
                    if let Some(reason) =
                        identity.refuse(lsn, long.system_id, identity.timeline_at(lsn))
                    {
                        return Err(ReplayError::Foreign { file, reason });
                    }
                }
            }
        }
        if skip > 0 {
            bytes.drain(..skip.min(bytes.len()));
        }
        wal_decoder.feed_owned(bytes);
        // Whether the first record starting in this segment was met.
        let mut met = false;
        loop {
            let wal_decoder = wal.as_mut().expect("decoding");
            match wal_decoder.poll() {
                Ok(Poll::Record(record)) => {
                    if to.is_some_and(|to| record.lsn >= to) {
                        outcome.reached_to = true;
                        return Ok(outcome);
                    }
                    let major = wal_decoder.pg_major().ok_or_else(|| ReplayError::Damaged {
                        lsn: record.lsn,
                        file: file.clone(),
                        reason: "a WAL page without a version magic".into(),
                    })?;
                    if !met && record.lsn >= segment_start {
                        met = true;
                        if let Some((j, builder)) = building.take() {
                            if j + 1 == i {
                                let next = (builder.last_end() > segment_start)
                                    .then(|| planned.object.clone());
                                built(builder.finish(next));
                            }
                        }
                        // The previous segment's last record is complete:
                        // this one's summary may stand in for the rest.
                        if carried {
                            if let Some((summary, major)) = usable(segments, i, &planned, decoder)?
                            {
                                wal = None;
                                if take_summary(
                                    &summary,
                                    major,
                                    &planned,
                                    to,
                                    decoder,
                                    sink,
                                    &mut outcome,
                                )? {
                                    return Ok(outcome);
                                }
                                break;
                            }
                        }
                        // (A summary of another object of this segment, a
                        // file stored again, is replaced.)
                        let stale = planned
                            .summary
                            .as_ref()
                            .is_none_or(|s| s.object != planned.object);
                        if stale && !partial && restart <= segment_start {
                            building = Some((
                                i,
                                SummaryBuilder::new(
                                    planned.object.clone(),
                                    segment_start,
                                    wal_decoder.system_id().unwrap_or(0),
                                    wal_decoder.timeline().unwrap_or(0),
                                    major,
                                ),
                            ));
                        }
                    }
                    if let Some((_, builder)) = building.as_mut() {
                        builder.add(&record, major);
                    }
                    // Whose WAL it is, checked once per page.
                    // (The system identifier is known from the first segment
                    // start read.)
                    let page = record.lsn.0 / 8192;
                    if let Some(identity) =
                        decoder.identity().filter(|_| checked_page != Some(page))
                    {
                        checked_page = Some(page);
                        let refused = identity.refuse(
                            record.lsn,
                            wal_decoder.system_id().unwrap_or(identity.system_id),
                            wal_decoder
                                .timeline()
                                .unwrap_or(identity.timeline_at(record.lsn)),
                        );
                        if let Some(reason) = refused {
                            return Err(ReplayError::Foreign { file, reason });
                        }
                    }
                    decoder
                        .process(&record, major, sink)
                        .map_err(|e| e.in_file(&file))?;
                    outcome.end = record.end_lsn;
                    wal_decoder.recycle(record);
                }
                Ok(Poll::NeedMore) => break,
                Ok(Poll::EndOfWal { lsn, reason }) => {
                    if !partial && lsn < segment_end {
                        return Err(ReplayError::Damaged {
                            lsn,
                            file,
                            reason: format!(
                                "the WAL ends inside a complete segment ({reason:?}): the file \
                                 is damaged"
                            ),
                        });
                    }
                    return Ok(outcome);
                }
                Err(e) => return Err(ReplayError::Wal(e.with_segment(file))),
            }
        }
        i += 1;
    }
    Ok(outcome)
}

/// Segment `i`'s summary with the version its pages name, when it is of
/// the segment's object (and of the next one, when its last record
/// continues there) and the decoder can take it in place of the segment.
fn usable(
    segments: &mut dyn SegmentSource,
    i: usize,
    planned: &PlannedSegment,
    decoder: &Decoder,
) -> Result<Option<(Arc<SegmentSummary>, PgMajor)>, ReplayError> {
    let Some(summary) = planned
        .summary
        .as_ref()
        .filter(|s| s.start == planned.start)
    else {
        return Ok(None);
    };
    let Some(major) = PgMajor::from_magic(summary.magic) else {
        return Ok(None);
    };
    if planned.partial {
        return Ok(None);
    }
    let next = match &summary.next {
        Some(_) => match segments.planned(i + 1) {
            Some(next) => Some(next?.object),
            None => return Ok(None),
        },
        None => None,
    };
    if !summary.matches(&planned.object, next.as_ref()) {
        return Ok(None);
    }
    if decoder.summary_verdict(summary).is_some() {
        return Ok(None);
    }
    Ok(Some((summary.clone(), major)))
}

/// Feeds `summary` in place of its segment; `true` when it reached `to`.
fn take_summary(
    summary: &SegmentSummary,
    major: PgMajor,
    planned: &PlannedSegment,
    to: Option<Lsn>,
    decoder: &mut Decoder,
    sink: &mut dyn Sink,
    outcome: &mut FeedOutcome,
) -> Result<bool, ReplayError> {
    if let Some(identity) = decoder.identity() {
        let lsn = planned.start;
        if let Some(reason) = identity.refuse(lsn, summary.system_id, summary.timeline) {
            return Err(ReplayError::Foreign {
                file: planned.object.name.clone(),
                reason,
            });
        }
    }
    outcome.summarized += 1;
    outcome.first_segment.get_or_insert(planned.start);
    let (end, stopped) = decoder
        .apply_summary(summary, major, to, sink)
        .map_err(|e| e.in_file(&planned.object.name))?;
    outcome.end = outcome.end.max(end);
    outcome.reached_to = stopped;
    Ok(stopped)
}

/// Segments already being fetched in order: no summaries.
struct Fetched<I> {
    segments: I,
    current: Option<(usize, SegmentData)>,
}

impl<I> SegmentSource for Fetched<I>
where
    I: Iterator<Item = Result<SegmentData, ArchiveError>>,
{
    fn planned(&mut self, i: usize) -> Option<Result<PlannedSegment, ArchiveError>> {
        if self.current.as_ref().is_none_or(|(at, _)| *at != i) {
            match self.segments.next()? {
                Ok(segment) => self.current = Some((i, segment)),
                Err(e) => return Some(Err(e)),
            }
        }
        let (_, segment) = self.current.as_ref()?;
        Some(Ok(PlannedSegment {
            start: segment.start,
            object: ObjectId {
                name: segment.file.clone(),
                size: 0,
            },
            partial: segment.partial,
            summary: None,
        }))
    }

    fn fetch(&mut self, i: usize) -> Result<SegmentData, ArchiveError> {
        match self.current.take() {
            Some((at, segment)) if at == i => Ok(segment),
            _ => unreachable!("segments are fetched in order, once each"),
        }
    }
}
