//! WAL records: the fixed header, the fragment headers and their payloads.
//!
//! A record (layouts of `XLogRecord` and `XLogRecordBlockHeader` &co,
//! `access/xlogrecord.h`, PostgreSQL 15-18) is a 24-byte header followed by
//! a list of fragment headers and then all their payloads in the same
//! order:
//!
//! - block references (ids 0..=32): which page of which relation fork the
//!   record touches, with an optional full-page image and optional
//!   rmgr-specific block data;
//! - the replication origin (id 253) and the top-level transaction id
//!   (id 252) of a subtransaction's first record;
//! - the main data (ids 254/255, long or short length), always last.
//!
//! [`Record`] keeps the whole reassembled record in one owned buffer and
//! exposes the payloads as slices of it, so decoding a record costs one copy
//! of its bytes and no allocation per fragment.

mod block;
mod fragments;

use std::ops::Range;

use crate::lsn::Lsn;

use super::error::{DecodeError, DecodeErrorKind};
use super::rmgr::RmgrId;

pub use block::{
    BlockImage, BlockRef, ForkNumber, ImageCompression, RelFileLocator, BKPBLOCK_HAS_DATA,
    BKPBLOCK_HAS_IMAGE, BKPBLOCK_SAME_REL, BKPBLOCK_WILL_INIT, BKPIMAGE_APPLY,
    BKPIMAGE_COMPRESS_LZ4, BKPIMAGE_COMPRESS_PGLZ, BKPIMAGE_COMPRESS_ZSTD, BKPIMAGE_HAS_HOLE,
    BLCKSZ, MAX_BLOCK_ID,
};

/// Size of the record header (`SizeOfXLogRecord`).
pub const RECORD_HEADER_LEN: u32 = 24;
/// Largest `xl_tot_len` a reader accepts (PostgreSQL's allocation limit, 1 GiB - 1).
pub const MAX_RECORD_LEN: u32 = 0x3FFF_FFFF;
/// Low bits of `xl_info` that are generic flags rather than the rmgr's opcode.
pub const XLR_INFO_MASK: u8 = 0x0F;

/// The fixed 24-byte record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// `xl_tot_len`: total length including this header.
    pub tot_len: u32,
    /// `xl_xid`: the (sub)transaction that wrote the record, 0 if none.
    pub xid: u32,
    /// `xl_prev`: LSN of the previous record.
    pub prev: Lsn,
    /// `xl_info`: generic flags (low 4 bits) and rmgr opcode/flags (high 4 bits).
    pub info: u8,
    /// `xl_rmid`.
    pub rmid: RmgrId,
    /// `xl_crc`: CRC-32C of the record.
    pub crc: u32,
}

impl RecordHeader {
    /// Parses the header from the first 24 bytes.
    pub fn parse(bytes: &[u8]) -> Result<RecordHeader, DecodeErrorKind> {
        let Some(h) = bytes.first_chunk::<24>() else {
            return Err(DecodeErrorKind::Truncated {
                what: "record header",
                need: RECORD_HEADER_LEN as usize,
                have: bytes.len(),
            });
        };
        let [l0, l1, l2, l3, x0, x1, x2, x3, p0, p1, p2, p3, p4, p5, p6, p7, info, rmid, _, _, c0, c1, c2, c3] =
            *h;
        Ok(RecordHeader {
            tot_len: u32::from_le_bytes([l0, l1, l2, l3]),
            xid: u32::from_le_bytes([x0, x1, x2, x3]),
            prev: Lsn(u64::from_le_bytes([p0, p1, p2, p3, p4, p5, p6, p7])),
            info,
            rmid: RmgrId(rmid),
            crc: u32::from_le_bytes([c0, c1, c2, c3]),
        })
    }
}

/// CRC-32C of a whole record as PostgreSQL computes it: over everything after
/// the header, then over the header up to (not including) `xl_crc`.
pub fn record_crc(record: &[u8]) -> u32 {
    let head = record.get(..20).unwrap_or(record);
    let body = record.get(RECORD_HEADER_LEN as usize..).unwrap_or(&[]);
    crc32c::crc32c_append(crc32c::crc32c(body), head)
}

/// [`record_crc`] of a buffer holding exactly one record, in a single pass:
/// the header's first 20 bytes are appended after the body for the
/// computation and removed again.
pub(crate) fn record_crc_in_place(record: &mut Vec<u8>) -> u32 {
    let len = record.len();
    if len < RECORD_HEADER_LEN as usize {
        return record_crc(record);
    }
    record.extend_from_within(..20);
    let crc = crc32c::crc32c(record.get(RECORD_HEADER_LEN as usize..).unwrap_or(&[]));
    record.truncate(len);
    crc
}

/// A decoded WAL record: header fields, fragments and payloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// LSN of the record's first byte.
    pub lsn: Lsn,
    /// LSN where the next record starts (for `XLOG_SWITCH`: the next segment's start).
    pub end_lsn: Lsn,
    /// `xl_tot_len`.
    pub tot_len: u32,
    /// `xl_xid`: the (sub)transaction that wrote the record, 0 if none.
    pub xid: u32,
    /// `xl_prev`.
    pub prev: Lsn,
    /// `xl_info`.
    pub info: u8,
    /// `xl_rmid`.
    pub rmid: RmgrId,
    /// The top-level xid, on the first record of a subtransaction (wal_level=logical).
    pub toplevel_xid: Option<u32>,
    /// The replication origin, if the session had one and the record type opted in.
    pub origin: Option<u16>,
    /// Block references, by ascending id.
    pub blocks: Vec<BlockRef>,
    main_data: Range<usize>,
    bytes: Vec<u8>,
}

impl Record {
    /// Parses a reassembled record (header included) found at `lsn`, ending
    /// at `end_lsn`. Does not check the CRC (see [`record_crc`]); the stream
    /// decoder does before calling this.
    pub fn parse(lsn: Lsn, end_lsn: Lsn, bytes: Vec<u8>) -> Result<Record, DecodeError> {
        let header = RecordHeader::parse(&bytes).map_err(|k| DecodeError::new(lsn, k))?;
        Record::from_parts(lsn, end_lsn, &header, bytes, Vec::new())
    }

    /// Like [`Record::parse`] with the header already parsed from `bytes`,
    /// reusing `blocks` (cleared first) for the block references.
    pub(crate) fn from_parts(
        lsn: Lsn,
        end_lsn: Lsn,
        header: &RecordHeader,
        bytes: Vec<u8>,
        blocks: Vec<BlockRef>,
    ) -> Result<Record, DecodeError> {
        let err = |kind| DecodeError::new(lsn, kind).with_rmgr(header.rmid);
        if usize::try_from(header.tot_len).ok() != Some(bytes.len()) {
            return Err(err(DecodeErrorKind::Malformed {
                what: "record",
                detail: format!(
                    "xl_tot_len {} but {} bytes given",
                    header.tot_len,
                    bytes.len()
                ),
            }));
        }
        let body = bytes.get(RECORD_HEADER_LEN as usize..).unwrap_or(&[]);
        let fragments = fragments::parse_fragments(body, blocks).map_err(err)?;
        Ok(Record {
            lsn,
            end_lsn,
            tot_len: header.tot_len,
            xid: header.xid,
            prev: header.prev,
            info: header.info,
            rmid: header.rmid,
            toplevel_xid: fragments.toplevel_xid,
            origin: fragments.origin,
            blocks: fragments.blocks,
            main_data: fragments.main_data,
            bytes,
        })
    }

    /// The record's buffers, for reuse.
    pub(crate) fn into_buffers(self) -> (Vec<u8>, Vec<BlockRef>) {
        (self.bytes, self.blocks)
    }

    /// `xl_info` without the generic flag bits: the rmgr's opcode and flags.
    pub fn rmgr_info(&self) -> u8 {
        self.info & !XLR_INFO_MASK
    }

    /// The main data.
    pub fn main_data(&self) -> &[u8] {
        self.slice(&self.main_data)
    }

    /// The block data of a block reference of this record.
    pub fn block_data(&self, block: &BlockRef) -> &[u8] {
        self.slice(&block.data)
    }

    /// The stored (possibly compressed, hole removed) bytes of a full-page image of this record.
    pub fn image_bytes(&self, image: &BlockImage) -> &[u8] {
        self.slice(&image.bytes)
    }

    /// The block reference with this id.
    pub fn block(&self, id: u8) -> Option<&BlockRef> {
        self.blocks.iter().find(|b| b.id == id)
    }

    /// Total bytes of full-page images (what `pg_waldump` subtracts from the
    /// total length to print the record length).
    pub fn fpi_len(&self) -> usize {
        self.blocks
            .iter()
            .filter_map(|b| b.image.as_ref())
            .map(BlockImage::stored_len)
            .sum()
    }

    /// The whole record, header included.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn slice(&self, range: &Range<usize>) -> &[u8] {
        self.bytes.get(range.clone()).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests;
