//! TOAST reassembly tests, using values PostgreSQL compressed (see
//! `pglz/tests.rs` for where they come from).

use super::*;
use crate::tuple::compress::Compression;
use crate::tuple::pglz::tests::{hex, sample_text, PG_LZ4_SAMPLE, PG_PGLZ_SAMPLE};

/// The bytes a compressed value stores in its chunks (everything after the
/// 4-byte header) and a pointer to them.
fn stored(sample: &str, method: Compression, value_id: u32) -> (Vec<u8>, ToastPointer) {
    let v = hex(sample);
    let body = v[4..].to_vec();
    let p = ToastPointer {
        raw_size: sample_text().len() as i32 + 4,
        ext_size: body.len() as u32,
        compression: Some(method),
        value_id,
        toast_relid: 16_390,
    };
    (body, p)
}

fn add_in_chunks(set: &mut ToastChunks, id: u32, body: &[u8], size: usize) {
    for (seq, chunk) in body.chunks(size).enumerate() {
        set.add_chunk(id, seq as i32, chunk).unwrap();
    }
}

#[test]
fn resolves_compressed_values() {
    let mut set = ToastChunks::new();
    let (pglz, p1) = stored(PG_PGLZ_SAMPLE, Compression::Pglz, 100);
    let (lz4, p2) = stored(PG_LZ4_SAMPLE, Compression::Lz4, 101);
    add_in_chunks(&mut set, 100, &pglz, 50);
    add_in_chunks(&mut set, 101, &lz4, 7);
    assert_eq!(set.bytes_held(), pglz.len() + lz4.len());
    assert_eq!(set.resolve(&p1).unwrap().unwrap(), sample_text());
    assert_eq!(set.resolve(&p2).unwrap().unwrap(), sample_text());
    assert_eq!(set.take(&p2).unwrap().unwrap(), sample_text());
    assert!(set.resolve(&p2).is_none());
    assert_eq!(set.bytes_held(), pglz.len());
    set.clear();
    assert!(set.is_empty() && set.bytes_held() == 0);
    assert!(set.resolve(&p1).is_none());
}

#[test]
fn resolves_plain_values() {
    let mut set = ToastChunks::new();
    let raw = sample_text();
    add_in_chunks(&mut set, 5, &raw, 1996);
    let p = ToastPointer {
        raw_size: raw.len() as i32 + 4,
        ext_size: raw.len() as u32,
        compression: None,
        value_id: 5,
        toast_relid: 1,
    };
    assert!(!p.is_compressed());
    assert_eq!(set.resolve(&p).unwrap().unwrap(), raw);
    assert_eq!(set.take(&p).unwrap().unwrap(), raw);
}

#[test]
fn sizes_are_checked() {
    let mut set = ToastChunks::new();
    let (pglz, p) = stored(PG_PGLZ_SAMPLE, Compression::Pglz, 9);
    add_in_chunks(&mut set, 9, &pglz[..pglz.len() - 1], 1996);
    let e = set.resolve(&p).unwrap().unwrap_err();
    assert!(
        matches!(e.kind, TupleErrorKind::ToastSize { value_id: 9, .. }),
        "{e}"
    );
    // The stored size matches, but the raw size does not agree with va_tcinfo.
    set.clear();
    add_in_chunks(&mut set, 9, &pglz, 1996);
    let wrong = ToastPointer {
        raw_size: p.raw_size + 1,
        ..p
    };
    let e = set.resolve(&wrong).unwrap().unwrap_err();
    assert!(
        matches!(e.kind, TupleErrorKind::BadToastPointer { .. }),
        "{e}"
    );
    // An uncompressed pointer whose stored size exceeds the payload size.
    let odd = ToastPointer {
        raw_size: 10,
        compression: None,
        ..p
    };
    assert!(set.resolve(&odd).unwrap().is_err());
}

#[test]
fn chunks_must_come_in_order() {
    let mut set = ToastChunks::new();
    let e = set.add_chunk(1, 1, b"x").unwrap_err();
    assert!(matches!(
        e.kind,
        TupleErrorKind::ToastChunkOrder {
            expected: 0,
            chunk_seq: 1,
            ..
        }
    ));
    assert!(set.is_empty());
    set.add_chunk(1, 0, b"a").unwrap();
    set.add_chunk(1, 1, b"b").unwrap();
    let e = set.add_chunk(1, 3, b"d").unwrap_err();
    assert!(matches!(
        e.kind,
        TupleErrorKind::ToastChunkOrder { expected: 2, .. }
    ));
    assert!(set.add_chunk(1, 0, b"a").is_err());
    assert_eq!(set.bytes_held(), 2);
}

/// A toast-table row as it appears in WAL: no nulls, t_hoff 24, so the
/// fragment is one padding byte followed by the user data.
fn chunk_fragment(id: u32, seq: i32, data: &[u8], short: bool) -> Vec<u8> {
    let mut f = vec![0u8];
    f.extend(id.to_le_bytes());
    f.extend(seq.to_le_bytes());
    if short {
        f.push((((data.len() + 1) as u8) << 1) | 1);
    } else {
        f.extend((((data.len() + 4) as u32) << 2).to_le_bytes());
    }
    f.extend(data);
    f
}

#[test]
fn decodes_chunk_rows() {
    let f = chunk_fragment(16_401, 3, b"chunk bytes", false);
    let c = decode_chunk(3, 0x0802, 24, &f).unwrap();
    assert_eq!(
        c,
        ToastChunk {
            chunk_id: 16_401,
            chunk_seq: 3,
            data: b"chunk bytes"
        }
    );
    let f = chunk_fragment(7, 0, b"short", true);
    assert_eq!(decode_chunk(3, 0, 24, &f).unwrap().data, b"short");
}

#[test]
fn rejects_malformed_chunk_rows() {
    let f = chunk_fragment(7, 0, b"data", false);
    // Only two attributes stored.
    let e = decode_chunk(2, 0, 24, &f).unwrap_err();
    assert!(
        matches!(e.kind, TupleErrorKind::BadToastChunk { .. }),
        "{e}"
    );
    // chunk_seq NULL (bitmap 0b101).
    let mut g = vec![0b101u8];
    g.extend(&f[1..5]);
    g.extend(&f[9..]);
    let e = decode_chunk(3, HEAP_HASNULL_FOR_TEST, 24, &g).unwrap_err();
    assert!(
        matches!(e.kind, TupleErrorKind::BadToastChunk { .. }),
        "{e}"
    );
    // Truncated.
    for cut in 0..f.len() {
        assert!(decode_chunk(3, 0, 24, &f[..cut]).is_err());
    }
}

const HEAP_HASNULL_FOR_TEST: u16 = crate::tuple::HEAP_HASNULL;
