//! PostgreSQL WAL positions and the numbers that locate them in files.
//!
//! An [`Lsn`] is a byte position in the WAL stream. WAL is cut into segment
//! files of a fixed power-of-two size chosen at `initdb`; a segment is named by
//! its timeline and its [`SegmentNo`] (see [`SegmentName`]).

use std::fmt;
use std::str::FromStr;

/// A log sequence number: a byte position in the WAL, printed `X/Y` like PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The invalid LSN, `0/0`.
    pub const INVALID: Lsn = Lsn(0);

    /// Whether this is a real position (not `0/0`).
    pub fn is_valid(self) -> bool {
        self.0 != 0
    }

    /// The segment holding this position, for a segment size in bytes.
    pub fn segment(self, segment_size: u64) -> SegmentNo {
        SegmentNo(self.0 / segment_size)
    }

    /// Offset of this position inside its segment.
    pub fn segment_offset(self, segment_size: u64) -> u64 {
        self.0 % segment_size
    }

    /// Offset of this position inside its WAL page.
    pub fn page_offset(self, page_size: u64) -> u64 {
        self.0 % page_size
    }

    /// `self - other` in bytes, or `None` if `other` is later.
    pub fn checked_sub(self, other: Lsn) -> Option<u64> {
        self.0.checked_sub(other.0)
    }

    /// This position advanced by `bytes`.
    pub fn advance(self, bytes: u64) -> Lsn {
        Lsn(self.0 + bytes)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// The text is not an LSN of the form `X/Y` with hexadecimal halves.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid LSN {0:?}: expected two hexadecimal numbers separated by '/', like 0/16B3748")]
pub struct ParseLsnError(pub String);

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError(s.to_string());
        let (hi, lo) = s.trim().split_once('/').ok_or_else(err)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

impl serde::Serialize for Lsn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Lsn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

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
    fn lsn_round_trips_through_text() {
        for text in ["0/0", "0/16B3748", "1/0", "FFFFFFFF/FFFFFFFF"] {
            let lsn: Lsn = text.parse().unwrap();
            assert_eq!(lsn.to_string(), text);
        }
        assert_eq!("0/16b3748".parse::<Lsn>().unwrap(), Lsn(0x16B3748));
        assert!("16B3748".parse::<Lsn>().is_err());
        assert!("0/1/2".parse::<Lsn>().is_err());
        assert!("x/1".parse::<Lsn>().is_err());
    }

    #[test]
    fn segment_names_match_postgres() {
        let seg16 = 16 * 1024 * 1024;
        let lsn: Lsn = "0/3000028".parse().unwrap();
        let name = SegmentName {
            timeline: TimelineId(1),
            segno: lsn.segment(seg16),
        };
        assert_eq!(name.file_name(seg16), "000000010000000000000003");
        assert_eq!(lsn.segment_offset(seg16), 0x28);
        let lsn: Lsn = "1/FF000000".parse().unwrap();
        let name = SegmentName {
            timeline: TimelineId(2),
            segno: lsn.segment(seg16),
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
