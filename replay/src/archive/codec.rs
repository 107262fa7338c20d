//! The CPU side of archive files: zstd and the first page header.
//!
//! Everything here is synchronous and meant to run on a blocking thread
//! (`spawn_blocking`), never on a runtime worker: decompressing a 16 MiB
//! segment takes milliseconds of CPU.

use std::io::Read;

use crate::wal::{is_valid_segment_size, PageHeader, LONG_HEADER_LEN};

/// zstd level for segments written to the archive: fast enough to keep up
/// with streaming WAL on one core, and WAL compresses well even so.
pub const ZSTD_LEVEL: i32 = 3;

/// How much of a compressed file is enough to decompress its first bytes:
/// a zstd frame header plus one full block (at most 128 KiB) with room to spare.
pub(super) const HEADER_PROBE_LEN: u64 = 256 * 1024;

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
}

/// The content of a segment file, decompressed if needed, checked to be
/// exactly `segment_size` bytes.
pub(super) fn segment_bytes(
    stored: bytes::Bytes,
    compressed: bool,
    segment_size: u32,
) -> Result<Vec<u8>, Damage> {
    let size = segment_size as usize;
    let out = if compressed {
        let mut out = Vec::with_capacity(size);
        let decoder =
            zstd::stream::read::Decoder::with_buffer(&stored[..]).map_err(|e| Damage {
                reason: "cannot start zstd decompression".to_string(),
                source: Some(e),
            })?;
        // One byte more than a segment is enough to know it is too long.
        decoder
            .take(u64::from(segment_size) + 1)
            .read_to_end(&mut out)
            .map_err(|e| Damage {
                reason: "not a valid zstd file".to_string(),
                source: Some(e),
            })?;
        out
    } else {
        Vec::from(stored)
    };
    if out.len() != size {
        let what = if compressed { "decompressed " } else { "" };
        let len = if out.len() > size {
            "more than".to_string()
        } else {
            out.len().to_string()
        };
        return Err(Damage::new(format!(
            "{what}size is {len} bytes, not the segment size {segment_size} (truncated or not a segment)"
        )));
    }
    Ok(out)
}

/// Compresses a segment for the archive.
pub(super) fn compress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, ZSTD_LEVEL)
}

/// The segment size a segment file's first page header states (`xlp_seg_size`
/// of the long page header). `head` is the beginning of the file, compressed
/// or not; only the first 40 bytes of content are looked at.
pub(super) fn segment_size_in_header(head: &[u8], compressed: bool) -> Result<u32, Damage> {
    let mut first = [0u8; LONG_HEADER_LEN as usize];
    if compressed {
        let mut decoder = zstd::stream::read::Decoder::with_buffer(head).map_err(|e| Damage {
            reason: "cannot start zstd decompression".to_string(),
            source: Some(e),
        })?;
        decoder.read_exact(&mut first).map_err(|e| Damage {
            reason: "cannot decompress the first page header".to_string(),
            source: Some(e),
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
mod tests {
    use super::*;

    /// A long page header as PostgreSQL 15 writes it at a segment start.
    fn long_header(segment_size: u32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&0xD110u16.to_le_bytes()); // xlp_magic
        h.extend_from_slice(&2u16.to_le_bytes()); // xlp_info: XLP_LONG_HEADER
        h.extend_from_slice(&1u32.to_le_bytes()); // xlp_tli
        h.extend_from_slice(&0x0700_0000u64.to_le_bytes()); // xlp_pageaddr
        h.extend_from_slice(&0u32.to_le_bytes()); // xlp_rem_len
        h.extend_from_slice(&0u32.to_le_bytes()); // padding
        h.extend_from_slice(&42u64.to_le_bytes()); // xlp_sysid
        h.extend_from_slice(&segment_size.to_le_bytes()); // xlp_seg_size
        h.extend_from_slice(&8192u32.to_le_bytes()); // xlp_xlog_blcksz
        h
    }

    #[test]
    fn segment_size_from_plain_and_compressed_heads() {
        for size in [1 << 20, 16 << 20, 1 << 30] {
            let mut segment = long_header(size);
            segment.resize(64 * 1024, 7);
            assert_eq!(segment_size_in_header(&segment, false).unwrap(), size);
            let packed = compress(&segment).unwrap();
            assert_eq!(segment_size_in_header(&packed, true).unwrap(), size);
            // A prefix of the compressed file is enough.
            let short = &packed[..packed.len().min(HEADER_PROBE_LEN as usize)];
            assert_eq!(segment_size_in_header(short, true).unwrap(), size);
        }
    }

    #[test]
    fn bad_heads_are_damage() {
        let short = segment_size_in_header(&[0xD1; 20], false).unwrap_err();
        assert!(short.reason.contains("too short"), "{}", short.reason);
        let mut no_long = long_header(1 << 20);
        no_long[2] = 0;
        let e = segment_size_in_header(&no_long, false).unwrap_err();
        assert!(e.reason.contains("no long page header"), "{}", e.reason);
        let odd = long_header(3 << 20);
        let e = segment_size_in_header(&odd, false).unwrap_err();
        assert!(e.reason.contains("3145728"), "{}", e.reason);
        let e = segment_size_in_header(b"definitely not zstd at all, 40+ bytes long", true)
            .unwrap_err();
        assert!(e.source.is_some());
    }

    #[test]
    fn segment_bytes_checks_the_size() {
        let seg = 1u32 << 20;
        let data = vec![5u8; seg as usize];
        let packed = bytes::Bytes::from(compress(&data).unwrap());
        assert_eq!(segment_bytes(packed.clone(), true, seg).unwrap(), data);
        let e = segment_bytes(packed.clone(), true, seg / 2).unwrap_err();
        assert!(e.reason.contains("more than"), "{}", e.reason);
        let truncated = packed.slice(..packed.len() / 2);
        assert!(segment_bytes(truncated, true, seg).is_err());
        let plain = bytes::Bytes::from(data[..1000].to_vec());
        let e = segment_bytes(plain, false, seg).unwrap_err();
        assert!(e.reason.contains("1000 bytes"), "{}", e.reason);
    }
}
