//! End of WAL and error cases of the stream decoder.

use super::tests::{decode, fill_to, message, tricky_stream, SEG, SEG_LSN};
use super::*;
use crate::wal::page::XLP_FIRST_IS_OVERWRITE_CONTRECORD;
use crate::wal::testutil::{record, Body, WalWriter};
use crate::wal::{DecodeErrorKind, RmgrId};

#[test]
fn flipped_byte_is_a_crc_error_naming_the_record() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    w.write(10, 0, 1, &message(50));
    let bad = w.write(10, 0, 2, &message(50));
    w.write(10, 0, 3, &message(50));
    let mut bytes = w.bytes().to_vec();
    let at = (bad.0 - SEG_LSN.0) as usize + 40;
    bytes[at] ^= 0x01;
    let (records, last) = decode(SEG_LSN, &bytes, 100);
    assert_eq!(records.len(), 1);
    let e = last.unwrap_err();
    assert_eq!(e.lsn, bad);
    assert_eq!(e.rmgr, Some(RmgrId::HEAP));
    assert!(matches!(e.kind, DecodeErrorKind::CrcMismatch { .. }));
    assert!(e.to_string().contains(&bad.to_string()), "{e}");
}

#[test]
fn torn_last_record_followed_by_zeros_ends_the_wal() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    w.write(10, 0, 1, &message(50));
    let torn = w.write(10, 0, 2, &message(9000));
    w.pad_to(SEG_LSN.advance(u64::from(SEG)));
    let mut bytes = w.bytes().to_vec();
    let at = (torn.0 - SEG_LSN.0) as usize + 8500;
    bytes[at..at + 100].fill(0);
    let (records, last) = decode(SEG_LSN, &bytes, 65536);
    assert_eq!(records.len(), 1);
    let Ok(Poll::EndOfWal {
        lsn,
        reason: EndReason::TornRecord { error },
    }) = last
    else {
        panic!("{last:?}")
    };
    assert_eq!(lsn, torn);
    assert!(matches!(error.kind, DecodeErrorKind::CrcMismatch { .. }));
}

#[test]
fn wrong_prev_link_is_an_error() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    w.write(10, 0, 1, &message(50));
    let bad = w.write_raw(&record(10, 0, 2, Lsn(0x1234), &message(50)));
    w.write(10, 0, 3, &message(50));
    let (_, last) = decode(SEG_LSN, w.bytes(), 100);
    let e = last.unwrap_err();
    assert_eq!(e.lsn, bad);
    assert!(matches!(
        e.kind,
        DecodeErrorKind::PrevLinkMismatch {
            found: Lsn(0x1234),
            ..
        }
    ));
}

#[test]
fn zeroed_and_recycled_pages_end_the_wal() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    fill_to(&mut w, SEG_LSN.0 + 4096);
    fill_to(&mut w, SEG_LSN.0 + 8192);
    let mut bytes = w.bytes().to_vec();
    bytes.resize(3 * 8192, 0);
    let (records, last) = decode(SEG_LSN, &bytes, 100);
    assert_eq!(records.len(), 2);
    let page = SEG_LSN.advance(8192);
    assert_eq!(
        last,
        Ok(Poll::EndOfWal {
            lsn: page,
            reason: EndReason::ZeroPage { page }
        })
    );
    // A page header from the same position one segment earlier.
    let mut old = WalWriter::new(Lsn(SEG_LSN.0 - u64::from(SEG)), SEG);
    fill_to(&mut old, SEG_LSN.0 - u64::from(SEG) + 8192);
    old.write(10, 0, 9, &message(10));
    old.pad_to(Lsn(SEG_LSN.0 - u64::from(SEG) + 2 * 8192));
    bytes[8192..2 * 8192].copy_from_slice(&old.bytes()[8192..2 * 8192]);
    let (_, last) = decode(SEG_LSN, &bytes, 100);
    let Ok(Poll::EndOfWal {
        reason: EndReason::RecycledPage { found, .. },
        ..
    }) = last
    else {
        panic!("{last:?}")
    };
    assert_eq!(found, Lsn(SEG_LSN.0 - u64::from(SEG) + 8192));
}

#[test]
fn record_ending_in_zero_page_ends_at_its_start() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    w.write(10, 0, 1, &message(50));
    let big = w.write(21, 0, 2, &message(20000));
    let mut bytes = w.bytes().to_vec();
    bytes.resize(3 * 8192, 0);
    bytes[2 * 8192..3 * 8192].fill(0);
    let (records, last) = decode(SEG_LSN, &bytes, 512);
    assert_eq!(records.len(), 1);
    assert!(
        matches!(last, Ok(Poll::EndOfWal { lsn, reason: EndReason::ZeroPage { .. } }) if lsn == big)
    );
}

#[test]
fn page_problems_are_errors() {
    let (w, _) = tricky_stream();
    // Wrong magic on the second page.
    let mut bytes = w.bytes().to_vec();
    bytes[8192..8194].copy_from_slice(&0x0BADu16.to_le_bytes());
    let (_, last) = decode(SEG_LSN, &bytes, 4000);
    let e = last.unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::BadMagic { magic: 0x0BAD });
    assert_eq!(e.lsn, SEG_LSN.advance(8192));
    // A continuation page that lost its flag.
    let mut bytes = w.bytes().to_vec();
    bytes[8192 + 2] &= !1;
    let (_, last) = decode(SEG_LSN, &bytes, 4000);
    assert!(matches!(
        last.unwrap_err().kind,
        DecodeErrorKind::MissingContinuation { .. }
    ));
    // A continuation page announcing the wrong remaining length.
    let mut bytes = w.bytes().to_vec();
    bytes[8192 + 16] ^= 0x01;
    let (_, last) = decode(SEG_LSN, &bytes, 4000);
    assert!(matches!(
        last.unwrap_err().kind,
        DecodeErrorKind::ContinuationLengthMismatch { .. }
    ));
    // A page claiming to continue a record where a new record starts.
    let mut bytes = w.bytes().to_vec();
    bytes[2 * 8192 + 2] |= 1;
    let (_, last) = decode(SEG_LSN, &bytes, 4000);
    assert!(matches!(
        last.unwrap_err().kind,
        DecodeErrorKind::UnexpectedContinuation { .. }
    ));
}

#[test]
fn abandoned_record_is_replaced_by_overwrite_contrecord() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    let first = w.write(10, 0, 1, &message(50));
    let big = record(21, 0, 2, first, &message(20000));
    let page_left = (8192 - (w.pos().0.next_multiple_of(8) % 8192)) as usize;
    let abandoned = w.write_partial(&big, page_left);
    let mut main = abandoned.0.to_le_bytes().to_vec();
    main.extend_from_slice(&0i64.to_le_bytes());
    let overwrite = w.write_raw_with(
        &record(0, 0xD0, 0, first, &Body::new().main(&main)),
        XLP_FIRST_IS_OVERWRITE_CONTRECORD,
    );
    let after = w.write(10, 0, 3, &message(5));
    let (records, _) = decode(SEG_LSN, w.bytes(), 1000);
    assert_eq!(
        records.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        vec![first, overwrite, after]
    );
    assert_eq!(overwrite, SEG_LSN.advance(8192 + 24));

    // Without the overwrite record the abandonment is not explained.
    let mut w = WalWriter::new(SEG_LSN, SEG);
    let first = w.write(10, 0, 1, &message(50));
    let big = record(21, 0, 2, first, &message(20000));
    let page_left = (8192 - (w.pos().0.next_multiple_of(8) % 8192)) as usize;
    w.write_partial(&big, page_left);
    w.write_raw_with(
        &record(10, 0, 3, first, &message(5)),
        XLP_FIRST_IS_OVERWRITE_CONTRECORD,
    );
    let (_, last) = decode(SEG_LSN, w.bytes(), 1000);
    assert!(matches!(
        last.unwrap_err().kind,
        DecodeErrorKind::MissingOverwriteRecord { .. }
    ));
}

#[test]
fn errors_and_ends_are_sticky() {
    let mut d = WalDecoder::new(SEG_LSN, SEG);
    d.feed(&[0xAB; 64]);
    let e = d.poll().unwrap_err();
    d.feed(&[0; 1 << 16]);
    assert_eq!(d.poll().unwrap_err(), e);
    assert_eq!(d.buffered(), 64);
}

#[test]
fn torn_record_followed_by_recycled_pages_ends_the_wal() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    w.write(10, 0, 1, &message(50));
    let torn = w.write(10, 0, 2, &message(100));
    w.pad_to(SEG_LSN.advance(8192));
    let mut bytes = w.bytes().to_vec();
    let at = (torn.0 - SEG_LSN.0) as usize + 60;
    bytes[at] ^= 0xFF;
    // The next page still holds WAL from the file's previous use.
    let mut old = WalWriter::new(Lsn(SEG_LSN.0 - u64::from(SEG)), SEG);
    fill_to(&mut old, SEG_LSN.0 - u64::from(SEG) + 8192);
    old.write(10, 0, 9, &message(3000));
    old.pad_to(Lsn(SEG_LSN.0 - u64::from(SEG) + 2 * 8192));
    bytes.extend_from_slice(&old.bytes()[8192..]);
    let (records, last) = decode(SEG_LSN, &bytes, 3000);
    assert_eq!(records.len(), 1);
    assert!(
        matches!(&last, Ok(Poll::EndOfWal { lsn, reason: EndReason::TornRecord { .. } }) if *lsn == torn),
        "{last:?}"
    );
}

#[test]
fn invalid_header_followed_by_zeros_ends_the_wal_else_errors() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    w.write(10, 0, 1, &message(50));
    let end = w.pos().0.next_multiple_of(8);
    w.pad_to(SEG_LSN.advance(u64::from(SEG)));
    let mut bytes = w.bytes().to_vec();
    let at = (end - SEG_LSN.0) as usize;
    // A record header cut to its length word: 5 is no valid length.
    bytes[at] = 5;
    let (_, last) = decode(SEG_LSN, &bytes, 100_000);
    let Ok(Poll::EndOfWal {
        lsn,
        reason: EndReason::TornRecord { error },
    }) = last
    else {
        panic!("{last:?}")
    };
    assert_eq!(lsn, Lsn(end));
    assert_eq!(error.kind, DecodeErrorKind::InvalidRecordLength { len: 5 });
    // The same with anything written later in the segment is an error.
    bytes[at + 5000] = 1;
    let (_, last) = decode(SEG_LSN, &bytes, 100_000);
    assert_eq!(
        last.unwrap_err().kind,
        DecodeErrorKind::InvalidRecordLength { len: 5 }
    );
    // Without the rest of the segment the decoder cannot tell yet.
    let (_, last) = decode(SEG_LSN, &bytes[..at + 100], 100_000);
    assert_eq!(last, Ok(Poll::NeedMore));
}
