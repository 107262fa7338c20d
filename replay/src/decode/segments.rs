//! Feeding archived segments through the WAL decoder into a [`Decoder`].

use crate::archive::{ArchiveError, SegmentData};
use crate::lsn::Lsn;
use crate::wal::{Poll, WalDecoder};

use super::error::ReplayError;
use super::{Decoder, Sink};

/// How far a feed got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedOutcome {
    /// Bytes of WAL decoded.
    pub wal_bytes: u64,
    /// Segments read.
    pub segments: u64,
    /// Where the first segment read starts.
    pub first_segment: Option<Lsn>,
    /// The LSN just past the last record decoded.
    pub end: Lsn,
    /// Decoding stopped at a record at or after `to` (rather than at the
    /// end of the WAL): every record before `to` was decoded.
    pub reached_to: bool,
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
    let mut wal: Option<WalDecoder> = None;
    let mut checked_page = None;
    let mut outcome = FeedOutcome {
        wal_bytes: 0,
        segments: 0,
        first_segment: None,
        end: restart,
        reached_to: false,
    };
    for segment in segments {
        let segment = segment?;
        let wal = wal.get_or_insert_with(|| WalDecoder::new(restart, segment.bytes.len() as u32));
        let skip = wal.input_start().checked_sub(segment.start).unwrap_or(0) as usize;
        outcome.wal_bytes += (segment.bytes.len() - skip.min(segment.bytes.len())) as u64;
        outcome.segments += 1;
        let file = segment.file.clone();
        outcome.first_segment.get_or_insert(segment.start);
        let partial = segment.partial;
        let segment_end = segment.end();
        let mut bytes = segment.bytes;
        // Every segment starts with a long page header naming its cluster.
        if let Some(identity) = decoder.identity() {
            if let Ok(header) = crate::wal::PageHeader::parse(&bytes) {
                if let Some(long) = header.long {
                    let lsn = segment.start.max(restart);
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
        wal.feed_owned(bytes);
        loop {
            match wal.poll() {
                Ok(Poll::Record(record)) => {
                    if to.is_some_and(|to| record.lsn >= to) {
                        outcome.reached_to = true;
                        return Ok(outcome);
                    }
                    let major = wal.pg_major().ok_or_else(|| ReplayError::Damaged {
                        lsn: record.lsn,
                        file: file.clone(),
                        reason: "a WAL page without a version magic".into(),
                    })?;
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
                            wal.system_id().unwrap_or(identity.system_id),
                            wal.timeline().unwrap_or(identity.timeline_at(record.lsn)),
                        );
                        if let Some(reason) = refused {
                            return Err(ReplayError::Foreign { file, reason });
                        }
                    }
                    decoder
                        .process(&record, major, sink)
                        .map_err(|e| e.in_file(&file))?;
                    outcome.end = record.end_lsn;
                    wal.recycle(record);
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
    }
    Ok(outcome)
}
