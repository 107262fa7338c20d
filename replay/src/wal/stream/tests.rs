use super::*;
use crate::lsn::SegmentNo;
use crate::wal::testutil::{Body, WalWriter};
use crate::wal::DecodeErrorKind;

pub(super) const SEG: u32 = 1 << 20;
pub(super) const SEG_LSN: Lsn = Lsn(5 << 20);

/// Decodes `input` fed in pieces of `chunk` bytes; returns the records and the final non-record answer.
pub(super) fn decode(
    start: Lsn,
    input: &[u8],
    chunk: usize,
) -> (Vec<Record>, Result<Poll, DecodeError>) {
    let mut d = WalDecoder::new(start, SEG);
    let mut records = Vec::new();
    let mut pieces = input.chunks(chunk.max(1));
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

pub(super) fn message(n: usize) -> Body {
    Body::new().main(&vec![b'm'; n])
}

/// Writes a record that ends exactly at `target` (same page, at least 32 bytes ahead).
pub(super) fn fill_to(w: &mut WalWriter, target: u64) {
    let mut start = w.pos().0.next_multiple_of(8);
    if start % 8192 == 0 {
        start += if start % u64::from(SEG) == 0 { 40 } else { 24 };
    }
    let len = (target - start) as usize;
    assert!(len >= 32 && target % 8 == 0);
    let main = if len - 24 - 2 <= 255 {
        len - 26
    } else {
        len - 29
    };
    w.write(21, 0, 0, &message(main));
    assert_eq!(w.pos().0, target);
}

#[test]
fn decodes_records_and_ends_at_zeroed_space() {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    let lsns: Vec<Lsn> = (0..5)
        .map(|i| w.write(10, 0, 700 + i, &message(10 + i as usize)))
        .collect();
    let end = w.pos();
    w.pad_to(SEG_LSN.advance(8192));
    let (records, last) = decode(SEG_LSN, w.bytes(), usize::MAX);
    assert_eq!(records.iter().map(|r| r.lsn).collect::<Vec<_>>(), lsns);
    assert_eq!(lsns[0], SEG_LSN.advance(40));
    assert_eq!(records[2].xid, 702);
    assert_eq!(records[1].prev, lsns[0]);
    assert_eq!(records[4].end_lsn, Lsn(end.0.next_multiple_of(8)));
    assert_eq!(
        last,
        Ok(Poll::EndOfWal {
            lsn: Lsn(end.0.next_multiple_of(8)),
            reason: EndReason::ZeroLength
        })
    );
}

/// A stream with a header split 8/16 across pages, multi-page records, a
/// record ending exactly at a page end and a record crossing into the next segment.
pub(super) fn tricky_stream() -> (WalWriter, Vec<Lsn>) {
    let mut w = WalWriter::new(SEG_LSN, SEG);
    let mut lsns = vec![w.write(10, 0, 1, &message(20))];
    fill_to(&mut w, SEG_LSN.0 + 8192 - 8);
    lsns.push(w.prev);
    lsns.push(w.write(21, 0, 2, &message(100)));
    fill_to(&mut w, SEG_LSN.0 + 2 * 8192);
    lsns.push(w.prev);
    lsns.push(w.write(21, 0, 3, &message(30000)));
    while w.pos().0 < SEG_LSN.0 + u64::from(SEG) - 5000 {
        lsns.push(w.write(21, 0, 4, &message(3000)));
    }
    lsns.push(w.write(21, 0, 5, &message(20000)));
    lsns.push(w.write(10, 0, 6, &message(5)));
    lsns.push(w.switch());
    lsns.push(w.write(10, 0, 7, &message(5)));
    let end = w.pos().0.next_multiple_of(8192);
    w.pad_to(Lsn(end));
    (w, lsns)
}

#[test]
fn reassembles_across_pages_and_segments() {
    let (w, lsns) = tricky_stream();
    let (records, last) = decode(SEG_LSN, w.bytes(), 1 << 16);
    assert_eq!(records.iter().map(|r| r.lsn).collect::<Vec<_>>(), lsns);
    assert_eq!(
        records[2].lsn.0 % 8192,
        8192 - 8,
        "header split across pages"
    );
    assert_eq!(records[3].end_lsn.0 % 8192, 0, "record ends at a page end");
    assert_eq!(records[4].main_data().len(), 30000);
    let crossing = &records[records.len() - 4];
    assert!(
        SegmentNo::containing(crossing.lsn, u64::from(SEG))
            != SegmentNo::containing(crossing.end_lsn, u64::from(SEG))
    );
    let switch = &records[records.len() - 2];
    assert_eq!(switch.end_lsn, SEG_LSN.advance(2 * u64::from(SEG)));
    let after = records.last().unwrap();
    assert_eq!(after.lsn, SEG_LSN.advance(2 * u64::from(SEG) + 40));
    assert_eq!(after.prev, switch.lsn);
    assert!(matches!(
        last,
        Ok(Poll::EndOfWal {
            reason: EndReason::ZeroLength,
            ..
        })
    ));
}

#[test]
fn any_split_gives_the_same_records() {
    let (w, _) = tricky_stream();
    let whole = decode(SEG_LSN, w.bytes(), usize::MAX);
    for chunk in [1, 7, 24, 40, 4096, 8191, 8193] {
        assert_eq!(decode(SEG_LSN, w.bytes(), chunk), whole, "chunk {chunk}");
    }
}

#[test]
fn memory_stays_bounded() {
    let (w, _) = tricky_stream();
    let mut d = WalDecoder::new(SEG_LSN, SEG);
    let mut max_buffer = 0;
    for piece in w.bytes().chunks(4096) {
        d.feed(piece);
        while let Ok(Poll::Record(_)) = d.poll() {}
        max_buffer = max_buffer.max(d.buf.capacity());
    }
    assert!(max_buffer <= 32 * 1024, "buffer grew to {max_buffer}");
}

#[test]
fn starting_mid_stream_skips_the_continued_record() {
    let (w, lsns) = tricky_stream();
    // Page 3 of the segment is covered entirely by the 30000-byte record, page 4 partly.
    for page in [2u64, 3, 4] {
        let start = SEG_LSN.advance(page * 8192);
        let (records, _) = decode(start, w.bytes_from(start), usize::MAX);
        let expected: Vec<Lsn> = lsns.iter().copied().filter(|l| *l > start).collect();
        assert_eq!(
            records.iter().map(|r| r.lsn).collect::<Vec<_>>(),
            expected,
            "page {page}"
        );
    }
    // The next segment starts with the rest of the record crossing into it.
    let next = SEG_LSN.advance(u64::from(SEG));
    let (records, _) = decode(next, w.bytes_from(next), 999);
    assert_eq!(records[0].lsn, lsns[lsns.len() - 3]);
}

#[test]
fn starting_at_a_record() {
    let (w, lsns) = tricky_stream();
    let start = lsns[2];
    let d = WalDecoder::new(start, SEG);
    let input = w.bytes_from(d.input_start());
    let (records, _) = decode(start, input, 333);
    assert_eq!(records.iter().map(|r| r.lsn).collect::<Vec<_>>(), lsns[2..]);
}

#[test]
fn rejects_unusable_starts() {
    for (start, seg) in [
        (Lsn(5), SEG),
        (Lsn(8192 + 8), SEG),
        (Lsn(0), 12345),
        (Lsn(u64::MAX - 7), SEG),
    ] {
        let mut d = WalDecoder::new(start, seg);
        let e = d.poll().unwrap_err();
        assert!(
            matches!(
                e.kind,
                DecodeErrorKind::InvalidStart { .. } | DecodeErrorKind::InvalidSegmentSize { .. }
            ),
            "{e}"
        );
    }
    // Inside the continuation of a record.
    let (w, lsns) = tricky_stream();
    let start = SEG_LSN.advance(4 * 8192 + 24 + 8);
    assert!(start < lsns[5]);
    let (_, last) = decode(start, w.bytes_from(SEG_LSN.advance(4 * 8192)), 100);
    assert!(matches!(
        last.unwrap_err().kind,
        DecodeErrorKind::InvalidStart { .. }
    ));
}

#[test]
fn owned_input_and_recycled_buffers_give_the_same_records() {
    let (w, _) = tricky_stream();
    let (expected, _) = decode(SEG_LSN, w.bytes(), usize::MAX);
    let mut d = WalDecoder::new(SEG_LSN, SEG);
    let mut got = Vec::new();
    for piece in w.bytes().chunks(10_000) {
        let mut buf = d.take_spent_buffer().unwrap_or_default();
        assert!(buf.is_empty());
        buf.extend_from_slice(piece);
        d.feed_owned(buf);
        while let Ok(Poll::Record(r)) = d.poll() {
            got.push(r.clone());
            d.recycle(r);
        }
    }
    assert_eq!(got, expected);
    assert!(d.spare.bytes.len() <= Spare::KEEP && !d.spare.bytes.is_empty());
}

#[test]
fn spent_buffer_is_only_handed_back_when_decoded() {
    let mut d = WalDecoder::new(SEG_LSN, SEG);
    d.feed(&[0; 10]);
    assert!(d.take_spent_buffer().is_none(), "header not read yet");
    d.feed(&[0; 30]);
    assert!(matches!(d.poll(), Ok(Poll::EndOfWal { .. })));
}
