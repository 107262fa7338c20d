//! Names of the files under the archive's `wal/` directory.
//!
//! Segments are named as PostgreSQL names them, 24 hexadecimal digits
//! (`TTTTTTTTXXXXXXXXYYYYYYYY`, see [`SegmentName`]), followed by `.partial`
//! for the unfinished tail of the WAL and `.zst` when compressed with zstd.
//! Timeline history files are `TTTTTTTT.history`. Anything else (backup
//! labels, temporary files, other tools' suffixes) is not ours and ignored.
//!
//! The 24 digits only become a segment number once the segment size is
//! known (it fixes how many segments share one high part), so names are
//! first split syntactically ([`RawName`]) and resolved later.

use crate::lsn::{SegmentName, TimelineId};

/// Suffix of the unfinished last segment.
const PARTIAL: &str = ".partial";
/// Suffix of zstd-compressed files.
const ZST: &str = ".zst";
/// Suffix of timeline history files.
const HISTORY: &str = ".history";

/// A segment file name: which segment, whether it is the unfinished tail,
/// and whether it is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentFile {
    /// The segment.
    pub name: SegmentName,
    /// A `.partial` file: the segment was not finished when it was written.
    pub partial: bool,
    /// A `.zst` file.
    pub compressed: bool,
}

impl SegmentFile {
    /// The file name, e.g. `000000010000000000000007.partial.zst`.
    pub fn file_name(&self, segment_size: u32) -> String {
        let mut name = self.name.file_name(u64::from(segment_size));
        if self.partial {
            name.push_str(PARTIAL);
        }
        if self.compressed {
            name.push_str(ZST);
        }
        name
    }

    /// Parses a file name, for a segment size; `None` for anything that is
    /// not one of our segment files.
    pub fn parse(file_name: &str, segment_size: u32) -> Option<SegmentFile> {
        match RawName::parse(file_name)? {
            RawName::Segment {
                stem,
                partial,
                compressed,
            } => Some(SegmentFile {
                name: SegmentName::parse(stem, u64::from(segment_size))?,
                partial,
                compressed,
            }),
            RawName::History(_) => None,
        }
    }
}

/// A file name under `wal/`, split without knowing the segment size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RawName<'a> {
    /// A segment file.
    Segment {
        /// The 24 hexadecimal digits.
        stem: &'a str,
        /// Ends in `.partial` (before any `.zst`).
        partial: bool,
        /// Ends in `.zst`.
        compressed: bool,
    },
    /// A timeline history file.
    History(TimelineId),
}

impl<'a> RawName<'a> {
    /// Splits a file name; `None` when it is none of ours.
    pub(super) fn parse(file_name: &'a str) -> Option<RawName<'a>> {
        let (rest, compressed) = match file_name.strip_suffix(ZST) {
            Some(rest) => (rest, true),
            None => (file_name, false),
        };
        if let Some(tli) = rest.strip_suffix(HISTORY) {
            if compressed || !is_hex(tli, 8) {
                return None;
            }
            return u32::from_str_radix(tli, 16)
                .ok()
                .map(|t| RawName::History(TimelineId(t)));
        }
        let (stem, partial) = match rest.strip_suffix(PARTIAL) {
            Some(stem) => (stem, true),
            None => (rest, false),
        };
        is_hex(stem, 24).then_some(RawName::Segment {
            stem,
            partial,
            compressed,
        })
    }
}

/// Whether `s` is exactly `len` hexadecimal digits.
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::{Lsn, SegmentNo};

    const MIB: u32 = 1 << 20;

    fn file(tli: u32, segno: u64, partial: bool, compressed: bool) -> SegmentFile {
        SegmentFile {
            name: SegmentName {
                timeline: TimelineId(tli),
                segno: SegmentNo(segno),
            },
            partial,
            compressed,
        }
    }

    #[test]
    fn names_with_16_mib_segments() {
        let seg = 16 * MIB;
        // 0/3000028 is in segment 3; 1/FF000000 in segment 256 + 255.
        let segno = SegmentNo::containing(Lsn(0x1_FF00_0000), u64::from(seg)).0;
        let cases = [
            (file(1, 3, false, false), "000000010000000000000003"),
            (file(1, 3, false, true), "000000010000000000000003.zst"),
            (
                file(2, segno, true, false),
                "0000000200000001000000FF.partial",
            ),
            (
                file(2, segno, true, true),
                "0000000200000001000000FF.partial.zst",
            ),
        ];
        for (f, text) in cases {
            assert_eq!(f.file_name(seg), text);
            assert_eq!(SegmentFile::parse(text, seg), Some(f), "{text}");
        }
        // Only 256 segments per high part with 16 MiB segments.
        assert_eq!(SegmentFile::parse("000000010000000000000100", seg), None);
    }

    #[test]
    fn names_with_1_mib_segments() {
        let seg = MIB;
        let cases = [
            (file(1, 7, false, true), "000000010000000000000007.zst"),
            (file(1, 4095, false, false), "000000010000000000000FFF"),
            (
                file(1, 4096, true, false),
                "000000010000000100000000.partial",
            ),
            (
                file(3, 2 * 4096 + 0x100, false, false),
                "000000030000000200000100",
            ),
        ];
        for (f, text) in cases {
            assert_eq!(f.file_name(seg), text);
            assert_eq!(SegmentFile::parse(text, seg), Some(f), "{text}");
        }
        assert_eq!(SegmentFile::parse("000000010000000000001000", seg), None);
        // The same digits are a different segment with another size.
        assert_eq!(
            SegmentFile::parse("000000010000000100000000", seg)
                .unwrap()
                .name
                .segno,
            SegmentNo(4096)
        );
        assert_eq!(
            SegmentFile::parse("000000010000000100000000", 16 * MIB)
                .unwrap()
                .name
                .segno,
            SegmentNo(256)
        );
    }

    #[test]
    fn other_files_are_not_ours() {
        for name in [
            "000000010000000000000002.00000028.backup",
            "000000010000000000000007.gz",
            "000000010000000000000007.zst.tmp",
            "000000010000000000000007.zst.partial",
            "00000001000000000000007.zst",
            "0000000100000000000000070",
            "00000001000000000000000G",
            "00000002.history.zst",
            "0000002.history",
            "README",
            "",
        ] {
            assert_eq!(RawName::parse(name), None, "{name}");
            assert_eq!(SegmentFile::parse(name, MIB), None, "{name}");
        }
        assert_eq!(
            RawName::parse("0000000A.history"),
            Some(RawName::History(TimelineId(10)))
        );
        assert_eq!(SegmentFile::parse("0000000A.history", MIB), None);
        assert_eq!(
            RawName::parse("000000010000000000000007.partial.zst"),
            Some(RawName::Segment {
                stem: "000000010000000000000007",
                partial: true,
                compressed: true
            })
        );
    }
}
