use super::*;
use crate::wal::testutil::{record, Body};

const REL: [u32; 3] = [1663, 5, 16385];

fn parse(bytes: Vec<u8>) -> Result<Record, DecodeError> {
    let end = Lsn(0x1000 + bytes.len() as u64);
    Record::parse(Lsn(0x1000), end, bytes)
}

fn image_header(stored: u16, hole_offset: u16, info: u8) -> Vec<u8> {
    let mut h = stored.to_le_bytes().to_vec();
    h.extend_from_slice(&hole_offset.to_le_bytes());
    h.push(info);
    h
}

#[test]
fn crc_matches_postgres_definition() {
    // One running CRC-32C over the body, then the header's first 20 bytes.
    let rec = record(10, 0, 7, Lsn(0x28), &Body::new().main(b"abc"));
    let mut joined = rec[24..].to_vec();
    joined.extend_from_slice(&rec[..20]);
    assert_eq!(record_crc(&rec), crc32c::crc32c(&joined));
    assert_eq!(
        u32::from_le_bytes(rec[20..24].try_into().unwrap()),
        record_crc(&rec)
    );
}

#[test]
fn parses_header_and_short_main_data() {
    let rec = record(21, 0x10, 42, Lsn(0x28), &Body::new().main(b"hello"));
    let r = parse(rec).unwrap();
    assert_eq!(r.tot_len, 24 + 2 + 5);
    assert_eq!(r.xid, 42);
    assert_eq!(r.prev, Lsn(0x28));
    assert_eq!(r.rmid, RmgrId::LOGICAL_MESSAGE);
    assert_eq!(r.rmgr_info(), 0x10);
    assert_eq!(r.main_data(), b"hello");
    assert!(r.blocks.is_empty());
    assert_eq!((r.origin, r.toplevel_xid), (None, None));
}

#[test]
fn parses_long_main_data() {
    let main = vec![7u8; 300];
    let r = parse(record(1, 0, 1, Lsn(0), &Body::new().main(&main))).unwrap();
    assert_eq!(r.main_data(), &main[..]);
    assert_eq!(r.tot_len, 24 + 5 + 300);
}

#[test]
fn parses_blocks_same_rel_origin_and_toplevel_xid() {
    let mut same_rel = vec![3u8, 0x80 | 0x20 | 0x01];
    same_rel.extend_from_slice(&2u16.to_le_bytes());
    same_rel.extend_from_slice(&9u32.to_le_bytes());
    let body = Body::new()
        .block(0, REL, 4, b"data0")
        .raw(&same_rel, b"zz")
        .raw(&[253, 0x34, 0x12], b"")
        .raw(&[252, 9, 0, 0, 0], b"")
        .main(b"m");
    let r = parse(record(10, 0, 1, Lsn(0), &body)).unwrap();
    assert_eq!(r.blocks.len(), 2);
    let b0 = &r.blocks[0];
    assert_eq!(
        (b0.id, b0.rel, b0.fork, b0.block),
        (
            0,
            RelFileLocator {
                spc: 1663,
                db: 5,
                rel: 16385
            },
            ForkNumber::MAIN,
            4
        )
    );
    assert_eq!(r.block_data(b0), b"data0");
    let b3 = r.block(3).unwrap();
    assert_eq!((b3.rel, b3.fork, b3.block), (b0.rel, ForkNumber::FSM, 9));
    assert_eq!(r.block_data(b3), b"zz");
    assert_eq!(r.origin, Some(0x1234));
    assert_eq!(r.toplevel_xid, Some(9));
    assert_eq!(r.main_data(), b"m");
}

#[test]
fn parses_images_with_and_without_hole() {
    // Uncompressed, hole of 8192 - 100 bytes at offset 40.
    let mut h = vec![0u8, 0x10];
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend(image_header(100, 40, BKPIMAGE_HAS_HOLE | BKPIMAGE_APPLY));
    for part in REL {
        h.extend_from_slice(&part.to_le_bytes());
    }
    h.extend_from_slice(&1u32.to_le_bytes());
    // Compressed (pglz) with a hole: extra hole length field.
    let mut c = vec![1u8, 0x80 | 0x10 | 0x20];
    c.extend_from_slice(&3u16.to_le_bytes());
    c.extend(image_header(
        50,
        64,
        BKPIMAGE_HAS_HOLE | BKPIMAGE_APPLY | BKPIMAGE_COMPRESS_PGLZ,
    ));
    c.extend_from_slice(&4000u16.to_le_bytes());
    c.extend_from_slice(&2u32.to_le_bytes());
    // Whole page, no hole, no compression.
    let mut w = vec![2u8, 0x80 | 0x10];
    w.extend_from_slice(&0u16.to_le_bytes());
    w.extend(image_header(8192, 0, 0));
    w.extend_from_slice(&3u32.to_le_bytes());
    let body = Body::new()
        .raw(&h, &[1; 100])
        .raw(&c, &[[2u8; 50].as_slice(), b"abc"].concat())
        .raw(&w, &[3; 8192]);
    let r = parse(record(10, 0, 1, Lsn(0), &body)).unwrap();
    let img0 = r.blocks[0].image.as_ref().unwrap();
    assert_eq!((img0.hole_offset, img0.hole_length), (40, 8092));
    assert_eq!(img0.compression(), ImageCompression::None);
    assert!(img0.apply());
    assert_eq!(r.image_bytes(img0), &[1; 100][..]);
    let img1 = r.blocks[1].image.as_ref().unwrap();
    assert_eq!((img1.hole_offset, img1.hole_length), (64, 4000));
    assert_eq!(img1.compression(), ImageCompression::Pglz);
    assert_eq!(r.image_bytes(img1), &[2; 50][..]);
    assert_eq!(r.block_data(&r.blocks[1]), b"abc");
    let img2 = r.blocks[2].image.as_ref().unwrap();
    assert_eq!((img2.hole_offset, img2.hole_length), (0, 0));
    assert_eq!(r.image_bytes(img2).len(), 8192);
    assert_eq!(r.fpi_len(), 100 + 50 + 8192);
}

fn kind(body: Body) -> DecodeErrorKind {
    parse(record(10, 0, 1, Lsn(0), &body)).unwrap_err().kind
}

#[test]
fn rejects_malformed_fragments() {
    let b = Body::new().block(1, REL, 0, b"x").block(1, REL, 0, b"y");
    assert_eq!(
        kind(b),
        DecodeErrorKind::OutOfOrderBlock { id: 1, previous: 1 }
    );
    assert_eq!(
        kind(Body::new().raw(&[40], b"")),
        DecodeErrorKind::InvalidBlockId { id: 40 }
    );
    // HAS_DATA without a length, and a length without HAS_DATA.
    let k = kind(Body::new().raw(
        &[
            0, 0x20, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0,
        ],
        b"",
    ));
    assert!(
        matches!(k, DecodeErrorKind::InvalidBlock { id: 0, .. }),
        "{k:?}"
    );
    let k = kind(Body::new().raw(
        &[
            0, 0x00, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0,
        ],
        b"q",
    ));
    assert!(
        matches!(k, DecodeErrorKind::InvalidBlock { id: 0, .. }),
        "{k:?}"
    );
    // SAME_REL on the first block.
    let k = kind(Body::new().raw(&[0, 0x80, 0, 0, 4, 0, 0, 0], b""));
    assert!(
        matches!(k, DecodeErrorKind::InvalidBlock { id: 0, .. }),
        "{k:?}"
    );
    // Hole flag without a hole.
    let mut h = vec![0u8, 0x90, 0, 0];
    h.extend(image_header(8192, 0, BKPIMAGE_HAS_HOLE));
    h.extend_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        kind(Body::new().raw(&h, &[0; 8192])),
        DecodeErrorKind::InvalidBlock { .. }
    ));
    // Uncompressed short image without hole flag.
    let mut h = vec![0u8, 0x90, 0, 0];
    h.extend(image_header(100, 0, 0));
    h.extend_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        kind(Body::new().raw(&h, &[0; 100])),
        DecodeErrorKind::InvalidBlock { .. }
    ));
    // Announced payload longer than the record.
    let k = kind(Body::new().raw(&[255, 10], b"abc"));
    assert_eq!(
        k,
        DecodeErrorKind::PayloadLengthMismatch {
            announced: 10,
            actual: 3
        }
    );
    // A block header cut short.
    let k = kind(Body::new().raw(&[0, 0x00, 0, 0, 1, 0], b""));
    assert!(
        matches!(
            k,
            DecodeErrorKind::Truncated {
                what: "block relation",
                ..
            }
        ),
        "{k:?}"
    );
}

#[test]
fn errors_name_lsn_and_rmgr() {
    let e = parse(record(10, 0, 1, Lsn(0), &Body::new().raw(&[40], b""))).unwrap_err();
    assert_eq!(e.lsn, Lsn(0x1000));
    assert_eq!(e.rmgr, Some(RmgrId::HEAP));
    let text = e.with_segment("000000010000000000000001").to_string();
    assert_eq!(
        text,
        "invalid fragment id 40 at 0/1000 (rmgr Heap) in segment 000000010000000000000001"
    );
    let e = parse(vec![1, 2, 3]).unwrap_err();
    assert!(matches!(
        e.kind,
        DecodeErrorKind::Truncated { need: 4, .. } | DecodeErrorKind::Truncated { .. }
    ));
}
