//! PostgreSQL's segments through the archive into the WAL decoder.

use super::*;
use crate::wal::{Poll, WalDecoder};

/// Decodes segments as they come, handing each buffer over without a copy;
/// returns the number of records and the decoder's last answer.
fn decode(start: Lsn, segments: impl Iterator<Item = SegmentData>) -> (usize, Poll) {
    let mut decoder = WalDecoder::new(start, SEG);
    let mut records = 0;
    let mut segments = segments.peekable();
    loop {
        match decoder
            .poll()
            .unwrap_or_else(|e| panic!("decoding failed: {e}"))
        {
            Poll::Record(record) => {
                records += 1;
                decoder.recycle(record);
            }
            Poll::NeedMore => match segments.next() {
                Some(segment) => {
                    assert_eq!(segment.start, decoder.input_end(), "{}", segment.file);
                    // The decoder has consumed the previous buffer entirely.
                    if records > 0 {
                        assert!(decoder.take_spent_buffer().is_some());
                    }
                    decoder.feed_owned(segment.bytes);
                }
                None => return (records, Poll::NeedMore),
            },
            end @ Poll::EndOfWal { .. } => return (records, end),
        }
    }
}

/// Stores the fixture segments: compressed, plain, compressed.
async fn store_fixture(archive: &Archive) {
    for (i, (name, bytes)) in fixture().segments.iter().enumerate() {
        archive
            .put_segment(*name, bytes.clone(), i != 1, false)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixture_decodes_through_the_archive_like_pg_waldump() {
    let fx = fixture();
    assert!(
        fx.waldump_records > 100,
        "fixture has {} records",
        fx.waldump_records
    );
    for backend in [Backend::memory("e2e"), Backend::local("e2e")] {
        store_fixture(&backend.archive()).await;
        let archive = backend.archive();
        let from = start(7);
        let (segments, err) = read_all(&archive, from, None, ReadOptions::default()).await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(segnos(&segments), [7, 8, 9]);
        let (records, last) = decode(from, segments.into_iter());
        assert_eq!(records, fx.waldump_records);
        // The last segment ends with XLOG_SWITCH: the decoder waits for the next one.
        assert_eq!(last, Poll::NeedMore);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixture_decodes_on_a_blocking_thread() {
    let backend = Backend::memory("e2e-blocking");
    store_fixture(&backend.archive()).await;
    let archive = backend.archive();
    let runtime = tokio::runtime::Handle::current();
    let from = start(7);
    let (records, last) = tokio::task::spawn_blocking(move || {
        let receiver = archive.read_blocking(&runtime, from, None, ReadOptions::default());
        decode(from, receiver.map(|s| s.unwrap_or_else(|e| panic!("{e}"))))
    })
    .await
    .unwrap();
    assert_eq!(records, fixture().waldump_records);
    assert_eq!(last, Poll::NeedMore);
}

/// Throughput of listing, fetching and decompressing, printed; run with
/// `cargo test -p walfill-replay archive_read_throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, not a check"]
async fn archive_read_throughput() {
    let count = 64u64;
    let mut noisy = real(7);
    // Less compressible than the fixture: pseudo-random bytes in every other page.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for page in noisy.chunks_mut(8192).skip(1).step_by(2) {
        for b in page.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    for (label, content) in [("fixture", real(7)), ("half random", noisy)] {
        for backend in [Backend::memory("bench"), Backend::local("bench")] {
            let writer = backend.archive();
            let t = std::time::Instant::now();
            for n in 0..count {
                writer
                    .put_segment(name(1, 0x100 + n), content.clone(), true, false)
                    .await
                    .unwrap();
            }
            let put = t.elapsed();
            let stored: u64 = writer
                .segments(None)
                .await
                .unwrap()
                .segments
                .iter()
                .map(|s| s.size)
                .sum();
            for read_ahead in [1, 4] {
                let archive = backend.archive();
                let t = std::time::Instant::now();
                let options = ReadOptions::default().with_read_ahead(read_ahead);
                let (got, err) = read_all(&archive, start(0x100), None, options).await;
                let took = t.elapsed();
                assert!(err.is_none() && got.len() == count as usize);
                let mib = (count * u64::from(SEG)) as f64 / (1 << 20) as f64;
                println!(
                    "{label:12} {:20} read_ahead {read_ahead}: {count} segments ({} KiB stored each) in {took:?}: {:.0} MiB/s (compress+put {:.0} MiB/s)",
                    archive.store().to_string().split('(').next().unwrap_or(""),
                    stored / count / 1024,
                    mib / took.as_secs_f64(),
                    mib / put.as_secs_f64(),
                );
            }
        }
    }
}

/// A segment read from a local archive names its file by a URL with the
/// path's leading `/` (messages about damaged WAL print it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_names_its_file_by_url() {
    let backend = Backend::local("e2e-url");
    store_fixture(&backend.archive()).await;
    let archive = backend.archive();
    let (segments, err) = read_all(&archive, start(7), None, ReadOptions::default()).await;
    assert!(err.is_none(), "{err:?}");
    let file = &segments[0].file;
    assert!(
        file.starts_with("file:///") && file.starts_with(archive.url()) && file.contains("/0000"),
        "{file} (archive {})",
        archive.url()
    );
}
