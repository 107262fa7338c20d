//! Listing, the segment size, writing and deleting.

use super::*;

pub(super) async fn lists_segments_and_learns_the_size(b: Backend) {
    let writer = b.archive();
    writer
        .put_segment(name(1, 7), real(7), true, false)
        .await
        .unwrap();
    writer
        .put_segment(name(1, 8), real(8), false, false)
        .await
        .unwrap();
    writer.put_partial(name(1, 9), real(9), true).await.unwrap();
    writer
        .put_segment(name(1, 0x1001), synthetic(0x1001), true, false)
        .await
        .unwrap();
    // Files that are not ours.
    b.put_raw(
        "00000002.history",
        b"1\t0/9000000\tno recovery target\n".to_vec(),
    )
    .await;
    b.put_raw(
        "000000010000000000000007.00000028.backup",
        b"label".to_vec(),
    )
    .await;
    b.put_raw("README", b"hello".to_vec()).await;
    b.put_other("base/000000010000000000000007", vec![0; 10])
        .await;
    assert_eq!(
        b.wal_files().await,
        [
            "000000010000000000000007.00000028.backup",
            "000000010000000000000007.zst",
            "000000010000000000000008",
            "000000010000000000000009.partial.zst",
            "000000010000000100000001.zst",
            "00000002.history",
            "README",
        ]
    );

    // A fresh handle learns the size from a page header.
    let archive = b.archive();
    assert_eq!(archive.known_segment_size(), None);
    let list = archive.segments(None).await.unwrap();
    assert_eq!(archive.known_segment_size(), Some(SEG));
    assert_eq!(list.segment_size, SEG);
    assert_eq!(list.histories, [TimelineId(2)]);
    assert_eq!(list.timelines(), [TimelineId(1)]);
    let summary: Vec<(u64, bool, bool)> = list
        .segments
        .iter()
        .map(|s| (s.name.segno.0, s.partial, s.compressed))
        .collect();
    // 1/1 is segment 4096 + 1 with 1 MiB segments.
    assert_eq!(
        summary,
        [
            (7, false, true),
            (8, false, false),
            (9, true, true),
            (0x1001, false, true)
        ]
    );
    let eight = list.get(name(1, 8)).unwrap();
    assert!(
        eight.file.ends_with("wal/000000010000000000000008"),
        "{}",
        eight.file
    );
    assert_eq!(eight.size, u64::from(SEG));

    // From an offset: the segment holding the LSN and later ones.
    let archive = b.archive();
    let from = start(8).advance(12345);
    let later = archive.segments_from(from, None).await.unwrap();
    let later: Vec<u64> = later.segments.iter().map(|s| s.name.segno.0).collect();
    assert_eq!(later, [8, 9, 0x1001]);
    let later = archive.segments_from(start(0x1000), None).await.unwrap();
    assert_eq!(later.segments.len(), 1);
    let none = archive
        .segments_from(start(8), Some(TimelineId(2)))
        .await
        .unwrap();
    assert!(none.segments.is_empty());

    // The size alone, on a fresh handle.
    assert_eq!(b.archive().segment_size().await.unwrap(), SEG);
}

pub(super) async fn segment_size_given_or_mismatched(b: Backend) {
    let writer = b.archive();
    put_run(&writer, 8).await;
    // A size that is not a segment size.
    let err = b.archive().with_segment_size(3 << 20).unwrap_err();
    assert!(matches!(err, ArchiveError::InvalidSegmentSize { size, .. } if size == 3 << 20));
    // A segment of another size than the archive's.
    let err = writer
        .put_segment(name(1, 1), vec![0u8; 2 << 20], false, false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("1048576"), "{err}");
    // A stated size is used to read the names and checked against the content.
    let archive = b.archive();
    let options = ReadOptions::default().with_segment_size(16 << 20);
    let (got, err) = read_all(&archive, Lsn(7 << 24), None, options).await;
    assert!(got.is_empty());
    match err {
        Some(ArchiveError::Corrupt { name, reason, .. }) => {
            assert!(name.ends_with("000000010000000000000007.zst"), "{name}");
            assert!(reason.contains("16777216"), "{reason}");
        }
        other => panic!("expected a corrupt segment, got {other:?}"),
    }
    assert_eq!(archive.known_segment_size(), None);
    let archive = b.archive().with_segment_size(SEG).unwrap();
    let (got, _) = read_all(&archive, start(8), None, ReadOptions::default()).await;
    assert_eq!(segnos(&got), [8]);
}

pub(super) async fn empty_archive_has_no_segments(b: Backend) {
    b.put_other("base/something", vec![1]).await;
    let archive = b.archive();
    let err = archive.segments(None).await.unwrap_err();
    assert!(matches!(err, ArchiveError::NoSegments { .. }), "{err}");
    let (got, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(got.is_empty());
    assert!(
        matches!(err, Some(ArchiveError::NoSegments { .. })),
        "{err:?}"
    );
    // With a known size, the first segment is simply missing.
    let archive = b.archive().with_segment_size(SEG).unwrap();
    let (_, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(err.is_some_and(|e| e.is_missing_segment()));
}

pub(super) async fn partials_are_deleted_after_completion(b: Backend) {
    let writer = b.archive();
    writer
        .put_partial(name(1, 7), synthetic(7), false)
        .await
        .unwrap();
    writer
        .put_partial(name(1, 7), synthetic(7), true)
        .await
        .unwrap();
    let file = writer
        .put_segment(name(1, 7), real(7), true, false)
        .await
        .unwrap();
    assert!(file.ends_with("wal/000000010000000000000007.zst"), "{file}");
    writer.delete_partials(name(1, 7)).await.unwrap();
    assert_eq!(b.wal_files().await, ["000000010000000000000007.zst"]);
    // Deleting what is not there is fine.
    writer.delete_partials(name(1, 7)).await.unwrap();
    writer.delete(&file).await.unwrap();
    writer.delete(&file).await.unwrap();
    assert!(b.wal_files().await.is_empty());
}
