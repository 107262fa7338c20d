//! Turning a byte stream of WAL into records: page headers, reassembly
//! across pages and segments, CRC and back-link checks, end of WAL.
//!
//! [`WalDecoder`] does no I/O: the caller [`feed`](WalDecoder::feed)s bytes
//! as it reads them and [`poll`](WalDecoder::poll)s records out. Input may be
//! split anywhere; the records are the same. Bytes are dropped as soon as
//! they are decoded: the decoder holds at most the unread part of what was
//! fed plus one page, and the record being reassembled.
//!
//! Each [`Record`] owns a copy of its bytes, so records outlive the input.
//! For the hot loop there are two optional savings: hand whole buffers over
//! with [`feed_owned`](WalDecoder::feed_owned) (no copy into the decoder;
//! [`take_spent_buffer`](WalDecoder::take_spent_buffer) gives an emptied
//! buffer back for the next read), and give finished records back with
//! [`recycle`](WalDecoder::recycle) so their buffers are reused.
//!
//! # Input
//!
//! The first byte fed must be the first byte of the WAL page (8 kB) that
//! contains the start LSN; [`WalDecoder::input_start`] gives that position.
//! For a start at a segment boundary this is the first byte of the segment
//! file. After that, feed the following bytes in order: the rest of the
//! segment, then the next segment file from its first byte, and so on.
//!
//! # Start position
//!
//! - A page-aligned start (typically a segment start) means "the first
//!   record that begins on or after this page": a record continued from
//!   the previous page is skipped using the page's `xlp_rem_len`. The first
//!   record's `xl_prev` must then only point backwards.
//! - Any other start must be the LSN of a record (8-byte aligned, not inside
//!   the page header or inside a continued record).
//!
//! # End of WAL
//!
//! The decoder reports [`Poll::EndOfWal`], with the LSN where the valid WAL
//! ends and an [`EndReason`], when:
//!
//! - a record's `xl_tot_len` is 0 and the rest of its page is zero
//!   ([`EndReason::ZeroLength`]; pages are zeroed before the server writes
//!   them, so this is the unwritten part of the last page);
//! - the next page (where a record should start or continue) has an
//!   all-zero header ([`EndReason::ZeroPage`]);
//! - the next page carries an older `xlp_pageaddr` than its position: it
//!   is left from an earlier use of a recycled segment file
//!   ([`EndReason::RecycledPage`]);
//! - a record fails validation (impossible length, wrong `xl_prev`, unknown
//!   rmgr, CRC mismatch) but is *torn*: every byte after it up to the end of
//!   its segment is zero or belongs to recycled pages. "After it" means
//!   after its header when the header is invalid, after the whole record
//!   for a CRC mismatch ([`EndReason::TornRecord`]). To know this the
//!   decoder reads, without keeping, up to the end of the segment, so it
//!   answers [`Poll::NeedMore`] until that much was fed (segment files,
//!   `.partial` ones included, always have the full segment size).
//!
//! Every other problem is a [`DecodeError`]: bad magic, a page address
//! ahead of its position, garbage after a failed record, a continuation
//! page that does not match, malformed fragments.
//!
//! An `XLOG_SWITCH` record is not an end: the decoder skips the zero-filled
//! rest of its segment and continues with the next segment.
//!
//! **Complete segments vs `.partial`.** The server archives a segment only
//! when it is finished: full, or closed by `XLOG_SWITCH`. So WAL never ends
//! inside an archived complete segment, and an `EndOfWal` whose LSN is
//! before the end of the segment being fed means the file is damaged; the
//! caller, which knows whether it fed a `.partial` file (or the live tail of
//! `pg_wal`), should treat it as an error then. For a `.partial` tail,
//! `EndOfWal` is the normal way the stream ends.
//!
//! After an error or an end of WAL the decoder stays in that state: `poll`
//! repeats the same answer and fed bytes are ignored.

use crate::lsn::Lsn;

use super::error::DecodeError;
use super::page::{header_len_at, PageContext, PageVerdict, PgMajor, WAL_PAGE_SIZE};
use super::record::Record;

mod records;
mod spare;
mod start;
mod tail;

use spare::Spare;
use start::start_problem;

const PAGE: u64 = WAL_PAGE_SIZE as u64;
/// Opcode of `XLOG_SWITCH` in `xl_info` of the XLOG rmgr.
const XLOG_SWITCH: u8 = 0x40;
/// Opcode of `XLOG_OVERWRITE_CONTRECORD` in `xl_info` of the XLOG rmgr.
const XLOG_OVERWRITE_CONTRECORD: u8 = 0xD0;
/// Initial buffer for a record being reassembled; larger ones grow as bytes arrive.
const MAX_INITIAL_ASSEMBLY: usize = 1 << 20;

/// What [`WalDecoder::poll`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// The next record.
    Record(Record),
    /// Feed more bytes to make progress.
    NeedMore,
    /// The WAL ends at `lsn`; see the module documentation for the rules.
    EndOfWal {
        /// Where the valid WAL ends: the LSN the next record would have had.
        lsn: Lsn,
        /// Why the decoder decided so.
        reason: EndReason,
    },
}

/// Why the WAL was found to end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// `xl_tot_len` is 0 and the rest of the page is zero.
    ZeroLength,
    /// The page where WAL continues was never written.
    ZeroPage {
        /// The page.
        page: Lsn,
    },
    /// The page where WAL continues is left from an earlier use of the segment file.
    RecycledPage {
        /// The page.
        page: Lsn,
        /// The `xlp_pageaddr` it carries.
        found: Lsn,
    },
    /// The last record is invalid but nothing follows it in its segment.
    TornRecord {
        /// What was wrong with the record.
        error: Box<DecodeError>,
    },
}

/// A record being gathered from several pages.
#[derive(Debug)]
struct Assembly {
    lsn: Lsn,
    tot_len: u32,
    header_checked: bool,
    bytes: Vec<u8>,
}

/// Where the decoder is.
#[derive(Debug)]
enum State {
    /// At the page containing a non-page-aligned start; its header comes next.
    FirstPage,
    /// At a page boundary, looking for the first record starting on or after it.
    FindFirst,
    /// Dropping input up to `until`, then going to `then`.
    Discard { until: Lsn, then: Resume },
    /// Between records (possibly before alignment padding or a page header).
    RecordStart,
    /// Gathering a record that continues on following pages.
    Assemble(Assembly),
    /// A record at `lsn` failed; checking whether everything up to `until` is empty.
    TailCheck {
        error: DecodeError,
        lsn: Lsn,
        until: Lsn,
    },
    /// The WAL ended.
    Ended { lsn: Lsn, reason: EndReason },
    /// Decoding failed.
    Failed(DecodeError),
}

/// The state to go to after discarding.
#[derive(Clone, Copy, Debug)]
enum Resume {
    FindFirst,
    RecordStart,
}

/// What one step of the state machine decided.
enum Flow {
    Continue,
    Return(Poll),
}

/// Decodes a WAL byte stream into records. See the module documentation.
#[derive(Debug)]
pub struct WalDecoder {
    segment_size: u32,
    start: Lsn,
    buf: Vec<u8>,
    head: usize,
    pos: Lsn,
    pages: PageContext,
    state: State,
    /// LSN of the last record returned; `None` before the first.
    prev: Option<Lsn>,
    /// A page abandoned the record at `.1`; the next record must say so.
    overwritten: Option<(Lsn, Lsn)>,
    /// Buffers of records given back with [`WalDecoder::recycle`].
    spare: Spare,
}

impl WalDecoder {
    /// A decoder starting at `start` for WAL with segments of `segment_size`
    /// bytes. An unusable start or segment size is reported by the first
    /// [`poll`](WalDecoder::poll).
    pub fn new(start: Lsn, segment_size: u32) -> WalDecoder {
        let page = Lsn(start.0 - start.0 % PAGE);
        let state = match start_problem(start, segment_size) {
            Some(kind) => State::Failed(DecodeError::new(start, kind)),
            None if start == page => State::FindFirst,
            None => State::FirstPage,
        };
        WalDecoder {
            segment_size,
            start,
            buf: Vec::new(),
            head: 0,
            pos: page,
            pages: PageContext::default(),
            state,
            prev: None,
            overwritten: None,
            spare: Spare::default(),
        }
    }

    /// The LSN of the first byte the first [`feed`](WalDecoder::feed) must
    /// carry: the start of the page containing the start LSN.
    pub fn input_start(&self) -> Lsn {
        Lsn(self.start.0 - self.start.0 % PAGE)
    }

    /// The LSN following the last byte fed so far.
    pub fn input_end(&self) -> Lsn {
        self.pos.advance((self.buf.len() - self.head) as u64)
    }

    /// The segment size this decoder was created with.
    pub fn segment_size(&self) -> u32 {
        self.segment_size
    }

    /// The PostgreSQL version of the WAL, known once the first page header was read.
    pub fn pg_major(&self) -> Option<PgMajor> {
        self.pages.major
    }

    /// The cluster's system identifier, known once a segment's first page was read.
    pub fn system_id(&self) -> Option<u64> {
        self.pages.system_id
    }

    /// The timeline of the latest page read.
    pub fn timeline(&self) -> Option<u32> {
        self.pages.timeline
    }

    /// LSN of the last record returned.
    pub fn last_record_lsn(&self) -> Option<Lsn> {
        self.prev
    }

    /// Bytes fed but not decoded yet (the buffer's live part).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Appends input bytes, contiguous with those fed before (see the module
    /// documentation for where the first byte must be). Ignored once the
    /// decoder has ended or failed.
    pub fn feed(&mut self, bytes: &[u8]) {
        if matches!(self.state, State::Ended { .. } | State::Failed(_)) {
            return;
        }
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
            if self.buf.capacity() > (1 << 20).max(bytes.len() * 4) {
                self.buf.shrink_to(bytes.len());
            }
        } else if self.head >= self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.head = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Like [`feed`](WalDecoder::feed), taking ownership of the bytes: when
    /// everything fed before has been decoded (as it normally is after a
    /// segment was fed and polled to [`Poll::NeedMore`]), they are decoded in
    /// place instead of being copied.
    pub fn feed_owned(&mut self, bytes: Vec<u8>) {
        if matches!(self.state, State::Ended { .. } | State::Failed(_)) {
            return;
        }
        if self.head == self.buf.len() {
            self.buf = bytes;
            self.head = 0;
        } else {
            self.feed(&bytes);
        }
    }

    /// Hands back the input buffer once everything in it has been decoded,
    /// emptied, so the caller can read the next input into it and give it
    /// back with [`feed_owned`](WalDecoder::feed_owned) without allocating.
    /// `None` while some input is still undecoded.
    pub fn take_spent_buffer(&mut self) -> Option<Vec<u8>> {
        if self.head < self.buf.len() {
            return None;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        self.head = 0;
        Some(buf)
    }

    /// Gives a record's buffers back to the decoder, which reuses them for
    /// later records instead of allocating. At most 16 buffers of up to
    /// 64 KiB each are kept; larger ones are dropped. Optional: call it in a
    /// decoding loop once a record is no longer needed.
    pub fn recycle(&mut self, record: Record) {
        self.spare.keep(record);
    }

    /// Decodes as far as the fed bytes allow: the next record, a request for
    /// more input, or the end of the WAL.
    pub fn poll(&mut self) -> Result<Poll, DecodeError> {
        loop {
            // Between records (the common case) nothing needs to move.
            if let State::RecordStart = self.state {
                match self.record_start() {
                    Ok(Flow::Continue) => continue,
                    Ok(Flow::Return(poll)) => return Ok(poll),
                    Err(e) => {
                        self.state = State::Failed(e.clone());
                        return Err(e);
                    }
                }
            }
            let state = std::mem::replace(&mut self.state, State::RecordStart);
            let flow = match state {
                State::Failed(e) => {
                    self.state = State::Failed(e.clone());
                    return Err(e);
                }
                State::Ended { lsn, reason } => {
                    self.state = State::Ended {
                        lsn,
                        reason: reason.clone(),
                    };
                    return Ok(Poll::EndOfWal { lsn, reason });
                }
                State::FirstPage => self.first_page(),
                State::FindFirst => self.find_first(),
                State::Discard { until, then } => Ok(self.discard(until, then)),
                State::RecordStart => self.record_start(),
                State::Assemble(a) => self.assemble(a),
                State::TailCheck { error, lsn, until } => self.tail_check(error, lsn, until),
            };
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Return(poll)) => return Ok(poll),
                Err(e) => {
                    self.state = State::Failed(e.clone());
                    return Err(e);
                }
            }
        }
    }

    fn available(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    fn consume(&mut self, n: usize) {
        self.head += n;
        self.pos = self.pos.advance(n as u64);
    }

    /// Waits in `state` for more input.
    fn need_more(&mut self, state: State) -> Flow {
        self.state = state;
        Flow::Return(Poll::NeedMore)
    }

    fn end(&mut self, lsn: Lsn, reason: EndReason) -> Flow {
        self.state = State::Ended {
            lsn,
            reason: reason.clone(),
        };
        Flow::Return(Poll::EndOfWal { lsn, reason })
    }

    /// Reads and checks the header of the page at `self.pos`; consumes it if valid.
    fn page_header(&mut self) -> Result<Option<PageVerdict>, DecodeError> {
        let len = header_len_at(self.pos, self.segment_size) as usize;
        let Some(header) = self.buf[self.head..].get(..len) else {
            return Ok(None);
        };
        let verdict = self.pages.check(header, self.pos, self.segment_size)?;
        if let PageVerdict::Valid(_) = verdict {
            self.consume(len);
        }
        Ok(Some(verdict))
    }

    /// The end reason for a page that is not valid WAL.
    fn page_end_reason(page: Lsn, verdict: PageVerdict) -> Option<EndReason> {
        match verdict {
            PageVerdict::Valid(_) => None,
            PageVerdict::Zeroed => Some(EndReason::ZeroPage { page }),
            PageVerdict::Recycled { found } => Some(EndReason::RecycledPage { page, found }),
        }
    }
}

#[cfg(test)]
mod end_tests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;
