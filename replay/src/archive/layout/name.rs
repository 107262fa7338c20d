//! File names of each layout, split without knowing the segment size.
//!
//! Segments are named as PostgreSQL names them, 24 hexadecimal digits
//! (`TTTTTTTTXXXXXXXXYYYYYYYY`), then `.partial` for the unfinished tail of
//! the WAL, then (pgBackRest) `-` and the SHA-1 of the content in 40
//! hexadecimal digits, then the compression's extension. Timeline history
//! files are `TTTTTTTT.history` with the extension. Anything else (backup
//! labels, temporary files, `archive.info`) is not a WAL file and ignored.
//!
//! The 24 digits only become a segment number once the segment size is
//! known (it fixes how many segments share one high part), so names are
//! split here and resolved later.

use crate::archive::codec::Codec;
use crate::lsn::TimelineId;

use super::Layout;

/// Suffix of the unfinished last segment.
const PARTIAL: &str = ".partial";
/// Suffix of timeline history files.
const HISTORY: &str = ".history";

/// A WAL file's name, split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::archive) enum RawName<'a> {
    /// A segment file.
    Segment {
        /// The 24 hexadecimal digits.
        stem: &'a str,
        /// The unfinished tail (`.partial`).
        partial: bool,
        /// How it is compressed.
        codec: Codec,
        /// The SHA-1 of its content, when its name carries it.
        sha1: Option<[u8; 20]>,
    },
    /// A timeline history file.
    History {
        /// Its timeline.
        timeline: TimelineId,
        /// How it is compressed.
        codec: Codec,
    },
}

impl Layout {
    /// The compressions a layout's files come in (besides none).
    fn codecs(self) -> &'static [Codec] {
        match self {
            Layout::Walfill => &[Codec::Zstd],
            Layout::Flat | Layout::WalG => &Codec::COMPRESSED,
            Layout::PgBackRest => &[Codec::Gzip, Codec::Lz4, Codec::Zstd, Codec::Bzip2],
        }
    }

    /// Splits the name of a file at `path` below the layout's WAL folder
    /// (`a/b` for a file in a subfolder); `None` when it is no WAL file.
    pub(in crate::archive) fn parse_name(self, path: &str) -> Option<RawName<'_>> {
        let (folder, file_name) = match path.rsplit_once('/') {
            Some((folder, file_name)) => (Some(folder), file_name),
            None => (None, path),
        };
        let (rest, codec) = Codec::split(file_name, self.codecs());
        if let Some(tli) = rest.strip_suffix(HISTORY) {
            // walfill stores history files as they are.
            let plain_only = self == Layout::Walfill && codec.is_compressed();
            if folder.is_some() || plain_only || !is_hex(tli, 8) {
                return None;
            }
            let timeline = TimelineId(u32::from_str_radix(tli, 16).ok()?);
            return Some(RawName::History { timeline, codec });
        }
        let (rest, sha1) = match self {
            Layout::PgBackRest => {
                let (rest, sum) = rest.rsplit_once('-')?;
                (rest, Some(sha1_digits(sum)?))
            }
            _ => (rest, None),
        };
        let (stem, partial) = match rest.strip_suffix(PARTIAL) {
            Some(stem) => (stem, true),
            None => (rest, false),
        };
        // pgBackRest files are in a folder named after their first 16 digits.
        let placed = match (self, folder) {
            (Layout::PgBackRest, Some(folder)) => stem.get(..16) == Some(folder),
            (Layout::PgBackRest, None) => false,
            (_, folder) => folder.is_none(),
        };
        (placed && is_hex(stem, 24)).then_some(RawName::Segment {
            stem,
            partial,
            codec,
            sha1,
        })
    }
}

/// Whether `s` is exactly `len` hexadecimal digits.
pub(in crate::archive) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// 40 hexadecimal digits as the 20 bytes of a SHA-1.
fn sha1_digits(text: &str) -> Option<[u8; 20]> {
    if !is_hex(text, 40) {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "6e0c6f0d0c8c9a1b6b2f2e3c4d5e6f708192a3b4";

    fn segment(stem: &str, partial: bool, codec: Codec) -> Option<RawName<'_>> {
        Some(RawName::Segment {
            stem,
            partial,
            codec,
            sha1: None,
        })
    }

    #[test]
    fn walfill_names() {
        let l = Layout::Walfill;
        let stem = "000000010000000000000007";
        assert_eq!(l.parse_name(stem), segment(stem, false, Codec::Plain));
        assert_eq!(
            l.parse_name("000000010000000000000007.partial.zst"),
            segment(stem, true, Codec::Zstd)
        );
        assert_eq!(
            l.parse_name("0000000A.history"),
            Some(RawName::History {
                timeline: TimelineId(10),
                codec: Codec::Plain
            })
        );
        for other in [
            "000000010000000000000002.00000028.backup",
            "000000010000000000000007.gz",
            "000000010000000000000007.zst.tmp",
            "000000010000000000000007.zst.partial",
            "00000001000000000000007.zst",
            "0000000100000000000000070",
            "00000001000000000000000G",
            "00000002.history.zst",
            "0000002.history",
            "sub/000000010000000000000007",
            "README",
            "",
        ] {
            assert_eq!(l.parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn flat_and_wal_g_names_take_every_codec() {
        let stem = "00000002000000030000004F";
        for l in [Layout::Flat, Layout::WalG] {
            for (ext, codec) in [
                ("", Codec::Plain),
                (".gz", Codec::Gzip),
                (".zst", Codec::Zstd),
                (".lz4", Codec::Lz4),
                (".bz2", Codec::Bzip2),
                (".br", Codec::Brotli),
                (".lzma", Codec::Lzma),
            ] {
                assert_eq!(
                    l.parse_name(&format!("{stem}{ext}")),
                    segment(stem, false, codec)
                );
                assert_eq!(
                    l.parse_name(&format!("{stem}.partial{ext}")),
                    segment(stem, true, codec)
                );
                assert_eq!(
                    l.parse_name(&format!("00000003.history{ext}")),
                    Some(RawName::History {
                        timeline: TimelineId(3),
                        codec
                    })
                );
            }
            assert_eq!(l.parse_name(&format!("{stem}.xz")), None);
            assert_eq!(l.parse_name(&format!("x/{stem}")), None);
            assert_eq!(l.parse_name(&format!("{stem}-{SUM}.gz")), None);
        }
    }

    #[test]
    fn pgbackrest_names_carry_a_checksum_in_their_folder() {
        let l = Layout::PgBackRest;
        let stem = "000000010000000000000007";
        let mut sum = [0u8; 20];
        sum[0] = 0x6e;
        sum[1] = 0x0c;
        sum[19] = 0xb4;
        let path = format!("0000000100000000/{stem}-{SUM}.lz4");
        let Some(RawName::Segment {
            stem: got,
            partial,
            codec,
            sha1: Some(digest),
        }) = l.parse_name(&path)
        else {
            panic!("not parsed");
        };
        assert_eq!((got, partial, codec), (stem, false, Codec::Lz4));
        assert_eq!(
            (digest[0], digest[1], digest[19]),
            (sum[0], sum[1], sum[19])
        );
        for (ext, codec) in [
            ("", Codec::Plain),
            (".gz", Codec::Gzip),
            (".zst", Codec::Zstd),
            (".bz2", Codec::Bzip2),
        ] {
            let name = format!("0000000100000000/{stem}.partial-{SUM}{ext}");
            assert!(
                matches!(
                    l.parse_name(&name),
                    Some(RawName::Segment { partial: true, codec: c, sha1: Some(_), .. }) if c == codec
                ),
                "{name}"
            );
        }
        assert_eq!(
            l.parse_name("00000002.history"),
            Some(RawName::History {
                timeline: TimelineId(2),
                codec: Codec::Plain
            })
        );
        for other in [
            format!("{stem}-{SUM}.gz"),
            format!("0000000100000001/{stem}-{SUM}.gz"),
            format!("0000000100000000/{stem}.gz"),
            format!("0000000100000000/{stem}-{}.gz", &SUM[1..]),
            format!("0000000100000000/{stem}-{SUM}.br"),
            "archive.info".to_string(),
            "0000000100000000/00000002.history".to_string(),
        ] {
            assert_eq!(l.parse_name(&other), None, "{other}");
        }
    }
}
