//! The archive on S3, against the local S3-compatible server that
//! `scripts/s3-up.sh` starts (its environment gives the endpoint, the
//! credentials and `WALFILL_TEST_S3_BUCKET`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::TryStreamExt;
use walfill_replay::archive::{Archive, ReadOptions};
use walfill_replay::{Lsn, SegmentName, SegmentNo, TimelineId};

use super::{
    current_lsn, decode_segments, segment_file, segment_size, segment_start, server_archive,
    wait_server_archived, SlotGuard, COUNTER,
};
use crate::support::{TestDb, Walfill};

fn bucket() -> String {
    std::env::var("WALFILL_TEST_S3_BUCKET").unwrap_or_else(|_| {
        panic!(
            "WALFILL_TEST_S3_BUCKET is not set: start the local S3 server with \
             `eval \"$(scripts/s3-up.sh)\"` (scripts/test.sh does) and run the tests again"
        )
    })
}

/// A new prefix in the test bucket.
fn s3_url(tag: &str) -> String {
    format!(
        "s3://{}/{tag}-{}-{}",
        bucket(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A 1 MiB segment: a long page header at its start, then recognisable bytes.
fn synthetic_segment(segno: u64, fill: u8) -> Vec<u8> {
    const MIB: u32 = 1 << 20;
    let mut s = Vec::with_capacity(MIB as usize);
    s.extend_from_slice(&0xD110u16.to_le_bytes());
    s.extend_from_slice(&2u16.to_le_bytes()); // XLP_LONG_HEADER
    s.extend_from_slice(&1u32.to_le_bytes());
    s.extend_from_slice(&(segno * u64::from(MIB)).to_le_bytes());
    s.extend_from_slice(&[0; 8]);
    s.extend_from_slice(&42u64.to_le_bytes());
    s.extend_from_slice(&MIB.to_le_bytes());
    s.extend_from_slice(&8192u32.to_le_bytes());
    s.extend((0..MIB as usize - s.len()).map(|i| fill.wrapping_add((i / 4096) as u8)));
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The archive layer on S3: put a segment and a tail, list them (learning
/// the segment size from a compressed header), read them back, delete the tail.
#[test]
fn archive_layer_on_s3() {
    let url = s3_url("layer");
    let name = |segno| SegmentName {
        timeline: TimelineId(1),
        segno: SegmentNo(segno),
    };
    let five = synthetic_segment(5, 1);
    let six = synthetic_segment(6, 2);
    runtime().block_on(async {
        let writer = Archive::open(&url).expect("open");
        let object = writer.put_segment(name(5), five.clone(), true, false).await;
        assert!(object
            .expect("put")
            .ends_with("wal/000000010000000000000005.zst"));
        writer
            .put_partial(name(6), six.clone(), true)
            .await
            .expect("put partial");

        let reader = Archive::open(&url).expect("open");
        let list = reader.segments(None).await.expect("list");
        assert_eq!(list.segment_size, 1 << 20);
        let listed: Vec<(u64, bool, bool)> = list
            .segments
            .iter()
            .map(|s| (s.name.segno.0, s.partial, s.compressed))
            .collect();
        assert_eq!(listed, [(5, false, true), (6, true, true)]);

        let read: Vec<_> = reader
            .read(Lsn(5 << 20), Some(Lsn(7 << 20)), ReadOptions::default())
            .try_collect()
            .await
            .expect("read");
        assert_eq!(read.len(), 2);
        assert!(read[0].bytes == five && !read[0].partial);
        assert!(read[1].bytes == six && read[1].partial);

        reader.delete_partials(name(6)).await.expect("delete");
        let list = reader.segments(None).await.expect("list");
        assert_eq!(list.segments.len(), 1);
    });
}

/// `walfill archive` and `walfill wal-push` into S3: the segments read back
/// from the bucket are the cluster's own, the decoder reads them, and a push
/// of a segment the archiver stored finds the same bytes there.
#[test]
fn archive_and_push_to_s3() {
    let url = s3_url("cluster");
    let db = TestDb::new("arch_s3");
    db.exec("CHECKPOINT");
    let slot = SlotGuard::create(&format!("{}_slot", db.name));
    let start = segment_start(slot.restart_lsn(), segment_size(&db));
    let size = segment_size(&db);
    db.exec(
        "CREATE TABLE s (id int, pad text);
         INSERT INTO s SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g;
         SELECT pg_switch_wal();
         INSERT INTO s SELECT g, 'more' FROM generate_series(1, 1000) g;
         SELECT pg_switch_wal();",
    );
    let until = current_lsn(&db);
    let walfill = Walfill::new(&db, &format!("[archive]\nurl = \"{url}\"\n"));
    let child = walfill.spawn(&[
        "archive",
        "--slot",
        &slot.name,
        "--once-until-lsn",
        &until.to_string(),
    ]);
    walfill.wait_ok(child, Duration::from_secs(180));
    let end = segment_start(until, size);
    wait_server_archived(&db, end);

    let segments: Vec<Vec<u8>> = runtime().block_on(async {
        let archive = Archive::open(&url).expect("open");
        let read: Vec<_> = archive
            .read(start, Some(end), ReadOptions::default())
            .try_collect()
            .await
            .expect("read the archive on S3");
        read.into_iter().map(|s| s.bytes).collect()
    });
    assert!(segments.len() >= 2, "only {} segments", segments.len());
    let mut segno = SegmentNo::containing(start, u64::from(size));
    for bytes in &segments {
        let name = segment_file(segno, size);
        let theirs = std::fs::read(server_archive().join(&name)).expect("the cluster's copy");
        assert!(
            *bytes == theirs,
            "{name} on S3 differs from the cluster's copy"
        );
        segno = segno.next();
    }
    let records = decode_segments(start, size, segments);
    assert!(records > 20000, "only {records} records");

    // The same file pushed by wal-push: already there, byte for byte.
    let name = segment_file(SegmentNo::containing(start, u64::from(size)), size);
    let out = walfill.run(&[
        "wal-push",
        server_archive().join(&name).to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wal-push failed: {stderr}");
    assert!(stderr.contains("already archived"), "{stderr}");
}
