//! The CPU side of archive files: decompression, checksums and the first
//! page header.
//!
//! Everything here is synchronous and meant to run on a blocking thread
//! (`spawn_blocking`), never on a runtime worker: decompressing a 16 MiB
//! segment takes milliseconds of CPU.

use std::io::Read;

use sha1::{Digest, Sha1};

use crate::wal::{is_valid_segment_size, PageHeader, LONG_HEADER_LEN};

mod kind;

pub use kind::Codec;

/// zstd level for segments written to the archive: fast enough to keep up
/// with streaming WAL on one core, and WAL compresses well even so.
pub const ZSTD_LEVEL: i32 = 3;

/// Why a file's content is unusable (turned into [`ArchiveError::Corrupt`](super::ArchiveError::Corrupt)).
#[derive(Debug)]
pub(super) struct Damage {
    pub(super) reason: String,
    pub(super) source: Option<std::io::Error>,
}

impl Damage {
    fn new(reason: String) -> Damage {
        Damage {
            reason,
            source: None,
        }
    }

    fn io(reason: String, source: std::io::Error) -> Damage {
        Damage {
            reason,
            source: Some(source),
        }
    }
}

/// The content of a segment file, decompressed, checked to be exactly
/// `segment_size` bytes and, when the file's name carries one, to have the
/// SHA-1 checksum `sha1` (of the decompressed content).
pub(super) fn segment_bytes(
    stored: bytes::Bytes,
    codec: Codec,
    sha1: Option<&[u8; 20]>,
    segment_size: u32,
) -> Result<Vec<u8>, Damage> {
    let size = segment_size as usize;
    let out = if codec.is_compressed() {
        let mut out = Vec::with_capacity(size);
        let decoder = codec
            .reader(&stored)
            .map_err(|e| Damage::io(format!("cannot start {codec} decompression"), e))?;
        // One byte more than a segment is enough to know it is too long.
        decoder
            .take(u64::from(segment_size) + 1)
            .read_to_end(&mut out)
            .map_err(|e| Damage::io(format!("not a valid {codec} file"), e))?;
        out
    } else {
        Vec::from(stored)
    };
    if out.len() != size {
        let what = if codec.is_compressed() {
            "decompressed "
        } else {
            ""
        };
        let len = if out.len() > size {
            "more than".to_string()
        } else {
            out.len().to_string()
        };
        return Err(Damage::new(format!(
            "{what}size is {len} bytes, not the segment size {segment_size} (truncated or not a segment)"
        )));
    }
    if let Some(expected) = sha1 {
        let actual: [u8; 20] = Sha1::digest(&out).into();
        if &actual != expected {
            return Err(Damage::new(format!(
                "its content's SHA-1 checksum is {}, not the {} its name states",
                hex(&actual),
                hex(expected)
            )));
        }
    }
    Ok(out)
}

/// Lower-case hexadecimal digits of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The whole decompressed content of a small file (a timeline history
/// file), at most `limit` bytes.
pub(super) fn small_file(stored: &[u8], codec: Codec, limit: u64) -> Result<Vec<u8>, Damage> {
    let mut out = Vec::new();
    codec
        .reader(stored)
        .map_err(|e| Damage::io(format!("cannot start {codec} decompression"), e))?
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| Damage::io(format!("not a valid {codec} file"), e))?;
    if out.len() as u64 > limit {
        return Err(Damage::new(format!("larger than {limit} bytes")));
    }
    Ok(out)
}

/// Compresses a segment for the archive.
pub(super) fn compress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, ZSTD_LEVEL)
}

/// The segment size a segment file's first page header states (`xlp_seg_size`
/// of the long page header). `head` is the beginning of the file (at least
/// [`Codec::head_len`] bytes of it, or all of it), compressed with `codec`;
/// only the first 40 bytes of content are looked at.
pub(super) fn segment_size_in_header(head: &[u8], codec: Codec) -> Result<u32, Damage> {
    let mut first = [0u8; LONG_HEADER_LEN as usize];
    if codec.is_compressed() {
        let mut decoder = codec
            .reader(head)
            .map_err(|e| Damage::io(format!("cannot start {codec} decompression"), e))?;
        decoder.read_exact(&mut first).map_err(|e| {
            Damage::io(
                format!("cannot decompress the first page header ({codec})"),
                e,
            )
        })?;
    } else {
        let bytes = head.get(..first.len()).ok_or_else(|| {
            Damage::new(format!(
                "only {} bytes: too short for a WAL page header",
                head.len()
            ))
        })?;
        first.copy_from_slice(bytes);
    }
    let header = PageHeader::parse(&first)
        .map_err(|e| Damage::new(format!("unreadable first page header: {e}")))?;
    let long = header.long.ok_or_else(|| {
        Damage::new("the first page has no long page header: not the start of a WAL segment".into())
    })?;
    if !is_valid_segment_size(long.segment_size) {
        return Err(Damage::new(format!(
            "the first page header states segment size {}, which PostgreSQL does not allow",
            long.segment_size
        )));
    }
    Ok(long.segment_size)
}

#[cfg(test)]
mod tests;
