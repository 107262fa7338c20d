//! Where decoding begins: the first page, skipping a continued record,
//! discarding input up to a known position.

use crate::lsn::Lsn;

use super::super::error::{DecodeError, DecodeErrorKind};
use super::super::page::{header_len_at, is_valid_segment_size, PageVerdict};
use super::{EndReason, Flow, Resume, State, WalDecoder, PAGE};

impl WalDecoder {
    pub(super) fn first_page(&mut self) -> Result<Flow, DecodeError> {
        let page = self.pos;
        let Some(verdict) = self.page_header()? else {
            return Ok(self.need_more(State::FirstPage));
        };
        let PageVerdict::Valid(header) = verdict else {
            let reason =
                Self::page_end_reason(page, verdict).unwrap_or(EndReason::ZeroPage { page });
            return Ok(self.end(self.start, reason));
        };
        if header.is_contrecord() {
            let continued_end = self
                .pos
                .advance(u64::from(header.rem_len).next_multiple_of(8));
            if self.start < continued_end {
                return Err(DecodeError::new(
                    self.start,
                    DecodeErrorKind::InvalidStart {
                        start: self.start,
                        reason: "it is inside the continuation of an earlier record",
                    },
                ));
            }
        }
        self.state = State::Discard {
            until: self.start,
            then: Resume::RecordStart,
        };
        Ok(Flow::Continue)
    }

    pub(super) fn find_first(&mut self) -> Result<Flow, DecodeError> {
        let page = self.pos;
        let Some(verdict) = self.page_header()? else {
            return Ok(self.need_more(State::FindFirst));
        };
        let PageVerdict::Valid(header) = verdict else {
            let reason =
                Self::page_end_reason(page, verdict).unwrap_or(EndReason::ZeroPage { page });
            return Ok(self.end(page, reason));
        };
        self.state = if header.is_contrecord() {
            let skip = u64::from(header.rem_len).next_multiple_of(8);
            let usable = PAGE - u64::from(header.header_len());
            if skip >= usable {
                State::Discard {
                    until: page.advance(PAGE),
                    then: Resume::FindFirst,
                }
            } else {
                State::Discard {
                    until: self.pos.advance(skip),
                    then: Resume::RecordStart,
                }
            }
        } else {
            State::RecordStart
        };
        Ok(Flow::Continue)
    }

    pub(super) fn discard(&mut self, until: Lsn, then: Resume) -> Flow {
        let want = until.checked_sub(self.pos).unwrap_or(0);
        let n = want.min(self.buffered() as u64) as usize;
        self.consume(n);
        if self.pos < until {
            return self.need_more(State::Discard { until, then });
        }
        self.state = match then {
            Resume::FindFirst => State::FindFirst,
            Resume::RecordStart => State::RecordStart,
        };
        Flow::Continue
    }
}

/// Why a decoder cannot start at `start`, if it cannot.
pub(super) fn start_problem(start: Lsn, segment_size: u32) -> Option<DecodeErrorKind> {
    let invalid = |reason| Some(DecodeErrorKind::InvalidStart { start, reason });
    if !is_valid_segment_size(segment_size) {
        return Some(DecodeErrorKind::InvalidSegmentSize { size: segment_size });
    }
    if start.0 > u64::MAX / 2 {
        return invalid("it is beyond any WAL position");
    }
    if start.0 % 8 != 0 {
        return invalid("records start at multiples of 8");
    }
    let offset = start.0 % PAGE;
    let page = Lsn(start.0 - offset);
    if offset != 0 && offset < u64::from(header_len_at(page, segment_size)) {
        return invalid("it is inside a page header");
    }
    None
}
