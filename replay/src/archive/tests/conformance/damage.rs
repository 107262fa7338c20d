//! Damaged segment files.

use super::*;

pub(super) async fn truncated_segment_is_corrupt(b: Backend) {
    put_run(&b.archive(), 7).await;
    let mut half = real(8);
    half.truncate(half.len() / 2);
    b.put_raw("000000010000000000000008", half).await;
    let packed = zstd::encode_all(&real(9)[..], 3).unwrap();
    b.put_raw(
        "000000010000000000000009.zst",
        packed[..packed.len() - 10].to_vec(),
    )
    .await;
    let archive = b.archive();
    let (got, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert_eq!(segnos(&got), [7]);
    match err {
        Some(ArchiveError::Corrupt { name, reason, .. }) => {
            assert!(name.ends_with("wal/000000010000000000000008"), "{name}");
            assert!(reason.contains(&format!("{} bytes", SEG / 2)), "{reason}");
        }
        other => panic!("expected a corrupt segment, got {other:?}"),
    }
    let (got, err) = read_all(&archive, start(9), None, ReadOptions::default()).await;
    assert!(got.is_empty());
    match err {
        Some(e @ ArchiveError::Corrupt { .. }) => {
            assert!(
                e.to_string().contains("000000010000000000000009.zst"),
                "{e}"
            );
            assert!(e.is_permanent());
        }
        other => panic!("expected a corrupt segment, got {other:?}"),
    }
}

pub(super) async fn garbage_zst_names_the_file(b: Backend) {
    let writer = b.archive();
    put_run(&writer, 7).await;
    let garbage: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
    b.put_raw("000000010000000000000008.zst", garbage).await;
    let (got, err) = read_all(&writer, start(7), None, ReadOptions::default()).await;
    assert_eq!(segnos(&got), [7]);
    match err {
        Some(ArchiveError::Corrupt { name, source, .. }) => {
            assert!(name.ends_with("wal/000000010000000000000008.zst"), "{name}");
            assert!(source.is_some(), "the zstd error is kept");
        }
        other => panic!("expected a corrupt segment, got {other:?}"),
    }
    // Learning the segment size from it fails the same way.
    writer
        .delete(&format!(
            "{}/000000010000000000000007.zst",
            writer.wal_prefix()
        ))
        .await
        .unwrap();
    let err = b.archive().segments(None).await.unwrap_err();
    assert!(
        err.to_string().contains("000000010000000000000008.zst"),
        "{err}"
    );
}
