use walfill_replay::archive::Archive;
use walfill_replay::{Lsn, SegmentName, SegmentNo, TimelineId};

use super::resume_point;

const MIB: u32 = 1 << 20;

fn name(segno: u64) -> SegmentName {
    SegmentName {
        timeline: TimelineId(1),
        segno: SegmentNo(segno),
    }
}

/// An in-memory archive holding complete segments `complete` and
/// `.partial` ones `partial` (timeline 1), and one segment of timeline 2.
async fn archive(complete: &[u64], partial: &[u64]) -> Archive {
    let archive = Archive::open("memory://")
        .unwrap()
        .with_segment_size(MIB)
        .unwrap();
    for &segno in complete {
        archive
            .put_segment(name(segno), vec![1u8; MIB as usize], true, false)
            .await
            .unwrap();
    }
    for &segno in partial {
        archive
            .put_partial(name(segno), vec![2u8; MIB as usize], true)
            .await
            .unwrap();
    }
    let other = SegmentName {
        timeline: TimelineId(2),
        segno: SegmentNo(9),
    };
    archive
        .put_segment(other, vec![3u8; MIB as usize], false, false)
        .await
        .unwrap();
    archive
}

fn at(segno: u64, offset: u64) -> Lsn {
    Lsn(segno * u64::from(MIB) + offset)
}

async fn start(archive: &Archive, restart: Lsn) -> Lsn {
    resume_point(archive, TimelineId(1), restart, MIB)
        .await
        .unwrap()
}

#[tokio::test]
async fn streaming_starts_at_the_first_segment_not_archived_whole() {
    // Nothing archived: the start of the slot's segment.
    let empty = archive(&[], &[]).await;
    assert_eq!(start(&empty, at(5, 1234)).await, at(5, 0));

    // Complete segments from the slot's on, then a .partial: re-sent whole.
    let a = archive(&[4, 5, 6], &[7]).await;
    assert_eq!(start(&a, at(5, 100)).await, at(7, 0));
    // A gap: streaming fills it first.
    let gap = archive(&[5, 7, 8], &[]).await;
    assert_eq!(start(&gap, at(5, 0)).await, at(6, 0));
    // Segments before the slot's do not matter; the slot's own is missing.
    let before = archive(&[2, 3], &[]).await;
    assert_eq!(start(&before, at(4, 8)).await, at(4, 0));
}

#[tokio::test]
async fn a_leftover_partial_of_a_complete_segment_is_deleted() {
    let a = archive(&[5, 6], &[6]).await;
    assert_eq!(start(&a, at(5, 0)).await, at(7, 0));
    let list = a.segments(Some(TimelineId(1))).await.unwrap();
    assert_eq!(list.segments.len(), 2);
    let mut files: Vec<String> = Vec::new();
    let mut stream = a.store().list(Some(a.wal_prefix()));
    while let Some(meta) = futures_util::TryStreamExt::try_next(&mut stream)
        .await
        .unwrap()
    {
        files.push(meta.location.to_string());
    }
    files.sort();
    assert_eq!(
        files,
        [
            "wal/000000010000000000000005.zst",
            "wal/000000010000000000000006.zst",
            "wal/000000020000000000000009",
        ]
    );
}
