//! Names of the segment files walfill writes under the archive's `wal/`
//! directory (names of every layout are split in `layout::name`).
//!
//! Segments are named as PostgreSQL names them, 24 hexadecimal digits
//! (`TTTTTTTTXXXXXXXXYYYYYYYY`, see [`SegmentName`]), followed by `.partial`
//! for the unfinished tail of the WAL and `.zst` when compressed with zstd.
//! Timeline history files are `TTTTTTTT.history`. Anything else (backup
//! labels, temporary files, other tools' suffixes) is not ours and ignored.
//!
//! The 24 digits only become a segment number once the segment size is
//! known (it fixes how many segments share one high part), so names are
//! first split syntactically and resolved later.

use crate::lsn::SegmentName;

use super::layout::{Layout, RawName};

/// Suffix of the unfinished last segment.
const PARTIAL: &str = ".partial";
/// Suffix of zstd-compressed files.
const ZST: &str = ".zst";

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
        match Layout::Walfill.parse_name(file_name)? {
            RawName::Segment {
                stem,
                partial,
                codec,
                ..
            } => Some(SegmentFile {
                name: SegmentName::parse(stem, u64::from(segment_size))?,
                partial,
                compressed: codec.is_compressed(),
            }),
            RawName::History { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::{Lsn, SegmentNo, TimelineId};

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
    fn other_files_are_not_segment_files() {
        for name in [
            "000000010000000000000002.00000028.backup",
            "000000010000000000000007.gz",
            "000000010000000000000007.zst.partial",
            "0000000A.history",
            "README",
        ] {
            assert_eq!(SegmentFile::parse(name, MIB), None, "{name}");
        }
    }
}
