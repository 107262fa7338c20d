//! The archive's behaviour, case by case, on every backend.

use super::*;

mod damage;
mod layouts;
mod listing;
mod reading;

use damage::*;
use layouts::*;
use listing::*;
use reading::*;

/// Runs every case on every backend, one test each.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod in_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::memory(stringify!($case))).await
                }
            )*
        }
        mod local_file_system {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::local(stringify!($case))).await
                }
            )*
        }
        mod s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::s3(stringify!($case))).await
                }
            )*
        }
    };
}

conformance!(
    lists_segments_and_learns_the_size,
    reads_a_range_in_order_with_read_ahead,
    to_bounds_the_read,
    missing_middle_segment_is_named,
    range_past_the_end_is_missing,
    truncated_segment_is_corrupt,
    garbage_zst_names_the_file,
    partial_tail_is_used_when_last,
    complete_segment_wins_over_partial,
    several_timelines_are_reported,
    segment_size_given_or_mismatched,
    empty_archive_has_no_segments,
    blocking_receiver_delivers_in_order,
    partials_are_deleted_after_completion,
    flat_folder_is_detected_and_read,
    wal_g_folder_is_detected_and_read,
    pgbackrest_folder_is_read_with_checksums,
    pgbackrest_wrong_checksum_is_corrupt,
    pgbackrest_repository_root_is_refused,
    named_layout_wins_over_detection,
    timeline_switch_is_followed_through_history,
);

/// Stores fixture segments 7 to 9 (7 and 9 compressed) and synthetic ones
/// from 10 to `last`, alternating plain and compressed.
pub(super) async fn put_run(archive: &Archive, last: u64) {
    for n in 7..=last {
        let bytes = if n <= 9 { real(n) } else { synthetic(n) };
        let compress = n % 2 == 1;
        archive
            .put_segment(name(1, n), bytes, compress, false)
            .await
            .unwrap();
    }
}

/// Fetches run on their own while the consumer is busy, and no more than
/// `read_ahead` are started ahead of what the consumer has taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_progresses_while_the_consumer_is_busy() {
    use super::observed::ObservedStore;
    let ms = std::time::Duration::from_millis;
    let read_ahead = 3;
    // The last fetch of the first batch (segment 9) takes long: it ends
    // after the consumer has taken the first segment and stopped polling.
    let slow = name(1, 9).file_name(u64::from(SEG)) + ".zst";
    let store = Arc::new(ObservedStore::new(ms(5), (slow, ms(800))));
    let archive = Archive::from_store(store.clone(), Path::from("observed"))
        .with_segment_size(SEG)
        .unwrap();
    put_run(&archive, 18).await;
    let options = ReadOptions::default().with_read_ahead(read_ahead);
    let stream = archive.read(start(7), None, options);
    let mut stream = std::pin::pin!(stream);
    let first = futures_util::StreamExt::next(&mut stream)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.name.segno.0, 7);
    assert!(store.done() < read_ahead, "the slow fetch is still running");
    // Without polling the stream, the fetches already started complete...
    store.wait_done(read_ahead).await;
    // ...and no further one starts.
    assert_eq!(store.started(), read_ahead);
    let mut received = 1;
    while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
        let segment = item.unwrap();
        assert_eq!(segment.name.segno.0, 7 + received as u64);
        received += 1;
        let ahead = store.started() - received;
        assert!(
            ahead < read_ahead,
            "{ahead} fetched ahead of {received} taken"
        );
    }
    assert_eq!(received, 12);
    assert_eq!(store.started(), 12);
}
