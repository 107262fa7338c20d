//! Where to start reading for `decode --from LSN`, found in the archive.
//!
//! A logical slot prints every transaction that commits at or after its
//! consistent point, whole, although such a transaction may have begun
//! before that point: PostgreSQL's snapshot builder started reading at the
//! slot's restart point, a running-transactions record, and became
//! consistent only once every transaction running there had ended. The
//! decoder works the same way: reading from a running-transactions record
//! `R`, it sees whole every transaction with an xid from `R`'s next xid on.
//! So a start for `--from X` is a running-transactions record at or before
//! `X` all of whose running transactions ended before `X`. This module
//! scans back through the archive for the latest such record, in windows
//! that double from the segment holding `X`, and fails, naming what it
//! lacks, when the archive does not reach back to one.

use std::collections::HashMap;

use walfill_core::xid::precedes as xid_precedes;
use walfill_replay::archive::{Archive, ReadOptions, SegmentData};
use walfill_replay::decode::ReplayError;
use walfill_replay::wal::{interpret, Poll, RunningXacts, WalDecoder, WalEvent};
use walfill_replay::{Lsn, SegmentNo};

use crate::error::{Error, Result};

/// Where decoding for `--from` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// The running-transactions record to read from.
    pub(crate) restart: Lsn,
    /// The first record at or after `--from` (equal to it when `--from` is
    /// the start of a record).
    pub(crate) first_record: Lsn,
}

/// What one scan of `[scan_from, from)` found.
#[derive(Default)]
struct Scanned {
    /// Running-transactions records, in WAL order.
    running: Vec<(Lsn, RunningXacts)>,
    /// Where each top-level transaction ended (commit or abort).
    ended: HashMap<u32, Lsn>,
    /// Shutdown checkpoints: nothing before their next xid runs after them.
    shutdowns: Vec<(Lsn, u32)>,
    /// The first record at or after `from`, when the scan reached it.
    first_record: Option<Lsn>,
}

impl Scanned {
    /// Whether every transaction running at the `i`-th running-transactions
    /// record ended before `from`.
    fn usable(&self, i: usize, from: Lsn) -> bool {
        let (at, r) = &self.running[i];
        r.xids.iter().all(|&xid| {
            self.ended
                .get(&xid)
                .is_some_and(|&end| end > *at && end < from)
                || self.running[i + 1..]
                    .iter()
                    .any(|(lsn, later)| *lsn < from && xid_precedes(xid, later.oldest_running_xid))
                || self
                    .shutdowns
                    .iter()
                    .any(|(lsn, next)| *lsn > *at && *lsn < from && xid_precedes(xid, *next))
        })
    }
}

/// Finds where to read from so that decoding from `from` prints what a slot
/// consistent at `from` prints. Runs on a blocking thread.
pub(crate) fn find(
    archive: &Archive,
    runtime: &tokio::runtime::Handle,
    from: Lsn,
) -> Result<Start> {
    let list = runtime.block_on(archive.segments(None))?;
    let size = u64::from(list.segment_size);
    let target = SegmentNo::containing(from, size);
    let mut names: Vec<SegmentNo> = list.segments.iter().map(|s| s.name.segno).collect();
    names.sort();
    names.dedup();
    if !names.contains(&target) {
        return Err(Error::history(format!(
            "the archive holds no segment with WAL at {from} (it holds {})",
            describe_range(&names, size)
        )));
    }
    // The contiguous run of segments that ends with the one holding `from`.
    let mut oldest = target;
    while oldest.0 > 0 && names.contains(&SegmentNo(oldest.0 - 1)) {
        oldest = SegmentNo(oldest.0 - 1);
    }
    let mut window = 1u64;
    loop {
        let first = SegmentNo(target.0.saturating_sub(window - 1).max(oldest.0));
        let scan_from = first.start_lsn(size);
        let scanned = scan(archive, runtime, scan_from, from, list.segment_size)?;
        let first_record = scanned.first_record.unwrap_or(from);
        if let Some(i) = (0..scanned.running.len())
            .rev()
            .find(|&i| scanned.running[i].0 <= from && scanned.usable(i, from))
        {
            return Ok(Start {
                restart: scanned.running[i].0,
                first_record,
            });
        }
        if first == oldest {
            let running: Vec<String> = scanned
                .running
                .first()
                .map(|(_, r)| r.xids.iter().map(u32::to_string).collect())
                .unwrap_or_default();
            return Err(Error::history(format!(
                "cannot decode from {from}: the archive's contiguous WAL before it starts at \
                 {scan_from}, and holds no point from which every transaction in progress at \
                 {from} is seen whole{}; pass an earlier --from, or archive older WAL",
                if running.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (transactions {} were already running at its first such point)",
                        running.join(", ")
                    )
                }
            )));
        }
        window *= 4;
    }
}

/// Reads the records of `[scan_from, from)` and the first at or after
/// `from`, keeping what [`Scanned`] needs.
fn scan(
    archive: &Archive,
    runtime: &tokio::runtime::Handle,
    scan_from: Lsn,
    from: Lsn,
    segment_size: u32,
) -> Result<Scanned> {
    // On through the segments after the one holding `from` (the first
    // record at or after it may begin in the next one); reading stops at
    // that record, and the read-ahead is dropped with the receiver. When
    // the archive ends first, `from` itself is used.
    let segments = archive.read_blocking(runtime, scan_from, None, ReadOptions::default());
    let mut wal = WalDecoder::new(scan_from, segment_size);
    let mut found = Scanned::default();
    for segment in segments {
        let SegmentData { bytes, file, .. } = segment?;
        wal.feed_owned(bytes);
        loop {
            match wal.poll() {
                Ok(Poll::Record(record)) => {
                    if record.lsn >= from {
                        found.first_record = Some(record.lsn);
                        return Ok(found);
                    }
                    let Some(major) = wal.pg_major() else {
                        return Err(Error::Internal(format!(
                            "{file}: a WAL record read from a page without a version magic"
                        )));
                    };
                    let lsn = record.lsn;
                    match interpret(&record, major) {
                        Ok(WalEvent::RunningXacts(r)) => found.running.push((lsn, r)),
                        Ok(WalEvent::Commit(c)) => {
                            found.ended.insert(c.xid, lsn);
                        }
                        Ok(WalEvent::Abort(a)) => {
                            found.ended.insert(a.xid, lsn);
                        }
                        Ok(WalEvent::CheckpointShutdown(c)) => {
                            found.shutdowns.push((lsn, c.next_full_xid as u32));
                        }
                        Ok(_) => {}
                        Err(e) => {
                            return Err(ReplayError::from(e.with_segment(file.clone())).into())
                        }
                    }
                    wal.recycle(record);
                }
                Ok(Poll::NeedMore) => break,
                Ok(Poll::EndOfWal { .. }) => return Ok(found),
                Err(e) => return Err(ReplayError::from(e.with_segment(file)).into()),
            }
        }
    }
    Ok(found)
}

fn describe_range(names: &[SegmentNo], size: u64) -> String {
    match (names.first(), names.last()) {
        (Some(a), Some(b)) => format!(
            "WAL from {} to {}",
            a.start_lsn(size),
            SegmentNo(b.0 + 1).start_lsn(size)
        ),
        _ => "no WAL".into(),
    }
}
