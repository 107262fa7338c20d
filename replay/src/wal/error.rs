//! The one error type of WAL decoding, and what can go wrong.

use std::fmt;

use crate::lsn::Lsn;

use super::rmgr::RmgrId;

/// WAL bytes could not be decoded.
///
/// Always names the LSN it happened at: the page for page-level problems, the
/// record for record-level ones. The resource manager is named when the
/// record header was readable, and the segment file name when the caller
/// attached it with [`DecodeError::with_segment`] (the decoder itself only
/// sees bytes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at {lsn}{}{}", RmgrSuffix(*.rmgr), SegmentSuffix(.segment.as_deref()))]
pub struct DecodeError {
    /// Where: a page's or a record's LSN.
    pub lsn: Lsn,
    /// The segment file the bytes came from, if the caller said so.
    pub segment: Option<String>,
    /// The resource manager of the record, when known.
    pub rmgr: Option<RmgrId>,
    /// What is wrong.
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    /// An error at `lsn`.
    pub fn new(lsn: Lsn, kind: DecodeErrorKind) -> DecodeError {
        DecodeError {
            lsn,
            segment: None,
            rmgr: None,
            kind,
        }
    }

    /// The same error, naming the segment file the bytes came from.
    pub fn with_segment(mut self, segment: impl Into<String>) -> DecodeError {
        self.segment = Some(segment.into());
        self
    }

    /// The same error, naming the record's resource manager.
    pub fn with_rmgr(mut self, rmgr: RmgrId) -> DecodeError {
        self.rmgr = Some(rmgr);
        self
    }
}

/// What went wrong while decoding WAL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeErrorKind {
    /// The segment size given to the decoder is not a power of two between 1 MiB and 1 GiB.
    #[error("invalid WAL segment size {size}: must be a power of two from 1 MiB to 1 GiB")]
    InvalidSegmentSize {
        /// The size given.
        size: u32,
    },
    /// The start position is neither a page boundary nor a possible record start.
    #[error("cannot start decoding at {start}: {reason}")]
    InvalidStart {
        /// The start given.
        start: Lsn,
        /// Why it is not usable.
        reason: &'static str,
    },
    /// A page header carries a magic number of no PostgreSQL version walfill
    /// reads.
    #[error("{}", bad_magic(*magic))]
    BadMagic {
        /// The magic found.
        magic: u16,
    },
    /// A page header carries another version's magic than the pages before it.
    #[error("WAL page magic 0x{found:04X} differs from 0x{expected:04X} of the pages before")]
    MagicChanged {
        /// Magic of the earlier pages.
        expected: u16,
        /// Magic of this page.
        found: u16,
    },
    /// A page header's `xlp_pageaddr` is not the page's own position (and not an
    /// older one, which would mean a recycled segment).
    #[error("WAL page claims address {found}, expected {expected}")]
    BadPageAddress {
        /// The page's position.
        expected: Lsn,
        /// `xlp_pageaddr`.
        found: Lsn,
    },
    /// A page header has `xlp_info` bits no version defines.
    #[error("invalid WAL page info bits 0x{info:04X}")]
    InvalidPageInfo {
        /// `xlp_info`.
        info: u16,
    },
    /// The first page of a segment lacks the long header.
    #[error("first page of a segment has no long header")]
    MissingLongHeader,
    /// A page other than a segment's first claims a long header.
    #[error("long page header on a page that does not start a segment")]
    UnexpectedLongHeader,
    /// The long header's segment size differs from the decoder's.
    #[error("segment header says segment size {found}, decoder expects {expected}")]
    SegmentSizeMismatch {
        /// Segment size the decoder was created with.
        expected: u32,
        /// `xlp_seg_size`.
        found: u32,
    },
    /// The long header's WAL page size is not 8192.
    #[error("segment header says WAL page size {found}, only {expected} is supported")]
    PageSizeMismatch {
        /// The supported size.
        expected: u32,
        /// `xlp_xlog_blcksz`.
        found: u32,
    },
    /// Segments of different clusters were fed to one decoder.
    #[error("segment belongs to system {found}, earlier segments to {expected}")]
    SystemIdMismatch {
        /// System id of the earlier segments.
        expected: u64,
        /// `xlp_sysid` of this one.
        found: u64,
    },
    /// A page's timeline is older than an earlier page's.
    #[error("page timeline {found} is before timeline {previous} of an earlier page")]
    TimelineRegressed {
        /// Timeline of the earlier page.
        previous: u32,
        /// `xlp_tli` of this page.
        found: u32,
    },
    /// A record continues onto a page that does not say it continues a record.
    #[error("record continues onto page {page}, which has no continuation flag")]
    MissingContinuation {
        /// The page.
        page: Lsn,
    },
    /// A continuation page announces another remaining length than the record needs.
    #[error(
        "continuation page {page} announces {found} remaining bytes, the record needs {expected}"
    )]
    ContinuationLengthMismatch {
        /// The page.
        page: Lsn,
        /// Bytes of the record still missing.
        expected: u32,
        /// `xlp_rem_len`.
        found: u32,
    },
    /// A record should start where a page says it continues an earlier record.
    #[error(
        "page {page} begins with the continuation of a record where a new record should start"
    )]
    UnexpectedContinuation {
        /// The page.
        page: Lsn,
    },
    /// `xl_tot_len` is too small or too large for a record.
    #[error("invalid record length {len}")]
    InvalidRecordLength {
        /// `xl_tot_len`.
        len: u32,
    },
    /// `xl_prev` does not point to the previous record.
    #[error("record points back to {found}, but the previous record is at {expected}")]
    PrevLinkMismatch {
        /// LSN of the record read before.
        expected: Lsn,
        /// `xl_prev`.
        found: Lsn,
    },
    /// The first record read points back to itself or forward.
    #[error("record points back to {found}, which is not before it")]
    PrevLinkNotBefore {
        /// `xl_prev`.
        found: Lsn,
    },
    /// A record names a resource manager id no version defines.
    #[error("unknown resource manager id {rmid}")]
    UnknownRmgr {
        /// `xl_rmid`.
        rmid: u8,
    },
    /// The record's CRC-32C does not match its bytes.
    #[error("record CRC mismatch: stored 0x{expected:08X}, computed 0x{computed:08X}")]
    CrcMismatch {
        /// `xl_crc`.
        expected: u32,
        /// CRC of the bytes read.
        computed: u32,
    },
    /// A page abandons an unfinished record (`XLP_FIRST_IS_OVERWRITE_CONTRECORD`),
    /// but the first record on it is not the `XLOG_OVERWRITE_CONTRECORD` naming
    /// the abandoned record.
    #[error("page {page} abandons the record at {abandoned}, but the next record does not say so")]
    MissingOverwriteRecord {
        /// The page flagged as overwriting.
        page: Lsn,
        /// The abandoned record's LSN.
        abandoned: Lsn,
    },
    /// A structure ended early.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A fragment header has an id that is neither a block id nor a special id.
    #[error("invalid fragment id {id}")]
    InvalidBlockId {
        /// The id byte.
        id: u8,
    },
    /// Block references are not in strictly increasing id order.
    #[error("block reference {id} follows block reference {previous}")]
    OutOfOrderBlock {
        /// This block's id.
        id: u8,
        /// The previous block's id.
        previous: u8,
    },
    /// A block reference header contradicts itself.
    #[error("block reference {id}: {reason}")]
    InvalidBlock {
        /// The block id.
        id: u8,
        /// What is inconsistent.
        reason: &'static str,
    },
    /// The payload lengths announced by the fragment headers do not add up to the record length.
    #[error("fragment headers announce {announced} payload bytes, the record has {actual}")]
    PayloadLengthMismatch {
        /// Sum of announced payload lengths.
        announced: u64,
        /// Bytes left after the fragment headers.
        actual: u64,
    },
    /// A record lacks a block reference its type requires.
    #[error("record has no block reference {id}")]
    MissingBlock {
        /// The block id needed.
        id: u8,
    },
    /// A record's content is inconsistent.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// The structure.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The record is valid but cannot be decoded on its own.
    #[error("not decodable: {reason}")]
    NotDecodable {
        /// Why.
        reason: &'static str,
    },
}

struct RmgrSuffix(Option<RmgrId>);

impl fmt::Display for RmgrSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(rmgr) => write!(f, " (rmgr {rmgr})"),
            None => Ok(()),
        }
    }
}

struct SegmentSuffix<'a>(Option<&'a str>);

impl fmt::Display for SegmentSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(segment) => write!(f, " in segment {segment}"),
            None => Ok(()),
        }
    }
}

/// What a page magic of a version walfill does not read says, naming the
/// version when it is a known older one or plainly newer.
fn bad_magic(magic: u16) -> String {
    let older = match magic {
        0xD097 => Some(10),
        0xD098 => Some(11),
        0xD101 => Some(12),
        0xD106 => Some(13),
        0xD10D => Some(14),
        _ => None,
    };
    let what = match older {
        Some(major) => format!("is PostgreSQL {major}'s"),
        None if (0xD119..=0xD1FF).contains(&magic) => {
            "is of a PostgreSQL version newer than 18".to_string()
        }
        None => "is no PostgreSQL version's (not WAL, or damaged)".to_string(),
    };
    format!(
        "WAL page magic 0x{magic:04X} {what}: walfill reads the WAL of PostgreSQL 15, 16, 17 and 18"
    )
}
