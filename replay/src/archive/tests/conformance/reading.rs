//! Reading ranges: order, bounds, gaps, tails, timelines.

use super::*;

pub(super) async fn reads_a_range_in_order_with_read_ahead(b: Backend) {
    put_run(&b.archive(), 20).await;
    for read_ahead in [1, 3, 8] {
        let archive = b.archive();
        let options = ReadOptions::default().with_read_ahead(read_ahead);
        let (got, err) = read_all(&archive, start(7), None, options).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(segnos(&got), (7..=20).collect::<Vec<_>>());
        for s in &got {
            let n = s.name.segno.0;
            let expected = if n <= 9 { real(n) } else { synthetic(n) };
            assert!(s.bytes == expected, "content of segment {n}");
            assert_eq!(s.start, start(n));
            assert_eq!(s.end(), start(n + 1));
            assert!(!s.partial);
            let suffix = if n % 2 == 1 { ".zst" } else { "" };
            assert!(
                s.file
                    .ends_with(&format!("{}{suffix}", s.name.file_name(u64::from(SEG)))),
                "{}",
                s.file
            );
        }
    }
}

pub(super) async fn to_bounds_the_read(b: Backend) {
    put_run(&b.archive(), 12).await;
    let archive = b.archive();
    let from = start(8).advance(100);
    let (got, err) = read_all(&archive, from, Some(start(10)), ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [8, 9]);
    let (got, _) = read_all(
        &archive,
        from,
        Some(start(10).advance(1)),
        ReadOptions::default(),
    )
    .await;
    assert_eq!(segnos(&got), [8, 9, 10]);
    let (got, _) = read_all(
        &archive,
        from,
        Some(from.advance(1)),
        ReadOptions::default(),
    )
    .await;
    assert_eq!(segnos(&got), [8]);
    let (got, err) = read_all(&archive, from, Some(from), ReadOptions::default()).await;
    assert!(got.is_empty() && err.is_none());
    // The plan says the same without fetching.
    let plan = archive
        .plan_read(from, Some(start(12)), &ReadOptions::default())
        .await
        .unwrap();
    let planned: Vec<u64> = plan.segments.iter().map(|s| s.name.segno.0).collect();
    assert_eq!(planned, [8, 9, 10, 11]);
}

pub(super) async fn missing_middle_segment_is_named(b: Backend) {
    let writer = b.archive();
    put_run(&writer, 8).await;
    writer
        .put_segment(name(1, 10), synthetic(10), true, false)
        .await
        .unwrap();
    writer
        .put_segment(name(1, 11), synthetic(11), false, false)
        .await
        .unwrap();
    let archive = b.archive();
    let (got, err) = read_all(&archive, start(7), Some(start(12)), ReadOptions::default()).await;
    // Reported before anything is read.
    assert!(got.is_empty());
    match err {
        Some(ArchiveError::MissingSegment { name, lsn, .. }) => {
            assert!(name.ends_with("wal/000000010000000000000009"), "{name}");
            assert_eq!(lsn, start(9));
        }
        other => panic!("expected a missing segment, got {other:?}"),
    }
    // Without an end, reading stops before the gap.
    let (got, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [7, 8]);
}

pub(super) async fn range_past_the_end_is_missing(b: Backend) {
    put_run(&b.archive(), 9).await;
    let archive = b.archive();
    let (got, err) = read_all(
        &archive,
        start(8),
        Some(start(10).advance(8)),
        ReadOptions::default(),
    )
    .await;
    assert!(got.is_empty());
    let err = err.expect("an error");
    assert!(err.is_permanent());
    match &err {
        ArchiveError::MissingSegment { name, lsn, url } => {
            assert!(name.ends_with("00000001000000000000000A"), "{name}");
            assert_eq!(*lsn, start(10));
            assert_eq!(url, archive.url());
        }
        other => panic!("expected a missing segment, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("00000001000000000000000A") && text.contains("0/A00000"),
        "{text}"
    );
    // A start that is not in the archive at all, without an end.
    let from = start(0x20).advance(0x28);
    let (_, err) = read_all(&archive, from, None, ReadOptions::default()).await;
    match err {
        Some(ArchiveError::MissingSegment { name, lsn, .. }) => {
            assert!(name.ends_with("000000010000000000000020"), "{name}");
            assert_eq!(lsn, from);
        }
        other => panic!("expected a missing segment, got {other:?}"),
    }
}

pub(super) async fn partial_tail_is_used_when_last(b: Backend) {
    let writer = b.archive();
    put_run(&writer, 8).await;
    writer.put_partial(name(1, 9), real(9), true).await.unwrap();
    let archive = b.archive();
    let (got, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [7, 8, 9]);
    let tail = &got[2];
    assert!(tail.partial && tail.file.ends_with("000000010000000000000009.partial.zst"));
    assert!(tail.bytes == real(9));
    assert!(!got[1].partial);
    // Inside the tail is fine; past it, the next segment is missing.
    let (got, err) = read_all(
        &archive,
        start(8),
        Some(start(9).advance(5000)),
        ReadOptions::default(),
    )
    .await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [8, 9]);
    let (_, err) = read_all(&archive, start(8), Some(start(11)), ReadOptions::default()).await;
    match err {
        Some(ArchiveError::MissingSegment { name, .. }) => {
            assert!(name.ends_with("000000010000000000000009"), "{name}")
        }
        other => panic!("expected a missing segment, got {other:?}"),
    }
    // A .partial later overwritten keeps one file.
    writer
        .put_partial(name(1, 9), synthetic(9), true)
        .await
        .unwrap();
    let (got, _) = read_all(&archive, start(9), None, ReadOptions::default()).await;
    assert!(got[0].bytes == synthetic(9));
}

pub(super) async fn complete_segment_wins_over_partial(b: Backend) {
    let writer = b.archive();
    put_run(&writer, 7).await;
    writer
        .put_partial(name(1, 8), synthetic(8), false)
        .await
        .unwrap();
    writer
        .put_partial(name(1, 8), synthetic(8), true)
        .await
        .unwrap();
    writer
        .put_segment(name(1, 8), real(8), true, false)
        .await
        .unwrap();
    let archive = b.archive();
    let list = archive.segments(None).await.unwrap();
    let eight = list.get(name(1, 8)).unwrap();
    assert!(!eight.partial && eight.compressed, "{eight:?}");
    let (got, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [7, 8]);
    assert!(!got[1].partial && got[1].bytes == real(8));

    // A .partial in the middle is only a tail: a range past it needs the complete file.
    writer
        .put_partial(name(1, 9), real(9), false)
        .await
        .unwrap();
    writer
        .put_segment(name(1, 10), synthetic(10), false, false)
        .await
        .unwrap();
    let (_, err) = read_all(&archive, start(8), Some(start(11)), ReadOptions::default()).await;
    match err {
        Some(ArchiveError::MissingSegment { name, lsn, .. }) => {
            assert!(name.ends_with("wal/000000010000000000000009"), "{name}");
            assert_eq!(lsn, start(9));
        }
        other => panic!("expected a missing segment, got {other:?}"),
    }
    let (got, _) = read_all(&archive, start(8), None, ReadOptions::default()).await;
    assert_eq!(segnos(&got), [8, 9]);
    assert!(got[1].partial);
}

pub(super) async fn several_timelines_are_reported(b: Backend) {
    let writer = b.archive();
    put_run(&writer, 8).await;
    writer
        .put_segment(name(2, 8), synthetic(8), true, false)
        .await
        .unwrap();
    writer
        .put_segment(name(2, 9), real(9), false, false)
        .await
        .unwrap();
    let archive = b.archive();
    let (got, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(got.is_empty());
    match err {
        Some(e @ ArchiveError::SeveralTimelines { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("(1, 2)") && text.contains("ReadOptions::timeline"),
                "{text}"
            );
        }
        other => panic!("expected several timelines, got {other:?}"),
    }
    let options = ReadOptions::default().with_timeline(TimelineId(2));
    let (got, err) = read_all(&archive, start(8), None, options).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [8, 9]);
    assert!(got.iter().all(|s| s.name.timeline == TimelineId(2)));
    assert!(got[0].bytes == synthetic(8));
    let options = ReadOptions::default().with_timeline(TimelineId(1));
    let (got, _) = read_all(&archive, start(7), None, options).await;
    assert_eq!(segnos(&got), [7, 8]);
    // Only one timeline in a bounded range: no choice needed.
    let (got, err) = read_all(&archive, start(7), Some(start(8)), ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), [7]);
    assert_eq!(
        archive.segments(None).await.unwrap().timelines(),
        [TimelineId(1), TimelineId(2)]
    );
}

pub(super) async fn blocking_receiver_delivers_in_order(b: Backend) {
    put_run(&b.archive(), 14).await;
    let archive = b.archive();
    let runtime = tokio::runtime::Handle::current();
    let got = tokio::task::spawn_blocking(move || {
        let options = ReadOptions::default().with_read_ahead(3);
        let receiver = archive.read_blocking(&runtime, start(8), Some(start(14)), options);
        receiver
            .map(|s| s.map(|s| (s.name.segno.0, s.bytes)))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .unwrap()
    .unwrap();
    let numbers: Vec<u64> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, (8..14).collect::<Vec<_>>());
    for (n, bytes) in &got {
        let expected = if *n <= 9 { real(*n) } else { synthetic(*n) };
        assert!(*bytes == expected, "segment {n}");
    }
    // Errors come through too, then the end.
    let archive = b.archive();
    let runtime = tokio::runtime::Handle::current();
    let items = tokio::task::spawn_blocking(move || {
        let mut receiver =
            archive.read_blocking(&runtime, start(8), Some(start(20)), ReadOptions::default());
        let first = receiver.recv();
        (first, receiver.recv().is_none())
    })
    .await
    .unwrap();
    assert!(matches!(
        items.0,
        Some(Err(ArchiveError::MissingSegment { .. }))
    ));
    assert!(items.1);
}
