//! `walfill archive` keeping up with a workload, and its `.partial` tail.

use std::time::{Duration, Instant};

use super::{
    assert_archive_holds, current_lsn, segment_size, segment_start, server_bytes, terminate,
    wait_server_archived, wait_until, LocalArchive, Running, SlotGuard,
};
use crate::support::{TestDb, Walfill};
use walfill_replay::SegmentNo;

/// The slot `walfill archive` creates by default for a configuration.
fn default_slot(config_text: &str, dir: &std::path::Path) -> String {
    let path = dir.join("walfill-default-slot.toml");
    std::fs::write(&path, config_text).expect("write config");
    let config = walfill::config::load(&path).expect("load config");
    walfill::archiver::default_slot_name(&config)
}

/// A workload spanning several segments is archived: every segment from the
/// slot's start through the requested LSN, zstd, identical to the cluster's
/// own archived copies; the slot ends where the archive does.
#[test]
fn archive_keeps_up_with_several_segments() {
    let db = TestDb::new("arch_keep");
    let archive = LocalArchive::new("keep");
    let config_text = format!("[source]\nurl = \"{}\"\n\n{}", db.url(), archive.section());
    let walfill = Walfill::with_text(&config_text);
    let slot = SlotGuard::named(&default_slot(&config_text, &archive.dir));
    let size = segment_size(&db);

    // First run: creates the default slot (from the last checkpoint's redo
    // point) and archives up to now.
    db.exec("CHECKPOINT");
    let before = current_lsn(&db);
    let child = walfill.spawn(&["archive", "--once-until-lsn", &before.to_string()]);
    walfill.wait_ok(child, Duration::from_secs(120));
    let first = archive
        .files()
        .first()
        .cloned()
        .expect("the first run archived nothing");
    let first_segno = walfill_replay::SegmentName::parse(&first[..24], u64::from(size))
        .expect("a segment file")
        .segno;
    assert!(
        first_segno <= SegmentNo::containing(before, u64::from(size)),
        "the archive starts at {first}, after {before}"
    );
    let slot_type = db.value(&format!(
        "SELECT slot_type FROM pg_replication_slots WHERE slot_name = '{}'",
        slot.name
    ));
    assert_eq!(
        slot_type.as_deref(),
        Some("physical"),
        "default slot {}",
        slot.name
    );

    // A workload over several segments, then a second run.
    db.exec("CREATE TABLE w (id bigserial PRIMARY KEY, pad text)");
    for _ in 0..4 {
        db.exec(
            "INSERT INTO w (pad) SELECT repeat(md5(g::text), 6) FROM generate_series(1, 20000) g;
             SELECT pg_switch_wal();",
        );
    }
    db.exec("INSERT INTO w (pad) VALUES ('the tail')");
    let until = current_lsn(&db);
    let started = Instant::now();
    let child = walfill.spawn(&["archive", "--once-until-lsn", &until.to_string()]);
    walfill.wait_ok(child, Duration::from_secs(180));
    let elapsed = started.elapsed();

    wait_server_archived(&db, segment_start(until, size));
    let from = first_segno.start_lsn(u64::from(size));
    let segments = assert_archive_holds(&archive, &db, from, until);
    assert!(segments >= 4, "only {segments} complete segments");
    eprintln!(
        "archived up to {until}: {segments} segments in the archive, second run took {:.2} s",
        elapsed.as_secs_f64()
    );

    // Each complete segment followed by another has its summary, made as
    // the next one was stored.
    let complete: Vec<String> = archive
        .files()
        .into_iter()
        .filter(|f| f.len() == 28 && f.ends_with(".zst"))
        .collect();
    for pair in complete.windows(2) {
        let path = archive.dir.join("summary").join(&pair[0][..24]);
        let stored = std::fs::read(&path).unwrap_or_default();
        let summary = walfill_replay::summary::SegmentSummary::decode(&stored)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            summary.object.name.ends_with(&pair[0]),
            "{:?}",
            summary.object
        );
    }

    // The slot moved to what the archive holds, and no further.
    let restart = slot.restart_lsn();
    assert!(restart >= until, "slot at {restart}, before {until}");
    wait_server_archived(&db, segment_start(restart, size));
    assert_archive_holds(&archive, &db, from, restart);
}

/// With the workload stopped and a 1 s flush interval, the `.partial` file
/// of the unfinished segment soon holds the WAL written before waiting. When
/// the server cuts the stream the archiver reconnects; a SIGTERM stops it
/// cleanly with the slot at what is archived.
#[test]
fn partial_tail_is_stored_every_flush_interval() {
    let db = TestDb::new("arch_tail");
    let archive = LocalArchive::new("tail");
    db.exec("CHECKPOINT");
    let slot = SlotGuard::create(&format!("{}_slot", db.name));
    let start = slot.restart_lsn();
    let size = segment_size(&db);
    let walfill = Walfill::new(&db, &archive.section());
    let mut running =
        Running::new(walfill.spawn(&["archive", "--slot", &slot.name, "--flush-interval", "1"]));

    db.exec(
        "CREATE TABLE t (id int, pad text);
         INSERT INTO t SELECT g, repeat('y', 100) FROM generate_series(1, 5000) g;",
    );
    let written = current_lsn(&db);
    let waited = Instant::now();
    let name = super::segment_file(SegmentNo::containing(written, u64::from(size)), size);
    let offset = written.segment_offset(u64::from(size)) as usize;
    wait_until(Duration::from_secs(30), "the tail in the archive", || {
        let files = archive.files();
        let file = [format!("{name}.zst"), format!("{name}.partial.zst")]
            .into_iter()
            .find(|f| files.contains(f));
        match file {
            Some(file) => archive.zst(&file)[..offset] == server_bytes(&db, &name, offset)[..],
            None => false,
        }
    });
    let delay = waited.elapsed();
    eprintln!(
        "WAL up to {written} was in the archive {} ms after it was written",
        delay.as_millis()
    );
    assert!(
        delay < Duration::from_secs(10),
        "the tail took {delay:?} to reach the archive with a 1 s flush interval"
    );

    // The server ends the stream (its walsender is terminated): the
    // archiver reconnects and goes on.
    db.exec(&format!(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
          WHERE slot_name = '{}' AND active_pid IS NOT NULL",
        slot.name
    ));
    db.exec("INSERT INTO t SELECT g, repeat('w', 100) FROM generate_series(1, 5000) g");
    let written = current_lsn(&db);
    wait_until(
        Duration::from_secs(60),
        "the archive after a reconnect",
        || slot.restart_lsn() >= written,
    );
    assert!(
        matches!(running.child().try_wait(), Ok(None)),
        "the archiver exited when its stream was cut"
    );

    let child = running.take();
    terminate(&child);
    walfill.wait_ok(child, Duration::from_secs(60));
    let restart = slot.restart_lsn();
    assert!(restart >= written, "slot at {restart}, before {written}");
    wait_server_archived(&db, segment_start(restart, size));
    assert_archive_holds(&archive, &db, start, restart);
}
