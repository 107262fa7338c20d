//! The compression formats archived WAL files come in, told by their
//! file name's extension.
//!
//! walfill writes plain or zstd files; other tools' archives also hold gzip
//! (`gzip`, pgBackRest), LZ4 frames (the `lz4` tool, WAL-G, pgBackRest),
//! bzip2 (pgBackRest), Brotli streams (WAL-G) and LZMA "alone" files (WAL-G,
//! `xz --format=lzma`).

use std::fmt;
use std::io::{BufReader, Read};

/// Decoders read their input through a buffer this large.
const BUFFER: usize = 64 * 1024;

/// How an archived file is compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Codec {
    /// Not compressed.
    #[default]
    Plain,
    /// zstd (`.zst`).
    Zstd,
    /// gzip (`.gz`).
    Gzip,
    /// LZ4 frame format (`.lz4`).
    Lz4,
    /// bzip2 (`.bz2`).
    Bzip2,
    /// Brotli (`.br`).
    Brotli,
    /// LZMA "alone" format (`.lzma`).
    Lzma,
}

impl Codec {
    /// Every codec with an extension, in the order names are tried.
    pub const COMPRESSED: [Codec; 6] = [
        Codec::Zstd,
        Codec::Gzip,
        Codec::Lz4,
        Codec::Bzip2,
        Codec::Brotli,
        Codec::Lzma,
    ];

    /// The file name extension, with its dot (`""` for plain files).
    pub fn extension(self) -> &'static str {
        match self {
            Codec::Plain => "",
            Codec::Zstd => ".zst",
            Codec::Gzip => ".gz",
            Codec::Lz4 => ".lz4",
            Codec::Bzip2 => ".bz2",
            Codec::Brotli => ".br",
            Codec::Lzma => ".lzma",
        }
    }

    /// The codec of the first extension of `allowed` that `file_name` ends
    /// with, and the name without it; plain when none does.
    pub(in crate::archive) fn split<'a>(file_name: &'a str, allowed: &[Codec]) -> (&'a str, Codec) {
        allowed
            .iter()
            .find_map(|&c| file_name.strip_suffix(c.extension()).map(|rest| (rest, c)))
            .filter(|(_, c)| *c != Codec::Plain)
            .unwrap_or((file_name, Codec::Plain))
    }

    /// Whether the file is compressed.
    pub fn is_compressed(self) -> bool {
        self != Codec::Plain
    }

    /// A reader of the decompressed content of `stored`.
    pub(in crate::archive) fn reader<'a>(
        self,
        stored: &'a [u8],
    ) -> std::io::Result<Box<dyn Read + 'a>> {
        Ok(match self {
            Codec::Plain => Box::new(stored),
            Codec::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(stored)?),
            Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(stored)),
            Codec::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(stored)),
            Codec::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(stored)),
            Codec::Brotli => Box::new(brotli::Decompressor::new(stored, BUFFER)),
            Codec::Lzma => {
                let stream = xz2::stream::Stream::new_lzma_decoder(u64::MAX)
                    .map_err(std::io::Error::other)?;
                let input = BufReader::with_capacity(BUFFER, stored);
                Box::new(xz2::bufread::XzDecoder::new_stream(input, stream))
            }
        })
    }

    /// How much of a stored file is enough to decompress its first bytes;
    /// `None` when only the whole file is sure to be (formats whose first
    /// block can be several MiB: bzip2, LZ4 frames with 4 MiB blocks, Brotli
    /// meta-blocks).
    pub(in crate::archive) fn head_len(self) -> Option<u64> {
        match self {
            Codec::Plain => Some(u64::from(crate::wal::LONG_HEADER_LEN)),
            Codec::Zstd | Codec::Gzip | Codec::Lzma => Some(256 * 1024),
            Codec::Lz4 | Codec::Bzip2 | Codec::Brotli => None,
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Codec::Plain => "uncompressed",
            Codec::Zstd => "zstd",
            Codec::Gzip => "gzip",
            Codec::Lz4 => "lz4",
            Codec::Bzip2 => "bzip2",
            Codec::Brotli => "brotli",
            Codec::Lzma => "lzma",
        })
    }
}
