//! Telling a torn last record from corruption: after a record fails
//! validation, everything up to the end of its segment must be empty.

use crate::lsn::Lsn;

use super::super::error::DecodeError;
use super::super::page::{header_len_at, PageVerdict};
use super::{EndReason, Flow, State, WalDecoder, PAGE};

impl WalDecoder {
    /// Starts checking whether the failed record at `lsn` is a torn end of WAL.
    pub(super) fn start_tail_check(&mut self, error: DecodeError, lsn: Lsn) -> Flow {
        let until = Lsn(self.pos.0.next_multiple_of(u64::from(self.segment_size)));
        self.state = State::TailCheck { error, lsn, until };
        Flow::Continue
    }

    /// Reads (and drops) input up to `until`: all zero, or recycled pages, means
    /// the record at `lsn` was torn at the end of the WAL; anything else is `error`.
    pub(super) fn tail_check(
        &mut self,
        error: DecodeError,
        lsn: Lsn,
        until: Lsn,
    ) -> Result<Flow, DecodeError> {
        while self.pos < until {
            if self.pos.0 % PAGE == 0 {
                let len = header_len_at(self.pos, self.segment_size) as usize;
                let Some(header) = self.available().get(..len) else {
                    return Ok(self.need_more(State::TailCheck { error, lsn, until }));
                };
                let mut probe = self.pages;
                if let Ok(PageVerdict::Recycled { .. }) =
                    probe.check(header, self.pos, self.segment_size)
                {
                    break;
                }
            }
            let page_left = (PAGE - self.pos.0 % PAGE) as usize;
            let n = page_left
                .min((until.0 - self.pos.0) as usize)
                .min(self.buffered());
            if n == 0 {
                return Ok(self.need_more(State::TailCheck { error, lsn, until }));
            }
            if self.available()[..n].iter().any(|&b| b != 0) {
                return Err(error);
            }
            self.consume(n);
        }
        Ok(self.end(
            lsn,
            EndReason::TornRecord {
                error: Box::new(error),
            },
        ))
    }
}
