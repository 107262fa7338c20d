//! Making a summary from a segment's records, as decoding reads them.

use rustc_hash::FxHashSet;

use crate::lsn::Lsn;
use crate::wal::{interpret, PgMajor, Record, RelFileLocator, RmgrId, WalEvent};

use super::{touch, ObjectId, SegmentSummary, SummaryEvent};

/// `XLOG_FPI_FOR_HINT` and `XLOG_FPI`: page images, which no decoding reads.
const XLOG_FPI_FOR_HINT: u8 = 0xA0;
const XLOG_FPI: u8 = 0xB0;
/// Heap opcodes.
const XLOG_HEAP_TRUNCATE: u8 = 0x30;
const XLOG_HEAP_INPLACE: u8 = 0x70;

/// Gathers the summary of one segment from the records starting in it.
#[derive(Debug)]
pub struct SummaryBuilder {
    summary: SegmentSummary,
    /// Touches since the last kept record (each is listed once there).
    seen: FxHashSet<(u32, RelFileLocator, u8)>,
}

impl SummaryBuilder {
    /// A summary of the segment starting at `start`, read from `object`,
    /// whose first page names `system_id`, `timeline` and `major`.
    pub fn new(
        object: ObjectId,
        start: Lsn,
        system_id: u64,
        timeline: u32,
        major: PgMajor,
    ) -> SummaryBuilder {
        SummaryBuilder {
            summary: SegmentSummary {
                object,
                next: None,
                system_id,
                timeline,
                magic: major.magic(),
                start,
                last_end: start,
                events: Vec::new(),
            },
            seen: FxHashSet::default(),
        }
    }

    /// Adds the next record starting in the segment.
    pub fn add(&mut self, record: &Record, major: PgMajor) {
        self.summary.last_end = record.end_lsn;
        let lsn = record.lsn;
        if let Some(db) = kept_db(record) {
            self.seen.clear();
            self.summary.events.push(SummaryEvent::Kept {
                lsn,
                end: record.end_lsn,
                db,
                rmid: record.rmid.0,
                bytes: record.bytes().to_vec(),
            });
            return;
        }
        if let Some(top) = record.toplevel_xid {
            self.summary.events.push(SummaryEvent::Link {
                lsn,
                sub: record.xid,
                top,
            });
        }
        let Some((file, kind)) = touch_of(record, major) else {
            return;
        };
        if self.seen.insert((record.xid, file, kind)) {
            self.summary.events.push(SummaryEvent::Touch {
                lsn,
                xid: record.xid,
                file,
                kind,
            });
        }
    }

    /// The summary, once the next record starting after the segment was
    /// read: `next` is the object of the following segment when the last
    /// record continued into it.
    pub fn finish(mut self, next: Option<ObjectId>) -> SegmentSummary {
        self.summary.next = next;
        self.summary
    }

    /// Where the record after the last one added starts.
    pub fn last_end(&self) -> Lsn {
        self.summary.last_end
    }
}

/// Whether `record` is kept whole, and the database it concerns.
fn kept_db(record: &Record) -> Option<u32> {
    let at = |offset: usize| {
        record
            .main_data()
            .get(offset..offset + 4)
            .map_or(u32::MAX, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let info = record.rmgr_info();
    match record.rmid {
        RmgrId::XACT | RmgrId::STANDBY => Some(0),
        RmgrId::XLOG if matches!(info & 0xF0, XLOG_FPI | XLOG_FPI_FOR_HINT) => None,
        RmgrId::XLOG => Some(0),
        // xl_smgr_create starts with the file; xl_smgr_truncate with a
        // block number, then the file.
        RmgrId::SMGR => Some(match info & 0xF0 {
            0x10 => at(4),
            0x20 => at(8),
            _ => u32::MAX,
        }),
        // xl_logical_message and xl_heap_truncate start with the database.
        RmgrId::LOGICAL_MESSAGE => Some(at(0)),
        RmgrId::HEAP if info & 0x70 == XLOG_HEAP_TRUNCATE => Some(at(0)),
        _ => None,
    }
}

/// The relation file a heap record writes and what it did, for a record
/// the decoder acts on.
fn touch_of(record: &Record, major: PgMajor) -> Option<(RelFileLocator, u8)> {
    let file = record.blocks.first()?.rel;
    match record.rmid {
        RmgrId::HEAP if record.rmgr_info() & 0x70 == XLOG_HEAP_INPLACE => {
            return (record.xid != 0).then_some((file, touch::SNAPSHOT));
        }
        RmgrId::HEAP | RmgrId::HEAP2 => {}
        _ => return None,
    }
    let data = |has: bool| if has { touch::DATA } else { 0 };
    // A record the decoder could not read is read whole (an unknown kind).
    let Ok(event) = interpret(record, major) else {
        return Some((file, touch::LOOKUP | touch::DATA));
    };
    let kind = match event {
        WalEvent::Insert(ins) if ins.on_toast_relation() => {
            touch::TOAST | data(ins.tuple.is_some())
        }
        WalEvent::Insert(ins) if ins.tuple.is_some() => touch::LOOKUP | touch::DATA,
        WalEvent::Insert(_) => touch::SNAPSHOT,
        WalEvent::MultiInsert(m) => touch::LOOKUP | data(!m.tuples.is_empty()),
        WalEvent::Update(up) => touch::LOOKUP | data(up.new.is_some()),
        WalEvent::Delete(del) if del.is_super() => touch::SUPER,
        WalEvent::Delete(del) => touch::LOOKUP | data(del.old.is_some()),
        WalEvent::Confirm(_) => touch::CONFIRM,
        _ => return None,
    };
    Some((file, kind))
}

/// The summary of the complete segment `bytes` starting at `start`, read
/// from `object`; `next` is the following segment (with its object), whose
/// first records may be needed to complete this one's last record. `None`
/// when the segment cannot be summarized alone: its WAL ends inside it, a
/// record is damaged, or its last record runs past `next`.
pub fn summarize(
    bytes: &[u8],
    start: Lsn,
    object: ObjectId,
    next: Option<(&[u8], ObjectId)>,
) -> Option<SegmentSummary> {
    let size = u32::try_from(bytes.len()).ok()?;
    let end = start.advance(u64::from(size));
    let mut wal = crate::wal::WalDecoder::new(start, size);
    wal.feed(bytes);
    let mut builder: Option<SummaryBuilder> = None;
    let mut fed_next = false;
    loop {
        match wal.poll() {
            Ok(crate::wal::Poll::Record(record)) => {
                if record.lsn >= end {
                    let next = next.map(|(_, object)| object);
                    let continued = builder.as_ref()?.last_end() > end;
                    return Some(builder?.finish(if continued { next } else { None }));
                }
                let major = wal.pg_major()?;
                let builder = match builder.as_mut() {
                    Some(builder) => builder,
                    None => builder.insert(SummaryBuilder::new(
                        object.clone(),
                        start,
                        wal.system_id()?,
                        wal.timeline()?,
                        major,
                    )),
                };
                builder.add(&record, major);
                wal.recycle(record);
            }
            Ok(crate::wal::Poll::NeedMore) if !fed_next => {
                fed_next = true;
                wal.feed(next.as_ref()?.0);
            }
            // The last record runs past the next segment, or the WAL ends.
            _ => return None,
        }
    }
}
