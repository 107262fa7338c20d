//! Other tools' layouts: detection, reading every codec, pgBackRest's
//! checksums, refusing writes, following timelines through history files.

use sha1::{Digest, Sha1};

use super::*;
use crate::archive::{Codec, Layout};

/// The file name of segment `n` of timeline `tli`.
fn file(tli: u32, n: u64) -> String {
    name(tli, n).file_name(u64::from(SEG))
}

/// The SHA-1 of `bytes` in hexadecimal, as pgBackRest names files.
fn sha1_hex(bytes: &[u8]) -> String {
    Sha1::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads segments 7 to 9 and checks they are the fixture's, read from
/// files with the given codecs.
async fn reads_the_fixture(archive: &Archive, codecs: [Codec; 3]) {
    let list = archive.segments(None).await.expect("list");
    assert_eq!(list.segment_size, SEG);
    let listed: Vec<(u64, Codec)> = list
        .segments
        .iter()
        .map(|s| (s.name.segno.0, s.codec))
        .collect();
    assert_eq!(listed, vec![(7, codecs[0]), (8, codecs[1]), (9, codecs[2])]);
    let (got, err) = read_all(archive, start(7), Some(start(10)), ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(segnos(&got), vec![7, 8, 9]);
    for s in &got {
        assert!(s.bytes == real(s.name.segno.0), "content of {}", s.file);
    }
}

/// Writes fail with `ReadOnly` naming the layout.
async fn refuses_writes(archive: &Archive, layout: Layout) {
    let e = archive
        .put_segment(name(1, 10), synthetic(10), true, false)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ArchiveError::ReadOnly { layout: l, .. } if *l == layout),
        "{e}"
    );
    assert!(e.to_string().contains(layout.name()), "{e}");
    assert!(e.is_permanent());
    let e = archive.delete_partials(name(1, 9)).await.unwrap_err();
    assert!(matches!(e, ArchiveError::ReadOnly { .. }), "{e}");
}

pub(super) async fn flat_folder_is_detected_and_read(b: Backend) {
    b.put_other(&file(1, 7), real(7)).await;
    b.put_other(&format!("{}.gz", file(1, 8)), pack(Codec::Gzip, &real(8)))
        .await;
    b.put_other(&format!("{}.lz4", file(1, 9)), pack(Codec::Lz4, &real(9)))
        .await;
    // Not WAL: ignored.
    b.put_other(&format!("{}.00000028.backup", file(1, 7)), vec![1])
        .await;
    b.put_other("notes/README", vec![1]).await;
    let archive = b.archive();
    assert_eq!(archive.layout().await.unwrap(), Layout::Flat);
    reads_the_fixture(&archive, [Codec::Plain, Codec::Gzip, Codec::Lz4]).await;
    refuses_writes(&archive, Layout::Flat).await;
    // The same files with zstd, bzip2, Brotli and LZMA.
    let b2 = Backend::memory("flat_folder_is_detected_and_read_2");
    b2.put_other(&format!("{}.zst", file(1, 7)), pack(Codec::Zstd, &real(7)))
        .await;
    b2.put_other(&format!("{}.bz2", file(1, 8)), pack(Codec::Bzip2, &real(8)))
        .await;
    b2.put_other(&format!("{}.br", file(1, 9)), pack(Codec::Brotli, &real(9)))
        .await;
    reads_the_fixture(&b2.archive(), [Codec::Zstd, Codec::Bzip2, Codec::Brotli]).await;
}

pub(super) async fn wal_g_folder_is_detected_and_read(b: Backend) {
    b.put_other(
        &format!("wal_005/{}.lz4", file(1, 7)),
        pack(Codec::Lz4, &real(7)),
    )
    .await;
    b.put_other(
        &format!("wal_005/{}.lzma", file(1, 8)),
        pack(Codec::Lzma, &real(8)),
    )
    .await;
    b.put_other(
        &format!("wal_005/{}.br", file(1, 9)),
        pack(Codec::Brotli, &real(9)),
    )
    .await;
    b.put_other(
        "basebackups_005/base_000000010000000000000007_backup_stop_sentinel.json",
        vec![1],
    )
    .await;
    let archive = b.archive();
    assert_eq!(archive.layout().await.unwrap(), Layout::WalG);
    reads_the_fixture(&archive, [Codec::Lz4, Codec::Lzma, Codec::Brotli]).await;
    // From an offset, the listing starts in the middle.
    let from8 = archive.segments_from(start(8), None).await.unwrap();
    assert_eq!(from8.segments.len(), 2);
    refuses_writes(&archive, Layout::WalG).await;
}

/// A pgBackRest stanza's archive folder: `archive.info` naming the current
/// `<version>-<id>` folder, an older folder that must not be read.
async fn put_pgbackrest(b: &Backend, segments: &[(u64, Vec<u8>, Codec)]) {
    let info = "[backrest]\nbackrest-format=5\nbackrest-version=\"2.45\"\n\n[db]\ndb-id=2\n\
                db-system-id=7301234567890123456\ndb-version=\"15\"\n\n[db:history]\n\
                1={\"db-id\":7201234567890123456,\"db-version\":\"14\"}\n\
                2={\"db-id\":7301234567890123456,\"db-version\":\"15\"}\n";
    b.put_other("archive.info", info.as_bytes().to_vec()).await;
    b.put_other("archive.info.copy", info.as_bytes().to_vec())
        .await;
    let old = real(7);
    b.put_other(
        &format!("14-1/0000000100000000/{}-{}.gz", file(1, 6), sha1_hex(&old)),
        pack(Codec::Gzip, &old),
    )
    .await;
    for (n, bytes, codec) in segments {
        let name = file(1, *n);
        let path = format!(
            "15-2/{}/{name}-{}{}",
            &name[..16],
            sha1_hex(bytes),
            codec.extension()
        );
        b.put_other(&path, pack(*codec, bytes)).await;
    }
}

pub(super) async fn pgbackrest_folder_is_read_with_checksums(b: Backend) {
    put_pgbackrest(
        &b,
        &[
            (7, real(7), Codec::Bzip2),
            (8, real(8), Codec::Zstd),
            (9, real(9), Codec::Gzip),
        ],
    )
    .await;
    let archive = b.archive();
    assert_eq!(archive.layout().await.unwrap(), Layout::PgBackRest);
    reads_the_fixture(&archive, [Codec::Bzip2, Codec::Zstd, Codec::Gzip]).await;
    let list = archive.segments(None).await.unwrap();
    assert_eq!(list.layout, Layout::PgBackRest);
    assert!(list.segments.iter().all(|s| s.sha1.is_some()));
    // From an offset, inside the 16-digit folder.
    let from8 = archive.segments_from(start(8), None).await.unwrap();
    assert_eq!(from8.segments.len(), 2);
    refuses_writes(&archive, Layout::PgBackRest).await;
    // A missing segment is named as pgBackRest would store it.
    let (_, err) = read_all(&archive, start(7), Some(start(11)), ReadOptions::default()).await;
    let err = err.expect("segment 10 is missing");
    assert!(
        err.to_string()
            .contains(&format!("15-2/0000000100000000/{}", file(1, 10))),
        "{err}"
    );
}

pub(super) async fn pgbackrest_wrong_checksum_is_corrupt(b: Backend) {
    put_pgbackrest(&b, &[(7, real(7), Codec::Lz4), (8, real(8), Codec::Plain)]).await;
    // Segment 9's name states the checksum of other content.
    let name9 = file(1, 9);
    let path = format!(
        "15-2/{}/{name9}-{}.lz4",
        &name9[..16],
        sha1_hex(&synthetic(9))
    );
    b.put_other(&path, pack(Codec::Lz4, &real(9))).await;
    let archive = b.archive();
    let (got, err) = read_all(&archive, start(7), Some(start(10)), ReadOptions::default()).await;
    assert_eq!(segnos(&got), vec![7, 8]);
    match err {
        Some(ArchiveError::Corrupt { name, reason, .. }) => {
            assert_eq!(name, path);
            assert!(reason.contains("SHA-1"), "{reason}");
            assert!(reason.contains(&sha1_hex(&real(9))), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

pub(super) async fn pgbackrest_repository_root_is_refused(b: Backend) {
    b.put_other("archive/main/archive.info", vec![1]).await;
    b.put_other("backup/main/backup.info", vec![1]).await;
    let e = b.archive().segments(None).await.unwrap_err();
    assert!(matches!(e, ArchiveError::Layout { .. }), "{e}");
    assert!(e.to_string().contains("archive/<stanza>"), "{e}");
}

pub(super) async fn named_layout_wins_over_detection(b: Backend) {
    // walfill's own archive, and a flat file beside its wal/.
    let writer = b.archive();
    writer
        .put_segment(name(1, 8), real(8), true, false)
        .await
        .unwrap();
    b.put_other(&file(1, 7), real(7)).await;
    let detected = b.archive();
    assert_eq!(detected.layout().await.unwrap(), Layout::Walfill);
    let listed = detected.segments(None).await.unwrap();
    assert_eq!(listed.segments.len(), 1);
    assert_eq!(listed.segments[0].name.segno.0, 8);
    let flat = b.archive().with_layout(Some(Layout::Flat));
    assert_eq!(flat.named_layout(), Some(Layout::Flat));
    assert_eq!(flat.layout().await.unwrap(), Layout::Flat);
    let listed = flat.segments(None).await.unwrap();
    assert_eq!(listed.segments.len(), 1);
    assert_eq!(listed.segments[0].name.segno.0, 7);
    // A named foreign layout refuses writes even on an empty archive.
    let empty = Backend::memory("named_layout_wins_over_detection_empty");
    let e = empty
        .archive()
        .with_layout(Some(Layout::WalG))
        .put_segment(name(1, 7), real(7), true, false)
        .await
        .unwrap_err();
    assert!(matches!(e, ArchiveError::ReadOnly { .. }), "{e}");
}

pub(super) async fn timeline_switch_is_followed_through_history(b: Backend) {
    // Timeline 1: segments 7, 8 and 9 (9 is WAL timeline 2 abandoned).
    // Timeline 2 began at 0/880000, inside segment 8: its own copies of 8
    // and 9 differ from timeline 1's.
    let put = |tli: u32, n: u64, bytes: Vec<u8>| {
        let path = format!("wal_005/{}.lz4", file(tli, n));
        let b = &b;
        async move { b.put_other(&path, pack(Codec::Lz4, &bytes)).await }
    };
    put(1, 7, real(7)).await;
    put(1, 8, real(8)).await;
    put(1, 9, synthetic(9)).await;
    put(2, 8, synthetic(8)).await;
    put(2, 9, real(9)).await;
    put(2, 10, synthetic(10)).await;
    let history = "1\t0/880000\tno recovery target specified\n";
    b.put_other(
        "wal_005/00000002.history.lz4",
        pack(Codec::Lz4, history.as_bytes()),
    )
    .await;
    let archive = b.archive();
    let list = archive.segments(None).await.unwrap();
    assert_eq!(list.histories, vec![TimelineId(2)]);
    let followed = archive.follow(&list, TimelineId(2)).await.unwrap().unwrap();
    let kept: Vec<(u32, u64)> = followed
        .segments
        .iter()
        .map(|s| (s.name.timeline.0, s.name.segno.0))
        .collect();
    assert_eq!(kept, vec![(1, 7), (2, 8), (2, 9), (2, 10)]);
    assert!(archive
        .follow(&list, TimelineId(3))
        .await
        .unwrap()
        .is_none());
    // Without a timeline to follow, the choice is ambiguous.
    let (_, err) = read_all(&archive, start(7), Some(start(10)), ReadOptions::default()).await;
    assert!(
        matches!(err, Some(ArchiveError::SeveralTimelines { .. })),
        "{err:?}"
    );
    // Following timeline 2: 7 from timeline 1, 8 on from timeline 2.
    let follow = ReadOptions::default().following(TimelineId(2));
    let (got, err) = read_all(&archive, start(7), Some(start(11)), follow).await;
    assert!(err.is_none(), "{err:?}");
    let read: Vec<(u32, u64)> = got
        .iter()
        .map(|s| (s.name.timeline.0, s.name.segno.0))
        .collect();
    assert_eq!(read, vec![(1, 7), (2, 8), (2, 9), (2, 10)]);
    assert!(got[1].bytes == synthetic(8) && got[2].bytes == real(9));
    // Following timeline 1 ignores timeline 2.
    let follow = ReadOptions::default().following(TimelineId(1));
    let (got, err) = read_all(&archive, start(7), Some(start(10)), follow).await;
    assert!(err.is_none(), "{err:?}");
    assert!(got.iter().all(|s| s.name.timeline == TimelineId(1)));
    assert!(got[2].bytes == synthetic(9));
    // Timeline 2's segment 9 missing: named on timeline 2, not read from 1.
    let b2 = Backend::memory("timeline_switch_is_followed_through_history_gap");
    for (tli, n, bytes) in [
        (1, 7, real(7)),
        (1, 8, real(8)),
        (1, 9, real(9)),
        (2, 8, real(8)),
    ] {
        b2.put_raw(&file(tli, n), bytes).await;
    }
    b2.put_raw("00000002.history", history.as_bytes().to_vec())
        .await;
    let follow = ReadOptions::default().following(TimelineId(2));
    let (got, err) = read_all(&b2.archive(), start(7), Some(start(10)), follow).await;
    assert!(got.is_empty());
    let err = err.expect("segment 9 of timeline 2 is missing");
    assert!(err.is_missing_segment(), "{err}");
    assert!(err.to_string().contains(&file(2, 9)), "{err}");
}
