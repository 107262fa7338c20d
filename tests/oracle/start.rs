//! `walfill decode --from` a slot's consistent point, with no restart point
//! given: the decoder finds in the archive where the slot would have
//! started, and prints exactly what the slot prints, a transaction in
//! flight at the slot's creation included; an archive that does not reach
//! back far enough is an error, never an empty success.

use std::process::Output;
use std::time::{Duration, Instant};

use super::{archive_url, assert_same_text, copy_segments_from, Oracle};
use crate::archiver::LocalArchive;
use crate::support::cluster::connect;
use crate::support::TestDb;

fn decode(archive: &str, o: &Oracle, from: &str, to: &str) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_walfill"))
        .args(["decode", "--archive", archive, "--from", from, "--to", to])
        .args(["--format", "test_decoding", "--source", &o.db.url()])
        .env("RUST_LOG", "walfill=info")
        .env_remove("WALFILL_CONFIG")
        .output()
        .expect("run walfill decode")
}

/// The slot's snapshot builder waits for A (running at its start), then
/// for B; D begins after that and commits after the consistent point, with
/// a change written before it, in an earlier segment.
#[test]
fn from_a_slots_lsn_alone_decodes_like_the_slot() {
    let db = TestDb::new("oracle_start");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         CREATE TABLE other (x int);",
    );
    let slot = format!("{}_oracle", db.name);
    let mut a = db.client();
    a.batch_execute("BEGIN; INSERT INTO other VALUES (1)")
        .unwrap();
    let creating = std::thread::spawn({
        let url = db.url();
        let slot = slot.clone();
        move || -> (String, String) {
            let row = connect(&url)
                .query_one(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'test_decoding')",
                    &[&slot],
                )
                .expect("create the slot");
            let restart = connect(&url)
                .query_one(
                    "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .expect("read the slot");
            (restart.get(0), row.get(0))
        }
    });
    db.wait_for(
        &format!("SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = '{slot}'"),
        Duration::from_secs(30),
        "the slot to be created",
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut b = db.client();
    b.batch_execute("BEGIN; INSERT INTO t VALUES (1, 'b')")
        .unwrap();
    a.batch_execute("COMMIT").unwrap();
    db.exec("CHECKPOINT");
    let mut d = db.client();
    d.batch_execute("BEGIN; INSERT INTO t VALUES (2, 'd before the consistent point')")
        .unwrap();
    db.exec("SELECT pg_switch_wal()");
    b.batch_execute("COMMIT").unwrap();
    db.exec("CHECKPOINT");
    let started = Instant::now();
    while !creating.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the slot never became consistent"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (restart, from) = creating.join().expect("the slot");
    d.batch_execute(
        "INSERT INTO t VALUES (3, 'd after'); UPDATE t SET v = 'by d' WHERE id = 1; COMMIT",
    )
    .unwrap();
    db.exec("INSERT INTO t VALUES (4, 'later'); DELETE FROM t WHERE id = 2;");
    let o = Oracle {
        db,
        slot,
        restart,
        from,
        archive: archive_url(),
    };
    let expected = o.expected();
    assert!(
        expected.text.contains("d before the consistent point"),
        "the slot did not print D whole:\n{}",
        expected.text
    );

    let out = decode(&archive_url(), &o, &o.from, &expected.to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_same_text(
        &expected.text,
        String::from_utf8_lossy(&out.stdout).trim_end(),
    );

    // A --from that no record starts at (in the alignment padding after
    // the slot's last record, or inside the record after it): decoding
    // starts at the next record, and says how many bytes it skipped.
    let inside = lsn_plus(&o.from, not_a_record_start(&o.from));
    let out = decode(&archive_url(), &o, &inside, &expected.to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is not the start of a WAL record"),
        "{stderr}"
    );
    assert_same_text(
        &expected.text,
        String::from_utf8_lossy(&out.stdout).trim_end(),
    );

    // An archive that starts after D's first change cannot serve --from.
    let partial = LocalArchive::new("start");
    copy_segments_from(&o, &partial, &o.from);
    let out = decode(&partial.url(), &o, &o.from, &expected.to);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "decoded from a short archive:\n{stderr}"
    );
    assert!(
        stderr.contains("cannot decode from") && out.stdout.is_empty(),
        "{stderr}"
    );
}

/// `lsn` plus `n` bytes, as `X/Y`.
fn lsn_value(lsn: &str) -> u64 {
    let (hi, lo) = lsn.split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) + u64::from_str_radix(lo, 16).unwrap()
}

/// How far past `lsn` (the end of a record) a position is that no record
/// starts at: records start 8-byte aligned, so one byte on, unless that
/// byte is aligned; then 3 bytes into the record that starts there.
fn not_a_record_start(lsn: &str) -> u64 {
    if (lsn_value(lsn) + 1) % 8 == 0 {
        4
    } else {
        1
    }
}

fn lsn_plus(lsn: &str, n: u64) -> String {
    let value = lsn_value(lsn) + n;
    format!("{:X}/{:X}", value >> 32, value & 0xFFFF_FFFF)
}
