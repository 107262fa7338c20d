//! Input split anywhere gives the same result: inputs whose outcome once
//! depended on the split (found by the `wal_stream` fuzz target), fed whole,
//! byte by byte, in pieces of many sizes and cut in two around the bytes
//! that matter.

use std::ops::Range;

use super::tests::{decode, SEG};
use super::*;
use crate::wal::page::{XLP_FIRST_IS_CONTRECORD, XLP_LONG_HEADER};
use crate::wal::DecodeErrorKind;

const PAGE_LEN: usize = WAL_PAGE_SIZE as usize;
const MIB: u64 = 1 << 20;
/// A page in the middle of segment 7: a short header is due there.
const MID_SEGMENT: Lsn = Lsn(7 * MIB + PAGE);

type Outcome = (Vec<Record>, Result<Poll, DecodeError>);

/// A 24-byte short page header of PostgreSQL 15 on timeline 1.
fn short_header(info: u16, page_addr: u64, rem_len: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(40);
    h.extend_from_slice(&0xD110u16.to_le_bytes());
    h.extend_from_slice(&info.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&page_addr.to_le_bytes());
    h.extend_from_slice(&rem_len.to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    h
}

/// A page starting with the long header of a segment's first page at
/// `page_addr` (1 MiB segments), the rest zero.
fn long_header_page(page_addr: u64) -> Vec<u8> {
    let mut page = short_header(XLP_LONG_HEADER, page_addr, 0);
    page.extend_from_slice(&1u64.to_le_bytes());
    page.extend_from_slice(&SEG.to_le_bytes());
    page.extend_from_slice(&WAL_PAGE_SIZE.to_le_bytes());
    page.resize(PAGE_LEN, 0);
    page
}

/// A 100-byte record claiming `prev` and `rmid`, its body filled with `fill`
/// (no valid CRC).
fn bad_record(prev: u64, rmid: u8, fill: u8) -> Vec<u8> {
    let tot_len: u32 = 100;
    let mut record = Vec::new();
    record.extend_from_slice(&tot_len.to_le_bytes());
    record.extend_from_slice(&0u32.to_le_bytes());
    record.extend_from_slice(&prev.to_le_bytes());
    record.extend_from_slice(&[0, rmid, 0, 0]);
    record.extend_from_slice(&0u32.to_le_bytes());
    record.resize(tot_len as usize, fill);
    record
}

/// The last two pages of segment 7, the first record 8 bytes before the
/// last page so that its header continues there, zeros after it up to the
/// end of the segment. Returns the record's LSN and the input (from the
/// first byte of its page).
fn header_across_pages(record: &[u8]) -> (Lsn, Vec<u8>) {
    let last_page = 8 * MIB - PAGE;
    let lsn = Lsn(last_page - 8);
    let mut wal = short_header(0, last_page - PAGE, 0);
    wal.resize(PAGE_LEN - 8, 0);
    wal.extend_from_slice(&record[..8]);
    let rem_len = (record.len() - 8) as u32;
    wal.extend_from_slice(&short_header(XLP_FIRST_IS_CONTRECORD, last_page, rem_len));
    wal.extend_from_slice(&record[8..]);
    wal.resize(2 * PAGE_LEN, 0);
    (lsn, wal)
}

/// Decodes `input` fed in two pieces, cut at offset `cut`.
fn decode_cut(start: Lsn, input: &[u8], cut: usize) -> Outcome {
    let mut d = WalDecoder::new(start, SEG);
    let mut records = Vec::new();
    let (first, second) = input.split_at(cut);
    let mut pieces = [first, second].into_iter();
    loop {
        match d.poll() {
            Ok(Poll::Record(r)) => records.push(r),
            Ok(Poll::NeedMore) => match pieces.next() {
                Some(piece) => d.feed(piece),
                None => return (records, Ok(Poll::NeedMore)),
            },
            other => return (records, other),
        }
    }
}

/// Piece sizes to feed in: byte by byte, around the header sizes, whole pages.
const PIECE_SIZES: [usize; 15] = [
    1, 2, 3, 7, 16, 23, 24, 25, 39, 40, 41, 100, 4096, 8191, 8192,
];

/// Decodes `input` whole and asserts that feeding it in pieces of each of
/// [`PIECE_SIZES`], and in two pieces cut at each offset in `cuts`, gives
/// the same; returns the result.
fn same_however_split(start: Lsn, input: &[u8], cuts: Range<usize>) -> Outcome {
    let whole = decode(start, input, usize::MAX);
    for size in PIECE_SIZES {
        assert_eq!(decode(start, input, size), whole, "pieces of {size} bytes");
    }
    for cut in cuts {
        assert_eq!(decode_cut(start, input, cut), whole, "cut at {cut}");
    }
    whole
}

#[test]
fn long_header_flag_mid_segment_is_an_error_however_split() {
    let input = long_header_page(MID_SEGMENT.0);
    let (records, last) = same_however_split(MID_SEGMENT, &input, 0..64);
    assert!(records.is_empty());
    let e = last.unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::UnexpectedLongHeader);
    assert_eq!(e.lsn, MID_SEGMENT);
}

#[test]
fn recycled_long_header_mid_segment_ends_the_wal_however_split() {
    let input = long_header_page(6 * MIB);
    let (records, last) = same_however_split(MID_SEGMENT, &input, 0..64);
    assert!(records.is_empty());
    assert_eq!(
        last,
        Ok(Poll::EndOfWal {
            lsn: MID_SEGMENT,
            reason: EndReason::RecycledPage {
                page: MID_SEGMENT,
                found: Lsn(6 * MIB),
            },
        })
    );
}

#[test]
fn bad_header_continued_on_next_page_is_an_error_however_split() {
    // `xl_prev` not before the record; its body is not zero.
    let (lsn, input) = header_across_pages(&bad_record(0xFFFF_FFFF, 0, 0xAA));
    let cuts = PAGE_LEN - 16..PAGE_LEN + 128;
    let (records, last) = same_however_split(lsn, &input, cuts.clone());
    assert!(records.is_empty());
    let e = last.unwrap_err();
    assert_eq!(e.lsn, lsn);
    assert_eq!(
        e.kind,
        DecodeErrorKind::PrevLinkNotBefore {
            found: Lsn(0xFFFF_FFFF)
        }
    );

    // Unknown resource manager.
    let (lsn, input) = header_across_pages(&bad_record(0x100, 100, 0xAA));
    let (_, last) = same_however_split(lsn, &input, cuts);
    let e = last.unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::UnknownRmgr { rmid: 100 });
}

#[test]
fn bad_header_continued_on_next_page_then_zeros_is_torn_however_split() {
    let (lsn, input) = header_across_pages(&bad_record(0xFFFF_FFFF, 0, 0));
    let (records, last) = same_however_split(lsn, &input, PAGE_LEN - 16..PAGE_LEN + 128);
    assert!(records.is_empty());
    let Ok(Poll::EndOfWal {
        lsn: end,
        reason: EndReason::TornRecord { error },
    }) = last
    else {
        panic!("{last:?}")
    };
    assert_eq!(end, lsn);
    assert!(matches!(
        error.kind,
        DecodeErrorKind::PrevLinkNotBefore { .. }
    ));
}

#[test]
fn torn_record_before_a_recycled_long_header_page_ends_the_wal() {
    // A bad record (xl_prev not before it) at the start of a mid-segment
    // page, zeros after its header, then a page left from an older segment
    // start, long header included.
    let mut input = short_header(0, MID_SEGMENT.0, 0);
    let mut record = bad_record(0xFFFF_FFFF, 0, 0);
    record[..4].copy_from_slice(&24u32.to_le_bytes());
    input.extend_from_slice(&record[..24]);
    input.resize(PAGE_LEN, 0);
    input.extend_from_slice(&long_header_page(6 * MIB));
    let (records, last) = same_however_split(MID_SEGMENT, &input, PAGE_LEN - 8..PAGE_LEN + 64);
    assert!(records.is_empty());
    let Ok(Poll::EndOfWal {
        lsn,
        reason: EndReason::TornRecord { error },
    }) = last
    else {
        panic!("{last:?}")
    };
    assert_eq!(lsn, MID_SEGMENT.advance(24));
    assert!(matches!(
        error.kind,
        DecodeErrorKind::PrevLinkNotBefore { .. }
    ));
}
