//! Records: reading the header where it starts, gathering the rest from
//! the following pages, checking the back link and the CRC.

use crate::lsn::Lsn;

use super::super::error::{DecodeError, DecodeErrorKind};
use super::super::page::PageVerdict;
use super::super::record::{
    record_crc_in_place, Record, RecordHeader, MAX_RECORD_LEN, RECORD_HEADER_LEN,
};
use super::super::rmgr::RmgrId;
use super::{
    Assembly, EndReason, Flow, Poll, Resume, State, WalDecoder, MAX_INITIAL_ASSEMBLY, PAGE,
    XLOG_OVERWRITE_CONTRECORD, XLOG_SWITCH,
};

/// Room after a record's bytes for computing its CRC in one pass.
const CRC_SCRATCH: usize = 20;

impl WalDecoder {
    pub(super) fn record_start(&mut self) -> Result<Flow, DecodeError> {
        // Alignment padding after the previous record.
        let aligned = Lsn(self.pos.0.next_multiple_of(8));
        if self.pos < aligned {
            let n = ((aligned.0 - self.pos.0) as usize).min(self.buffered());
            self.consume(n);
            if self.pos < aligned {
                return Ok(self.need_more(State::RecordStart));
            }
        }
        if self.pos.0 % PAGE == 0 {
            let page = self.pos;
            let Some(verdict) = self.page_header()? else {
                return Ok(self.need_more(State::RecordStart));
            };
            if let Some(reason) = Self::page_end_reason(page, verdict) {
                return Ok(self.end(page, reason));
            }
            if let PageVerdict::Valid(header) = verdict {
                if header.is_contrecord() {
                    return Err(DecodeError::new(
                        page,
                        DecodeErrorKind::UnexpectedContinuation { page },
                    ));
                }
            }
        }
        let lsn = self.pos;
        let page_left = (PAGE - lsn.0 % PAGE) as usize;
        let avail = &self.buf[self.head..];
        let Some(len_bytes) = avail.get(..4) else {
            return Ok(self.need_more(State::RecordStart));
        };
        let tot_len = u32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let header_on_page = (RECORD_HEADER_LEN as usize).min(page_left);
        if tot_len == 0 {
            let Some(rest) = avail.get(..page_left) else {
                return Ok(self.need_more(State::RecordStart));
            };
            if rest.iter().all(|&b| b == 0) {
                return Ok(self.end(lsn, EndReason::ZeroLength));
            }
            return Err(DecodeError::new(
                lsn,
                DecodeErrorKind::InvalidRecordLength { len: 0 },
            ));
        }
        if !(RECORD_HEADER_LEN..=MAX_RECORD_LEN).contains(&tot_len) {
            if avail.len() < header_on_page {
                return Ok(self.need_more(State::RecordStart));
            }
            self.consume(header_on_page);
            let error =
                DecodeError::new(lsn, DecodeErrorKind::InvalidRecordLength { len: tot_len });
            return Ok(self.start_tail_check(error, lsn));
        }
        let len = tot_len as usize;
        if len <= page_left {
            // The whole record is on this page: check it in place, copy it once.
            let Some(bytes) = avail.get(..len) else {
                return Ok(self.need_more(State::RecordStart));
            };
            let header = RecordHeader::parse(bytes).map_err(|k| DecodeError::new(lsn, k))?;
            if let Err(error) = self.check_header(lsn, &header) {
                self.consume(header_on_page);
                return Ok(self.start_tail_check(error, lsn));
            }
            let mut copy = self.spare.bytes(len + CRC_SCRATCH);
            copy.extend_from_slice(bytes);
            self.consume(len);
            let computed = record_crc_in_place(&mut copy);
            if computed != header.crc {
                return Ok(self.crc_mismatch(lsn, header, computed));
            }
            return self.finish_record(lsn, &header, copy);
        }
        let mut header_checked = false;
        if page_left >= RECORD_HEADER_LEN as usize {
            let Some(bytes) = avail.get(..RECORD_HEADER_LEN as usize) else {
                return Ok(self.need_more(State::RecordStart));
            };
            let header = RecordHeader::parse(bytes).map_err(|k| DecodeError::new(lsn, k))?;
            if let Err(error) = self.check_header(lsn, &header) {
                self.consume(header_on_page);
                return Ok(self.start_tail_check(error, lsn));
            }
            header_checked = true;
        }
        self.state = State::Assemble(Assembly {
            lsn,
            tot_len,
            header_checked,
            bytes: self
                .spare
                .bytes(len.min(MAX_INITIAL_ASSEMBLY) + CRC_SCRATCH),
        });
        Ok(Flow::Continue)
    }

    pub(super) fn assemble(&mut self, mut a: Assembly) -> Result<Flow, DecodeError> {
        loop {
            if self.pos.0 % PAGE == 0 {
                let page = self.pos;
                let Some(verdict) = self.page_header()? else {
                    return Ok(self.need_more(State::Assemble(a)));
                };
                if let Some(reason) = Self::page_end_reason(page, verdict) {
                    return Ok(self.end(a.lsn, reason));
                }
                if let PageVerdict::Valid(header) = verdict {
                    if header.is_overwrite_contrecord() {
                        // The record was abandoned (crash mid-write); a fresh
                        // record starts right after this header.
                        self.overwritten = Some((page, a.lsn));
                        self.state = State::RecordStart;
                        return Ok(Flow::Continue);
                    }
                    if !header.is_contrecord() {
                        return Err(DecodeError::new(
                            page,
                            DecodeErrorKind::MissingContinuation { page },
                        ));
                    }
                    let expected = a.tot_len - a.bytes.len() as u32;
                    if header.rem_len != expected {
                        return Err(DecodeError::new(
                            page,
                            DecodeErrorKind::ContinuationLengthMismatch {
                                page,
                                expected,
                                found: header.rem_len,
                            },
                        ));
                    }
                }
            }
            let page_left = (PAGE - self.pos.0 % PAGE) as usize;
            let missing = a.tot_len as usize - a.bytes.len();
            let mut take = missing.min(page_left).min(self.buffered());
            if !a.header_checked {
                // Stop at the end of the header: it is checked as soon as it
                // is complete, so a bad one is found at the same point (and
                // the torn-record check starts right after it) however the
                // input was split.
                take = take.min(RECORD_HEADER_LEN as usize - a.bytes.len());
            }
            if take == 0 {
                return Ok(self.need_more(State::Assemble(a)));
            }
            a.bytes
                .extend_from_slice(&self.buf[self.head..self.head + take]);
            self.consume(take);
            if !a.header_checked && a.bytes.len() >= RECORD_HEADER_LEN as usize {
                let header =
                    RecordHeader::parse(&a.bytes).map_err(|k| DecodeError::new(a.lsn, k))?;
                if let Err(error) = self.check_header(a.lsn, &header) {
                    return Ok(self.start_tail_check(error, a.lsn));
                }
                a.header_checked = true;
            }
            if a.bytes.len() == a.tot_len as usize {
                let header =
                    RecordHeader::parse(&a.bytes).map_err(|k| DecodeError::new(a.lsn, k))?;
                let computed = record_crc_in_place(&mut a.bytes);
                if computed != header.crc {
                    return Ok(self.crc_mismatch(a.lsn, header, computed));
                }
                return self.finish_record(a.lsn, &header, a.bytes);
            }
        }
    }

    /// Header checks once the 24-byte header is available: resource manager and back link.
    fn check_header(&self, lsn: Lsn, header: &RecordHeader) -> Result<(), DecodeError> {
        let err = |kind| Err(DecodeError::new(lsn, kind));
        if !header.rmid.is_valid() {
            return err(DecodeErrorKind::UnknownRmgr {
                rmid: header.rmid.0,
            });
        }
        match self.prev {
            Some(expected) if header.prev != expected => err(DecodeErrorKind::PrevLinkMismatch {
                expected,
                found: header.prev,
            }),
            None if header.prev >= lsn => {
                err(DecodeErrorKind::PrevLinkNotBefore { found: header.prev })
            }
            _ => Ok(()),
        }
    }

    fn crc_mismatch(&mut self, lsn: Lsn, header: RecordHeader, computed: u32) -> Flow {
        let error = DecodeError::new(
            lsn,
            DecodeErrorKind::CrcMismatch {
                expected: header.crc,
                computed,
            },
        )
        .with_rmgr(header.rmid);
        self.start_tail_check(error, lsn)
    }

    /// Parses a complete, CRC-checked record and moves past it.
    #[inline(always)]
    fn finish_record(
        &mut self,
        lsn: Lsn,
        header: &RecordHeader,
        bytes: Vec<u8>,
    ) -> Result<Flow, DecodeError> {
        let seg = u64::from(self.segment_size);
        let mut end = Lsn(self.pos.0.next_multiple_of(8));
        let is_switch = header.rmid == RmgrId::XLOG && header.info & 0xF0 == XLOG_SWITCH;
        if is_switch {
            end = Lsn(self.pos.0.next_multiple_of(seg));
        }
        let record = Record::from_parts(lsn, end, header, bytes, self.spare.blocks())?;
        if let Some((page, abandoned)) = self.overwritten.take() {
            let names_abandoned = record.rmid == RmgrId::XLOG
                && record.rmgr_info() == XLOG_OVERWRITE_CONTRECORD
                && record.main_data().get(..8) == Some(&abandoned.0.to_le_bytes()[..]);
            if !names_abandoned {
                return Err(DecodeError::new(
                    lsn,
                    DecodeErrorKind::MissingOverwriteRecord { page, abandoned },
                ));
            }
        }
        self.prev = Some(lsn);
        // The state is already `RecordStart` here (the caller's placeholder).
        if is_switch {
            self.state = State::Discard {
                until: end,
                then: Resume::RecordStart,
            };
        }
        Ok(Flow::Return(Poll::Record(record)))
    }
}
