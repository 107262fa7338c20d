//! PostgreSQL WAL positions and the numbers that locate them in files.
//!
//! An [`Lsn`] is a byte position in the WAL stream. WAL is cut into segment
//! files of a fixed power-of-two size chosen at `initdb`; a segment is named by
//! its timeline and its [`SegmentNo`] (see [`SegmentName`]).

use std::fmt;

pub use walfill_core::lsn::{Lsn, ParseLsnError};

/// A WAL timeline id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimelineId(pub u32);

impl fmt::Display for TimelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A WAL segment number: LSN divided by the segment size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentNo(pub u64);

impl SegmentNo {
    /// The segment holding `lsn`, for a segment size in bytes.
    pub fn containing(lsn: Lsn, segment_size: u64) -> SegmentNo {
        SegmentNo(lsn.0 / segment_size)
    }

    /// The LSN of the first byte of this segment.
    pub fn start_lsn(self, segment_size: u64) -> Lsn {
        Lsn(self.0 * segment_size)
    }

    /// The segment after this one.
    pub fn next(self) -> SegmentNo {
        SegmentNo(self.0 + 1)
    }
}

/// A segment file's name, `TTTTTTTTXXXXXXXXYYYYYYYY`: timeline, then the
/// segment number split into a high and a low part as PostgreSQL names files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentName {
    /// Timeline of the segment.
    pub timeline: TimelineId,
    /// Segment number.
    pub segno: SegmentNo,
}

impl SegmentName {
    /// The name of the segment file as PostgreSQL writes it, for a segment size.
    pub fn file_name(&self, segment_size: u64) -> String {
        let per_xlogid = 0x1_0000_0000u64 / segment_size;
        format!(
            "{:08X}{:08X}{:08X}",
            self.timeline.0,
            self.segno.0 / per_xlogid,
            self.segno.0 % per_xlogid
        )
    }

    /// Parses a 24-hex-digit segment file name (no suffix), for a segment size.
    pub fn parse(name: &str, segment_size: u64) -> Option<SegmentName> {
        if name.len() != 24 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let tli = u32::from_str_radix(&name[0..8], 16).ok()?;
        let hi = u64::from_str_radix(&name[8..16], 16).ok()?;
        let lo = u64::from_str_radix(&name[16..24], 16).ok()?;
        let per_xlogid = 0x1_0000_0000u64 / segment_size;
        if lo >= per_xlogid {
            return None;
        }
        Some(SegmentName {
            timeline: TimelineId(tli),
            segno: SegmentNo(hi * per_xlogid + lo),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_match_postgres() {
        let seg16 = 16 * 1024 * 1024;
        let lsn: Lsn = "0/3000028".parse().unwrap();
        let name = SegmentName {
            timeline: TimelineId(1),
            segno: SegmentNo::containing(lsn, seg16),
        };
        assert_eq!(name.file_name(seg16), "000000010000000000000003");
        assert_eq!(lsn.segment_offset(seg16), 0x28);
        let lsn: Lsn = "1/FF000000".parse().unwrap();
        let name = SegmentName {
            timeline: TimelineId(2),
            segno: SegmentNo::containing(lsn, seg16),
        };
        assert_eq!(name.file_name(seg16), "0000000200000001000000FF");
        assert_eq!(
            SegmentName::parse("0000000200000001000000FF", seg16),
            Some(name)
        );
        // 1 MiB segments: 4096 per xlogid.
        let seg1 = 1024 * 1024;
        let name = SegmentName::parse("000000010000000100000FFF", seg1).unwrap();
        assert_eq!(name.segno, SegmentNo(4096 + 4095));
        assert_eq!(SegmentName::parse("000000010000000000000100", seg16), None);
    }
}
