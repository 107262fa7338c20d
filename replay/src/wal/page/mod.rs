//! WAL page headers.
//!
//! WAL is written in 8 kB pages (`XLOG_BLCKSZ`). Every page starts with a
//! header: the first page of a segment with the 40-byte long header, every
//! other page with the 24-byte short one (layouts of `XLogPageHeaderData` and
//! `XLogLongPageHeaderData`, `access/xlog_internal.h`, PostgreSQL 15-18). The
//! header's magic number identifies the PostgreSQL major version that wrote
//! the WAL, and `xlp_pageaddr` repeats the page's own LSN, which is how
//! pages left over from an older use of a recycled segment file are told
//! apart from current ones.

use std::fmt;

use crate::lsn::Lsn;

use super::error::{DecodeError, DecodeErrorKind};
use super::reader::ByteReader;

/// Size of a WAL page (`XLOG_BLCKSZ`); the only size supported.
pub const WAL_PAGE_SIZE: u32 = 8192;
/// Size of a short page header (`SizeOfXLogShortPHD`).
pub const SHORT_HEADER_LEN: u32 = 24;
/// Size of a long page header (`SizeOfXLogLongPHD`).
pub const LONG_HEADER_LEN: u32 = 40;

/// `xlp_info`: the page begins with the rest of a record from earlier pages.
pub const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
/// `xlp_info`: the page has the long header.
pub const XLP_LONG_HEADER: u16 = 0x0002;
/// `xlp_info`: full-page images starting on this page may be dropped.
pub const XLP_BKP_REMOVABLE: u16 = 0x0004;
/// `xlp_info`: an unfinished record that used to continue here was abandoned.
pub const XLP_FIRST_IS_OVERWRITE_CONTRECORD: u16 = 0x0008;
/// All defined `xlp_info` bits.
pub const XLP_ALL_FLAGS: u16 = 0x000F;

/// A PostgreSQL major version whose WAL format is known, identified by the page magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PgMajor {
    /// PostgreSQL 15 (magic 0xD110).
    Pg15,
    /// PostgreSQL 16 (magic 0xD113).
    Pg16,
    /// PostgreSQL 17 (magic 0xD116).
    Pg17,
    /// PostgreSQL 18 (magic 0xD118).
    Pg18,
}

impl PgMajor {
    /// The version whose `XLOG_PAGE_MAGIC` this is.
    pub fn from_magic(magic: u16) -> Option<PgMajor> {
        match magic {
            0xD110 => Some(PgMajor::Pg15),
            0xD113 => Some(PgMajor::Pg16),
            0xD116 => Some(PgMajor::Pg17),
            0xD118 => Some(PgMajor::Pg18),
            _ => None,
        }
    }

    /// This version's `XLOG_PAGE_MAGIC`.
    pub fn magic(self) -> u16 {
        match self {
            PgMajor::Pg15 => 0xD110,
            PgMajor::Pg16 => 0xD113,
            PgMajor::Pg17 => 0xD116,
            PgMajor::Pg18 => 0xD118,
        }
    }

    /// The major version number, e.g. 15.
    pub fn number(self) -> u32 {
        match self {
            PgMajor::Pg15 => 15,
            PgMajor::Pg16 => 16,
            PgMajor::Pg17 => 17,
            PgMajor::Pg18 => 18,
        }
    }
}

impl fmt::Display for PgMajor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// Whether `size` is a segment size `initdb` accepts: a power of two from 1 MiB to 1 GiB.
pub fn is_valid_segment_size(size: u32) -> bool {
    size.is_power_of_two() && (1 << 20..=1 << 30).contains(&size)
}

/// Size of the page header at `page` (a page-aligned LSN): long at a segment start.
pub fn header_len_at(page: Lsn, segment_size: u32) -> u32 {
    if page.0 % u64::from(segment_size) == 0 {
        LONG_HEADER_LEN
    } else {
        SHORT_HEADER_LEN
    }
}

/// The fields of a long page header that follow the short ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongHeader {
    /// `xlp_sysid`: the cluster's system identifier.
    pub system_id: u64,
    /// `xlp_seg_size`: segment size in bytes.
    pub segment_size: u32,
    /// `xlp_xlog_blcksz`: WAL page size.
    pub page_size: u32,
}

impl LongHeader {
    /// Reads the 16 bytes that follow the short fields of a long header.
    fn read(r: &mut ByteReader<'_>) -> Result<LongHeader, DecodeErrorKind> {
        Ok(LongHeader {
            system_id: r.u64("long page header")?,
            segment_size: r.u32("long page header")?,
            page_size: r.u32("long page header")?,
        })
    }
}

/// A parsed page header (not yet validated against its position).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// `xlp_magic`.
    pub magic: u16,
    /// `xlp_info` flag bits (`XLP_*`).
    pub info: u16,
    /// `xlp_tli`: timeline of the first record on the page.
    pub timeline: u32,
    /// `xlp_pageaddr`: the LSN the page says it is at.
    pub page_addr: Lsn,
    /// `xlp_rem_len`: bytes of a record continued from earlier pages still to come.
    pub rem_len: u32,
    /// The long-header fields, when `XLP_LONG_HEADER` is set.
    pub long: Option<LongHeader>,
}

impl PageHeader {
    /// Parses a header from the start of `bytes`; reads 40 bytes when the long flag is set.
    pub fn parse(bytes: &[u8]) -> Result<PageHeader, DecodeErrorKind> {
        let mut r = ByteReader::new(bytes);
        let mut header = PageHeader::read_short(&mut r)?;
        if header.has_long_flag() {
            header.long = Some(LongHeader::read(&mut r)?);
        }
        Ok(header)
    }

    /// Reads the fields of a short header (24 bytes), leaving `long` empty
    /// whatever the flag says.
    fn read_short(r: &mut ByteReader<'_>) -> Result<PageHeader, DecodeErrorKind> {
        let magic = r.u16("page header")?;
        let info = r.u16("page header")?;
        let timeline = r.u32("page header")?;
        let page_addr = Lsn(r.u64("page header")?);
        let rem_len = r.u32("page header")?;
        r.skip(4, "page header")?;
        Ok(PageHeader {
            magic,
            info,
            timeline,
            page_addr,
            rem_len,
            long: None,
        })
    }

    /// Whether `xlp_info` claims a long header (`XLP_LONG_HEADER`).
    pub fn has_long_flag(&self) -> bool {
        self.info & XLP_LONG_HEADER != 0
    }

    /// Size of this header in bytes.
    pub fn header_len(&self) -> u32 {
        if self.long.is_some() {
            LONG_HEADER_LEN
        } else {
            SHORT_HEADER_LEN
        }
    }

    /// Whether the page begins with the continuation of an earlier record.
    pub fn is_contrecord(&self) -> bool {
        self.info & XLP_FIRST_IS_CONTRECORD != 0
    }

    /// Whether the page abandons an unfinished record from earlier pages.
    pub fn is_overwrite_contrecord(&self) -> bool {
        self.info & XLP_FIRST_IS_OVERWRITE_CONTRECORD != 0
    }
}

/// What earlier pages established, to check later pages against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageContext {
    /// Version of the WAL, from the first page's magic.
    pub major: Option<PgMajor>,
    /// System identifier, from the first long header seen.
    pub system_id: Option<u64>,
    /// Timeline of the latest page.
    pub timeline: Option<u32>,
}

/// The outcome of checking a page header at its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageVerdict {
    /// A valid page of the current WAL.
    Valid(PageHeader),
    /// The header is all zeros: the page was never written.
    Zeroed,
    /// The header is a valid one of an earlier position: the segment file was
    /// recycled and this page was not overwritten yet.
    Recycled {
        /// `xlp_pageaddr` found.
        found: Lsn,
    },
}

impl PageContext {
    /// Checks the header at the start of `bytes` for the page at LSN `page`,
    /// and records what it establishes. `bytes` must hold the whole header:
    /// [`header_len_at`] bytes, the long header at a segment's first page and
    /// the short one elsewhere. Only those bytes are read, whatever the
    /// `XLP_LONG_HEADER` flag says, so the verdict does not depend on what
    /// follows the header.
    ///
    /// Order of checks: an all-zero header ends the WAL; an unknown magic, or
    /// another version's magic than earlier pages, is an error; an
    /// `xlp_pageaddr` before the page's position means a recycled page (end of
    /// WAL), any other mismatch is an error; then info bits, the long header
    /// (flagged exactly at segment starts; segment and page size must match;
    /// system id must not change) and the timeline (must not go back).
    pub fn check(
        &mut self,
        bytes: &[u8],
        page: Lsn,
        segment_size: u32,
    ) -> Result<PageVerdict, DecodeError> {
        let err = |kind| DecodeError::new(page, kind);
        let expected_len = header_len_at(page, segment_size) as usize;
        let Some(raw) = bytes.get(..expected_len) else {
            return Err(err(DecodeErrorKind::Truncated {
                what: "page header",
                need: expected_len,
                have: bytes.len(),
            }));
        };
        if raw.iter().all(|&b| b == 0) {
            return Ok(PageVerdict::Zeroed);
        }
        let mut r = ByteReader::new(raw);
        let mut header = PageHeader::read_short(&mut r).map_err(err)?;
        let Some(major) = PgMajor::from_magic(header.magic) else {
            return Err(err(DecodeErrorKind::BadMagic {
                magic: header.magic,
            }));
        };
        if let Some(known) = self.major {
            if known != major {
                return Err(err(DecodeErrorKind::MagicChanged {
                    expected: known.magic(),
                    found: header.magic,
                }));
            }
        }
        if header.page_addr != page {
            let page_aligned = header.page_addr.0 % u64::from(WAL_PAGE_SIZE) == 0;
            if header.page_addr < page && page_aligned {
                return Ok(PageVerdict::Recycled {
                    found: header.page_addr,
                });
            }
            return Err(err(DecodeErrorKind::BadPageAddress {
                expected: page,
                found: header.page_addr,
            }));
        }
        if header.info & !XLP_ALL_FLAGS != 0 {
            return Err(err(DecodeErrorKind::InvalidPageInfo { info: header.info }));
        }
        let segment_start = page.0 % u64::from(segment_size) == 0;
        match (header.has_long_flag(), segment_start) {
            (false, true) => return Err(err(DecodeErrorKind::MissingLongHeader)),
            (true, false) => return Err(err(DecodeErrorKind::UnexpectedLongHeader)),
            (false, false) => {}
            (true, true) => {
                let long = LongHeader::read(&mut r).map_err(err)?;
                self.check_long(&long, segment_size).map_err(err)?;
                header.long = Some(long);
            }
        }
        if let Some(previous) = self.timeline {
            if header.timeline < previous {
                return Err(err(DecodeErrorKind::TimelineRegressed {
                    previous,
                    found: header.timeline,
                }));
            }
        }
        self.timeline = Some(header.timeline);
        self.major = Some(major);
        Ok(PageVerdict::Valid(header))
    }

    /// Checks the long header of a segment's first page: segment and page
    /// size must match, the system id must be the one seen before (or is
    /// recorded if none was).
    fn check_long(&mut self, long: &LongHeader, segment_size: u32) -> Result<(), DecodeErrorKind> {
        if long.segment_size != segment_size {
            return Err(DecodeErrorKind::SegmentSizeMismatch {
                expected: segment_size,
                found: long.segment_size,
            });
        }
        if long.page_size != WAL_PAGE_SIZE {
            return Err(DecodeErrorKind::PageSizeMismatch {
                expected: WAL_PAGE_SIZE,
                found: long.page_size,
            });
        }
        match self.system_id {
            Some(known) if known != long.system_id => Err(DecodeErrorKind::SystemIdMismatch {
                expected: known,
                found: long.system_id,
            }),
            _ => {
                self.system_id = Some(long.system_id);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
