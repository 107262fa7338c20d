//! Test support: crafted records and a small WAL writer that lays them out
//! in pages and segments the way the server does.

use crate::lsn::Lsn;

use super::page::{WAL_PAGE_SIZE, XLP_FIRST_IS_CONTRECORD, XLP_LONG_HEADER};
use super::record::record_crc;

/// The body of a record (everything after its header), built fragment by fragment.
#[derive(Default)]
pub(crate) struct Body {
    headers: Vec<u8>,
    payloads: Vec<u8>,
    main: Vec<u8>,
}

impl Body {
    pub(crate) fn new() -> Body {
        Body::default()
    }

    /// A block reference with a full relation identity, optional data.
    pub(crate) fn block(mut self, id: u8, rel: [u32; 3], block: u32, data: &[u8]) -> Body {
        self.headers.push(id);
        self.headers.push(if data.is_empty() { 0 } else { 0x20 });
        self.headers
            .extend_from_slice(&(data.len() as u16).to_le_bytes());
        for part in rel {
            self.headers.extend_from_slice(&part.to_le_bytes());
        }
        self.headers.extend_from_slice(&block.to_le_bytes());
        self.payloads.extend_from_slice(data);
        self
    }

    /// Raw fragment header bytes and payload bytes, for unusual shapes.
    pub(crate) fn raw(mut self, header: &[u8], payload: &[u8]) -> Body {
        self.headers.extend_from_slice(header);
        self.payloads.extend_from_slice(payload);
        self
    }

    /// The main data, with the short or long header as the server picks it.
    pub(crate) fn main(mut self, data: &[u8]) -> Body {
        self.main = data.to_vec();
        self
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut out = self.headers.clone();
        if !self.main.is_empty() {
            if self.main.len() <= 255 {
                out.push(255);
                out.push(self.main.len() as u8);
            } else {
                out.push(254);
                out.extend_from_slice(&(self.main.len() as u32).to_le_bytes());
            }
        }
        out.extend_from_slice(&self.payloads);
        out.extend_from_slice(&self.main);
        out
    }
}

/// A complete record with a correct length and CRC.
pub(crate) fn record(rmid: u8, info: u8, xid: u32, prev: Lsn, body: &Body) -> Vec<u8> {
    let body = body.bytes();
    let mut out = Vec::with_capacity(24 + body.len());
    out.extend_from_slice(&((24 + body.len()) as u32).to_le_bytes());
    out.extend_from_slice(&xid.to_le_bytes());
    out.extend_from_slice(&prev.0.to_le_bytes());
    out.push(info);
    out.push(rmid);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&body);
    let crc = record_crc(&out);
    out[20..24].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Writes records into WAL pages starting at a segment boundary.
pub(crate) struct WalWriter {
    pub(crate) segment_size: u32,
    start: u64,
    pos: u64,
    pub(crate) prev: Lsn,
    buf: Vec<u8>,
}

impl WalWriter {
    pub(crate) fn new(start: Lsn, segment_size: u32) -> WalWriter {
        assert_eq!(start.0 % u64::from(segment_size), 0);
        WalWriter {
            segment_size,
            start: start.0,
            pos: start.0,
            prev: Lsn(start.0.saturating_sub(0x100)),
            buf: Vec::new(),
        }
    }

    /// The bytes written so far, from the start segment's first byte.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The position the next byte goes to.
    pub(crate) fn pos(&self) -> Lsn {
        Lsn(self.pos)
    }

    fn put(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        self.pos += bytes.len() as u64;
    }

    fn zeros_to(&mut self, lsn: u64) {
        let n = (lsn - self.pos) as usize;
        self.buf.resize(self.buf.len() + n, 0);
        self.pos = lsn;
    }

    fn page_header(&mut self, info: u16, rem_len: u32) {
        let long = self.pos % u64::from(self.segment_size) == 0;
        let info = info | if long { XLP_LONG_HEADER } else { 0 };
        let mut h = Vec::with_capacity(40);
        h.extend_from_slice(&0xD110u16.to_le_bytes());
        h.extend_from_slice(&info.to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes());
        h.extend_from_slice(&self.pos.to_le_bytes());
        h.extend_from_slice(&rem_len.to_le_bytes());
        h.extend_from_slice(&[0; 4]);
        if long {
            h.extend_from_slice(&42u64.to_le_bytes());
            h.extend_from_slice(&self.segment_size.to_le_bytes());
            h.extend_from_slice(&WAL_PAGE_SIZE.to_le_bytes());
        }
        self.put(&h);
    }

    /// Writes a prepared record (its `xl_prev` as given) and returns its LSN.
    pub(crate) fn write_raw(&mut self, rec: &[u8]) -> Lsn {
        self.write_raw_with(rec, 0)
    }

    /// Like [`WalWriter::write_raw`], with extra `xlp_info` bits on the
    /// record's first page when that page starts with it.
    pub(crate) fn write_raw_with(&mut self, rec: &[u8], first_page_info: u16) -> Lsn {
        self.zeros_to(self.pos.next_multiple_of(8));
        if self.pos % u64::from(WAL_PAGE_SIZE) == 0 {
            self.page_header(first_page_info, 0);
        }
        let lsn = Lsn(self.pos);
        let mut written = 0;
        while written < rec.len() {
            if self.pos % u64::from(WAL_PAGE_SIZE) == 0 {
                self.page_header(XLP_FIRST_IS_CONTRECORD, (rec.len() - written) as u32);
            }
            let room = (u64::from(WAL_PAGE_SIZE) - self.pos % u64::from(WAL_PAGE_SIZE)) as usize;
            let n = room.min(rec.len() - written);
            self.put(&rec[written..written + n]);
            written += n;
        }
        self.prev = lsn;
        lsn
    }

    /// Writes only the first `n` bytes of `rec` (as if the server crashed
    /// mid-record); `xl_prev` tracking is left unchanged.
    pub(crate) fn write_partial(&mut self, rec: &[u8], n: usize) -> Lsn {
        let prev = self.prev;
        let lsn = self.write_raw(&rec[..n]);
        // The page headers written carry the remaining length of the part only;
        // that is fine as long as the part ends on the record's first page.
        self.prev = prev;
        lsn
    }

    /// Builds a record chained to the previous one and writes it.
    pub(crate) fn write(&mut self, rmid: u8, info: u8, xid: u32, body: &Body) -> Lsn {
        let rec = record(rmid, info, xid, self.prev, body);
        self.write_raw(&rec)
    }

    /// Writes an XLOG_SWITCH record and zero-fills the rest of the segment.
    pub(crate) fn switch(&mut self) -> Lsn {
        let lsn = self.write(0, 0x40, 0, &Body::new());
        let seg = u64::from(self.segment_size);
        self.zeros_to(self.pos.next_multiple_of(seg));
        lsn
    }

    /// Zero-fills up to `lsn`.
    pub(crate) fn pad_to(&mut self, lsn: Lsn) {
        self.zeros_to(lsn.0);
    }

    /// Bytes from `lsn` on.
    pub(crate) fn bytes_from(&self, lsn: Lsn) -> &[u8] {
        &self.buf[(lsn.0 - self.start) as usize..]
    }
}
