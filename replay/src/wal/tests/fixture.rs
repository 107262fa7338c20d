//! Framing and fragment parsing against `pg_waldump`, record by record.

use super::*;
use crate::lsn::{SegmentName, SegmentNo};
use crate::wal::DecodeErrorKind;

/// Compares one decoded record with its `pg_waldump` line.
fn assert_same(record: &Record, line: &DumpLine) {
    let at = record.lsn;
    assert_eq!(record.lsn, line.lsn);
    assert_eq!(record.prev, line.prev, "prev at {at}");
    assert_eq!(record.tot_len, line.tot_len, "total length at {at}");
    assert_eq!(record.xid, line.xid, "xid at {at}");
    assert_eq!(record.rmid.to_string(), line.rmgr, "rmgr at {at}");
    // pg_waldump's record length is the total minus the stored image bytes.
    assert_eq!(
        record.tot_len as usize - record.fpi_len(),
        line.rec_len as usize,
        "record length at {at}"
    );
    let blocks: Vec<DumpBlock> = record
        .blocks
        .iter()
        .map(|b| DumpBlock {
            id: b.id,
            rel: b.rel.to_string(),
            fork: (b.fork != crate::wal::ForkNumber::MAIN).then(|| b.fork.to_string()),
            block: b.block,
            image: b.image.as_ref().map(|i| i.apply()),
        })
        .collect();
    assert_eq!(blocks, line.blocks, "block references at {at}");
}

#[test]
fn every_record_matches_pg_waldump() {
    let fx = basic();
    let (records, last) = decode_all(fx.start(), &fx.wal(), 1 << 16);
    assert_eq!(records.len(), fx.waldump.len(), "record count");
    for (record, line) in records.iter().zip(&fx.waldump) {
        assert_same(record, line);
    }
    // The last segment ends with XLOG_SWITCH: the decoder waits for the next segment.
    assert_eq!(last, Poll::NeedMore);
    let switch = records.last().unwrap();
    assert_eq!(switch.rmid, crate::wal::RmgrId::XLOG);
    assert_eq!(switch.end_lsn, fx.start().advance(fx.wal().len() as u64));
}

#[test]
fn fixture_covers_the_tricky_framing_cases() {
    let fx = basic();
    let (records, _) = decode_all(fx.start(), &fx.wal(), usize::MAX);
    let page = 8192;
    let crosses_page = |r: &&Record| r.lsn.0 / page != (r.end_lsn.0 - 1) / page;
    assert!(records.iter().filter(crosses_page).count() > 10);
    let seg = u64::from(SEG);
    assert!(
        records
            .iter()
            .any(|r| r.lsn.0 / seg != (r.end_lsn.0 - 1) / seg && r.rmid.0 != 0),
        "a record crossing a segment boundary"
    );
    assert!(records
        .iter()
        .any(|r| r.blocks.iter().any(|b| b.image.is_some())));
    let compressions: std::collections::BTreeSet<String> = records
        .iter()
        .flat_map(|r| r.blocks.iter().filter_map(|b| b.image.as_ref()))
        .map(|i| format!("{:?}", i.compression()))
        .collect();
    assert_eq!(
        compressions.len(),
        4,
        "images of every compression: {compressions:?}"
    );
    assert!(records.iter().any(|r| r.toplevel_xid.is_some()));
}

#[test]
fn each_segment_can_be_decoded_on_its_own() {
    let fx = basic();
    let all: Vec<Lsn> = fx.waldump.iter().map(|l| l.lsn).collect();
    for (name, bytes) in &fx.segments {
        let start = SegmentName::parse(name, u64::from(SEG))
            .unwrap()
            .segno
            .start_lsn(u64::from(SEG));
        let end = start.advance(u64::from(SEG));
        let (records, last) = decode_all(start, bytes, 8192);
        let expected: Vec<Lsn> = all
            .iter()
            .copied()
            .filter(|l| *l >= start && *l < end)
            .collect();
        let got: Vec<Lsn> = records.iter().map(|r| r.lsn).collect();
        // A record crossing into the next segment is decoded only if that
        // segment is fed too: here it ends the input with a request for more.
        let complete: Vec<Lsn> = records
            .iter()
            .filter(|r| r.end_lsn <= end)
            .map(|r| r.lsn)
            .collect();
        assert_eq!(got, complete, "{name}");
        assert!(
            expected.starts_with(&got),
            "{name}: {got:?} vs {expected:?}"
        );
        assert!(expected.len() - got.len() <= 1, "{name}");
        assert_eq!(last, Poll::NeedMore, "{name}");
    }
}

#[test]
fn flipped_byte_in_the_fixture_names_the_lsn_and_segment() {
    let fx = basic();
    let mut wal = fx.wal();
    let target = &fx.waldump[100];
    let offset = (target.lsn.0 - fx.start().0) as usize + 30;
    wal[offset] ^= 0x40;
    let mut d = WalDecoder::new(fx.start(), SEG);
    d.feed(&wal);
    let err = loop {
        match d.poll() {
            Ok(Poll::Record(_)) => {}
            Ok(other) => panic!("expected an error, got {other:?}"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.lsn, target.lsn);
    assert!(
        matches!(err.kind, DecodeErrorKind::CrcMismatch { .. }),
        "{err}"
    );
    let name = SegmentName {
        timeline: crate::lsn::TimelineId(1),
        segno: SegmentNo::containing(err.lsn, u64::from(SEG)),
    }
    .file_name(u64::from(SEG));
    let text = err.with_segment(name.clone()).to_string();
    assert!(
        text.contains(&target.lsn.to_string()) && text.contains(&name),
        "{text}"
    );
}
