//! Segment summaries: a replay reads whole only the segments that may hold
//! its table's changes and takes the rest from their summaries; a damaged,
//! changed or missing summary means reading the segment whole, never a
//! wrong row.

use std::path::{Path, PathBuf};

use walfill_replay::summary::{SegmentSummary, SummaryEvent};

use crate::archiver::LocalArchive;
use crate::support::cluster::archive_url;
use crate::support::{assert_view_matches_in, TestDb, Walfill};

/// walfill with the shared archive, summaries in `bases`, and the target
/// at `version` (none before the table exists).
fn walfill(src: &TestDb, dest: &TestDb, bases: &LocalArchive, version: Option<&str>) -> Walfill {
    let target = version.map_or(String::new(), |version| {
        format!(
            "[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a * 2 AS a2, b\"\nversion = \"{version}\"\n"
        )
    });
    Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\
         [archive]\nurl = \"{}\"\nbases_url = \"{}\"\nwait_seconds = 120\n\
         base_snapshots = false\n{target}",
        src.url(),
        dest.url(),
        archive_url(),
        bases.url()
    ))
}

/// `(segments read whole, segments taken from their summary)` of a
/// version's fill, from its `filled` event.
fn read(dest: &TestDb, version: &str) -> (u64, u64) {
    let field = |name: &str| {
        dest.value(&format!(
            "SELECT detail->>'{name}' FROM walfill.events
              WHERE kind = 'filled' AND version = '{version}'"
        ))
        .expect("a filled event")
        .parse()
        .unwrap()
    };
    (field("segments_read"), field("segments_summarized"))
}

/// The counts logged after `field` (`segments_read=`, in the journal
/// scan's log lines, one for each stretch it read).
fn counts(log: &str, field: &str) -> Vec<u64> {
    log.split(field)
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The stored summaries showing a change in database `db`.
fn summaries_of(dir: &Path, db: u32) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir.join("summary")) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|e| e.unwrap().path())
        .filter_map(|path| {
            let bytes = std::fs::read(&path).ok()?;
            let summary = SegmentSummary::decode(&bytes).ok()?;
            let touches = summary
                .events
                .iter()
                .any(|e| matches!(e, SummaryEvent::Touch { file, .. } if file.db == db));
            touches.then_some((path, bytes))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn other_databases_wal_is_read_from_summaries_and_a_bad_or_missing_one_is_read_whole() {
    let src = TestDb::new("sum_src");
    let other = TestDb::new("sum_other");
    let dest = TestDb::new("sum_dest");
    let bases = LocalArchive::new("summaries");
    let other_db: u32 = other
        .value("SELECT oid FROM pg_database WHERE datname = current_database()")
        .unwrap()
        .parse()
        .unwrap();
    walfill(&src, &dest, &bases, None).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    // Another database writes several segments of WAL between the table's
    // changes.
    other.exec("CREATE TABLE filler (id int, pad text)");
    // Six segments' worth, whatever their size (about 540 bytes of WAL a row).
    let segment: u64 = other
        .value("SELECT pg_size_bytes(current_setting('wal_segment_size'))")
        .unwrap()
        .parse()
        .unwrap();
    other.exec(&format!(
        "INSERT INTO filler SELECT g, repeat('x', 500) FROM generate_series(1, {}) g",
        6 * segment / 540
    ));
    src.exec(
        "UPDATE items SET b = 'changed ' || id WHERE id % 7 = 0;
         DELETE FROM items WHERE id % 11 = 0;",
    );
    src.archive_wal();
    let check = |version: &str| {
        assert_view_matches_in(
            &src,
            &dest,
            "public.items_v",
            "items",
            "id, a * 2 AS a2, b",
            None,
            "id",
        );
        assert_eq!(
            dest.value(&format!(
                "SELECT path FROM walfill.versions WHERE version = '{version}'"
            ))
            .unwrap(),
            "replay"
        );
    };

    // The first replay reads every segment whole and summarizes them.
    let v1 = walfill(&src, &dest, &bases, Some("v1"));
    v1.ok(&["setup"]);
    v1.ok(&["backfill", "items_v", "--path", "replay"]);
    check("v1");
    let written = summaries_of(&bases.dir, other_db);
    assert!(
        written.len() >= 4,
        "{} summaries show the other database's writes",
        written.len()
    );

    // The planner counts them out of the WAL a replay reads whole.
    let plan: serde_json::Value = serde_json::from_str(
        &walfill(&src, &dest, &bases, Some("v2")).ok(&["plan", "items_v", "--json"]),
    )
    .unwrap();
    let summarized = plan["estimates"]["replay_summarized_bytes"]
        .as_u64()
        .unwrap();
    assert!(summarized >= 3 * segment, "{plan:#}");

    // The next one takes the other database's segments from them.
    let out =
        walfill(&src, &dest, &bases, Some("v2")).run(&["backfill", "items_v", "--path", "replay"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    check("v2");
    // So does the planner's scan of the catalog journal.
    let scanned = counts(&log, "segments_summarized=")
        .into_iter()
        .max()
        .unwrap_or(0);
    assert!(
        scanned + 2 >= written.len() as u64,
        "the journal scan: {log}"
    );
    let (whole, summarized) = read(&dest, "v2");
    assert!(
        summarized + 2 >= written.len() as u64,
        "{summarized} segments from summaries, {whole} whole; {} summaries of the filler",
        written.len()
    );

    // A summary with a relation file taken out, under its old checksum, is
    // refused: its segment is read whole, and summarized again.
    let tampered = &written[1];
    let mut summary = SegmentSummary::decode(&tampered.1).unwrap();
    let at = summary
        .events
        .iter()
        .position(|e| matches!(e, SummaryEvent::Touch { file, .. } if file.db == other_db))
        .unwrap();
    summary.events.remove(at);
    let mut forged = summary.encode();
    forged[8..12].copy_from_slice(&tampered.1[8..12]);
    std::fs::write(&tampered.0, &forged).unwrap();
    let out =
        walfill(&src, &dest, &bases, Some("v3")).run(&["backfill", "items_v", "--path", "replay"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("summary of this segment is unusable"),
        "the forged summary was not refused: {log}"
    );
    check("v3");
    assert_eq!(
        std::fs::read(&tampered.0).unwrap(),
        tampered.1,
        "the segment was not summarized again from its records"
    );

    // Without summaries, segments are read whole and summarized again: by
    // the planner's journal scan, which runs first (the replay after it
    // takes them from the new summaries).
    for (path, _) in &written {
        std::fs::remove_file(path).unwrap();
    }
    let out =
        walfill(&src, &dest, &bases, Some("v4")).run(&["backfill", "items_v", "--path", "replay"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    check("v4");
    let (whole, _) = read(&dest, "v4");
    let scanned: u64 = counts(&log, "segments_read=").iter().sum();
    assert!(
        scanned + whole >= written.len() as u64,
        "the journal scan read {scanned} segments whole, the replay {whole}, fewer than the {} \
         without a summary: {log}",
        written.len()
    );
    for (path, bytes) in &written {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
    }
}
