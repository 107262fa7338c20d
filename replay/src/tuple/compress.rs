//! Decompression of inline-compressed and TOASTed values.
//!
//! Both methods store no size of their own: the uncompressed size comes from
//! the value's metadata (`va_tcinfo`, or the TOAST pointer's `va_rawsize`),
//! and the output must be exactly that long. Before allocating, the declared
//! size is checked against the most the input could possibly expand to, so a
//! corrupt size cannot make us allocate a gigabyte for a few input bytes.

use super::error::{TupleError, TupleErrorKind};
use super::pglz;

/// A compression method of inline-compressed or TOASTed values
/// (`ToastCompressionId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// PostgreSQL's own LZ-family compressor (method id 0).
    Pglz,
    /// LZ4 block format (method id 1).
    Lz4,
}

impl Compression {
    /// The method for the two method bits of `va_tcinfo` / `va_extinfo`.
    pub fn from_id(id: u8) -> Result<Compression, TupleError> {
        match id {
            0 => Ok(Compression::Pglz),
            1 => Ok(Compression::Lz4),
            method => Err(TupleErrorKind::UnknownCompression { method }.into()),
        }
    }
}

/// Upper bound on LZ4 expansion: every input byte of a match-length
/// extension adds at most 255 output bytes.
const LZ4_MAX_RATIO: usize = 255;

/// Decompresses `data` with `method` into exactly `raw_size` bytes.
///
/// pglz is checked the strict way PostgreSQL checks whole values: all input
/// consumed and exactly `raw_size` bytes produced. lz4 data is one LZ4 block
/// and must also decompress to exactly `raw_size` bytes. Errors carry the
/// offset inside `data` where known.
pub fn decompress(method: Compression, data: &[u8], raw_size: u32) -> Result<Vec<u8>, TupleError> {
    match method {
        Compression::Pglz => pglz::decompress(data, raw_size as usize),
        Compression::Lz4 => lz4_decompress(data, raw_size as usize),
    }
}

fn lz4_decompress(data: &[u8], raw_size: usize) -> Result<Vec<u8>, TupleError> {
    let size_error = || {
        TupleError::new(TupleErrorKind::DecompressedSize {
            raw_size: raw_size as u64,
            compressed: data.len(),
        })
    };
    if raw_size > data.len().saturating_mul(LZ4_MAX_RATIO) {
        return Err(size_error());
    }
    let mut out = vec![0u8; raw_size];
    let n = lz4_flex::block::decompress_into(data, &mut out)
        .map_err(|source| TupleError::new(TupleErrorKind::CorruptLz4 { source }))?;
    if n != raw_size {
        return Err(size_error());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_input_never_panics(
            lz4 in any::<bool>(),
            data in prop::collection::vec(any::<u8>(), 0..400),
            raw_size in prop_oneof![0u32..4000, any::<u32>()],
        ) {
            let method = if lz4 { Compression::Lz4 } else { Compression::Pglz };
            let _ = decompress(method, &data, raw_size);
        }

        #[test]
        fn lz4_round_trips(raw in prop::collection::vec(0u8..4, 0..3000)) {
            let packed = lz4_flex::block::compress(&raw);
            prop_assert_eq!(decompress(Compression::Lz4, &packed, raw.len() as u32).unwrap(), raw);
        }
    }

    #[test]
    fn lz4_round_trip() {
        let raw: Vec<u8> = (0..20_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let packed = lz4_flex::block::compress(&raw);
        let out = decompress(Compression::Lz4, &packed, raw.len() as u32).unwrap();
        assert_eq!(out, raw);
    }

    #[test]
    fn lz4_size_must_match() {
        let raw = b"the quick brown fox jumps over the lazy dog, the quick brown fox".repeat(4);
        let packed = lz4_flex::block::compress(&raw);
        let short = decompress(Compression::Lz4, &packed, raw.len() as u32 - 1).unwrap_err();
        assert!(matches!(short.kind, TupleErrorKind::CorruptLz4 { .. }));
        let long = decompress(Compression::Lz4, &packed, raw.len() as u32 + 1).unwrap_err();
        assert!(matches!(long.kind, TupleErrorKind::DecompressedSize { .. }));
        let huge = decompress(Compression::Lz4, &packed, 1 << 29).unwrap_err();
        assert!(matches!(huge.kind, TupleErrorKind::DecompressedSize { .. }));
    }
}
