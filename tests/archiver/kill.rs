//! `kill -9` of `walfill archive` while it streams, then restarts.

use std::time::Duration;

use super::{
    assert_archive_holds, assert_slot_within_archive, lsn, segment_size, LocalArchive, Running,
    SlotGuard,
};
use crate::oracle::{assert_same_text, Oracle};
use crate::support::cluster::{admin_url, connect};
use crate::support::workload::{create_orders, Writer};
use crate::support::Walfill;

/// The archiver is killed three times while a workload runs (small
/// transactions all along, bulk inserts and segment switches in between).
/// After a last run up to the end of the workload, every segment is there,
/// identical to the cluster's copies, no file is damaged, and decoding the
/// archive prints what `test_decoding` printed for the same range.
#[test]
fn kill_9_while_streaming_then_restart_loses_nothing() {
    // The slot exists before the oracle's, so the archive covers its range.
    connect(&admin_url())
        .batch_execute("CHECKPOINT")
        .expect("checkpoint");
    let slot = SlotGuard::create(&format!("wf_arch_kill_{}", std::process::id()));
    let o = Oracle::new(
        "arch_kill",
        "CREATE TABLE bulk (id int PRIMARY KEY, pad text)",
    );
    create_orders(&o.db, 2000);
    let archive = LocalArchive::new("kill");
    let walfill = Walfill::new(&o.db, &archive.section());
    let size = segment_size(&o.db);
    let args = ["archive", "--slot", &slot.name, "--flush-interval", "1"];

    let start = slot.restart_lsn();
    let writer = Writer::start(&o.db, 2000, 1_000_000, 11);
    for round in 0..3u64 {
        let running = Running::new(walfill.spawn(&args));
        // While it streams, the slot never passes what the archive holds.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(300));
            assert_slot_within_archive(&archive, &o.db, &slot, start);
        }
        o.db.exec(&format!(
            "INSERT INTO bulk SELECT g, repeat(md5(g::text), 8)
               FROM generate_series({0} * 40000 + 1, ({0} + 1) * 40000) g;
             SELECT pg_switch_wal();",
            round
        ));
        std::thread::sleep(Duration::from_millis(300 + 450 * round));
        let mut child = running.take();
        child.kill().expect("kill -9");
        let _ = child.wait();
        assert_slot_within_archive(&archive, &o.db, &slot, start);
    }
    let statements = writer.stop();
    assert!(statements > 0, "the workload wrote nothing");
    assert!(
        slot.restart_lsn() > start,
        "the slot never advanced across the kills, so the checks above checked nothing"
    );

    // The slot's output and the end of the workload; the cluster archives it.
    let expected = o.expected();
    let to = lsn(&expected.to);
    let child = walfill.spawn(&[
        "archive",
        "--slot",
        &slot.name,
        "--once-until-lsn",
        &expected.to,
    ]);
    walfill.wait_ok(child, Duration::from_secs(300));

    // No gap, every segment identical to the cluster's copy.
    let segments = assert_archive_holds(&archive, &o.db, lsn(&o.restart), to);
    assert!(segments >= 3, "only {segments} complete segments");
    // No damaged file.
    for file in archive.files().iter().filter(|f| f.ends_with(".zst")) {
        assert_eq!(
            archive.zst(file).len(),
            size as usize,
            "{file} does not decompress to one segment"
        );
    }
    // The decoder reads through all of it.
    let out = o.decode(&archive.url(), &expected.to, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "walfill decode failed: {stderr}");
    let actual = String::from_utf8_lossy(&out.stdout);
    assert_same_text(&expected.text, actual.trim_end_matches('\n'));
}
