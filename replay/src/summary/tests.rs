use super::*;

fn sample() -> SegmentSummary {
    let file = RelFileLocator {
        spc: 1663,
        db: 5,
        rel: 16384,
    };
    SegmentSummary {
        object: ObjectId {
            name: "wal/000000010000000000000003.zst".into(),
            size: 123_456,
        },
        next: Some(ObjectId {
            name: "wal/000000010000000000000004.zst".into(),
            size: 99,
        }),
        system_id: 7_300_000_000_000_000_001,
        timeline: 1,
        magic: 0xD110,
        start: Lsn(0x300_0000),
        last_end: Lsn(0x400_0018),
        events: vec![
            SummaryEvent::Touch {
                lsn: Lsn(0x300_0028),
                xid: 740,
                file,
                kind: touch::LOOKUP | touch::DATA,
            },
            SummaryEvent::Link {
                lsn: Lsn(0x300_0100),
                sub: 741,
                top: 740,
            },
            SummaryEvent::Kept {
                lsn: Lsn(0x3ff_ffe0),
                end: Lsn(0x400_0018),
                db: 0,
                rmid: 1,
                bytes: vec![1, 2, 3, 4, 5],
            },
        ],
    }
}

#[test]
fn a_summary_reads_back_as_written() {
    let summary = sample();
    assert_eq!(SegmentSummary::decode(&summary.encode()), Ok(summary));
}

#[test]
fn a_changed_summary_fails_its_checksum() {
    let summary = sample();
    let stored = summary.encode();
    // The same summary without its touch, under the original checksum.
    let mut tampered = summary.clone();
    tampered.events.remove(0);
    let mut forged = tampered.encode();
    forged[8..12].copy_from_slice(&stored[8..12]);
    assert_eq!(SegmentSummary::decode(&forged), Err(SummaryError::Checksum));
    assert_eq!(
        SegmentSummary::decode(&stored[..stored.len() - 3]),
        Err(SummaryError::Checksum)
    );
    assert_eq!(
        SegmentSummary::decode(b"nonsense"),
        Err(SummaryError::Format)
    );
}

#[test]
fn a_summary_matches_only_its_objects() {
    let summary = sample();
    let next = summary.next.clone();
    assert!(summary.matches(&summary.object, next.as_ref()));
    let resized = ObjectId {
        size: 1,
        ..summary.object.clone()
    };
    assert!(!summary.matches(&resized, next.as_ref()));
    let other_next = ObjectId {
        name: "wal/000000020000000000000004.zst".into(),
        size: 99,
    };
    assert!(!summary.matches(&summary.object, Some(&other_next)));
    assert!(!summary.matches(&summary.object, None));
}
