//! Compaction: a base rolled forward from the archive alone, by the service on its limit and schedule, killed, and with the source down.

use super::*;

/// `walfill compact` rolls the newest base forward with the archived WAL,
/// reading no source row and creating no slot; the next version replays
/// from the compacted base (not the old one) and equals the transform.
#[test]
fn compaction_rolls_a_base_forward_from_the_archive_alone() {
    let src = TestDb::new("rp_compact_src");
    let dest = TestDb::new("rp_compact_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 4000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let first_base = version_field(&dest, "v1", "boundary_lsn::text");

    src.exec(
        "UPDATE items SET b = 'later ' || id, a = a * 3 WHERE id % 4 = 0;
         DELETE FROM items WHERE id % 9 = 0;
         INSERT INTO items SELECT g, g, 'new' FROM generate_series(4001, 4500) g;",
    );
    src.archive_wal();
    src.exec("UPDATE items SET b = 'last' WHERE id % 10 = 1");
    src.archive_wal();

    let reads = src.table_reads("items");
    // (Slots of this database: the tests beside this one make their own.)
    let slots_here =
        "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()";
    let slots = src.value(slots_here);
    // The summary of a segment the archive no longer holds (segment 0 of
    // timeline 1 never is) is retired by the compaction.
    let summaries =
        std::path::PathBuf::from(archive_url().trim_start_matches("file://")).join("summary");
    std::fs::create_dir_all(&summaries).unwrap();
    let expired = summaries.join("000000010000000000000000");
    std::fs::write(&expired, b"an expired segment's summary").unwrap();
    let out = walfill.ok(&["compact"]);
    assert!(out.contains("public.items: a new base at"), "{out}");
    assert!(
        !expired.exists(),
        "the expired segment's summary is still there"
    );
    assert!(
        std::fs::read_dir(&summaries).unwrap().count() > 0,
        "the summaries of archived segments went too"
    );
    assert_eq!(src.table_reads("items"), reads, "compaction read items");
    assert_eq!(src.value(slots_here), slots, "compaction created a slot");
    let boundary_in = |out: &str| -> Option<String> {
        out.split("a new base at ")
            .nth(1)
            .and_then(|rest| rest.split(':').next())
            .map(str::to_string)
    };
    let mut compacted = boundary_in(&out).unwrap();

    // Again: nothing newer in the archive, or (other databases of the
    // cluster write WAL too) a newer base.
    let again = walfill.ok(&["compact"]);
    match boundary_in(&again) {
        Some(newer) => compacted = newer,
        None => assert!(again.contains("as recent as the archive"), "{again}"),
    }

    src.exec("UPDATE items SET a = -a WHERE id % 6 = 0");
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    let before = src.table_reads("items");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(src.table_reads("items"), before, "the replay read items");
    assert_eq!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        compacted,
        "replayed from the compacted base (the first was at {first_base})"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// `walfill serve` compacts on its own once the archived WAL since a
/// table's newest base passes `[compact] after_wal_mb`, records a
/// `compacted` event, and keeps only `[archive] keep_bases` bases; a replay
/// from the compacted base equals the transform.
#[test]
fn serve_compacts_a_base_once_the_wal_since_passes_the_limit() {
    use crate::support::service::{wait_for, Service};
    let src = TestDb::new("rp_autocompact_src");
    let dest = TestDb::new("rp_autocompact_dest");
    let archive = format!(
        "{}keep_bases = 1\n\n[compact]\nafter_wal_mb = 1\ncheck_seconds = 1\n\n\
         [serve]\npoll_seconds = 1\nlease_seconds = 3\narchiver = false\n",
        archive_section(&archive_url())
    );
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    // More than a MiB of WAL after the base.
    src.exec(
        "UPDATE items SET b = repeat('x', 200) || id;
         UPDATE items SET a = a + 1 WHERE id % 3 = 0;
         DELETE FROM items WHERE id % 8 = 0;",
    );
    src.archive_wal();
    src.archive_wal();
    let mut service = Service::start(&walfill, false, &[]);
    wait_for(
        &dest,
        "SELECT EXISTS (SELECT FROM walfill.events WHERE kind = 'compacted')",
        Duration::from_secs(90),
        "a compaction",
        &[&service],
    );
    service.stop(Duration::from_secs(30));
    // One base left under the table's folder: the compacted one.
    let (database, relid) = (
        src.value("SELECT oid FROM pg_database WHERE datname = current_database()")
            .unwrap(),
        src.value("SELECT 'items'::regclass::oid").unwrap(),
    );
    let dir = std::path::PathBuf::from(archive_url().trim_start_matches("file://"))
        .join("base")
        .join(&database)
        .join(&relid);
    let manifests: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("manifest.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(manifests.len(), 1, "{manifests:?} in {}", dir.display());
    let first = version_field(&dest, "v1", "boundary_lsn::text");
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        first,
        "replayed from the first base, not the compacted one"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// `[compact] schedule` compacts on its own whatever the WAL's size (the
/// size trigger is off here): at the first due time after the service
/// started, with a `compacted` event that says why.
#[test]
fn serve_compacts_on_the_compact_schedule() {
    use crate::support::service::{wait_for, Service};
    let src = TestDb::new("rp_compactsched_src");
    let dest = TestDb::new("rp_compactsched_dest");
    let settings = format!(
        "{}\n[compact]\nafter_wal_mb = 0\nschedule = \"* * * * *\"\ncheck_seconds = 1\n\n\
         [serve]\npoll_seconds = 1\nlease_seconds = 3\narchiver = false\n",
        archive_section(&archive_url())
    );
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 3000) g;",
    );
    let walfill = two_databases(
        &src,
        &dest,
        &format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a\"\nversion = \"v1\"\n"
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    // A MiB of WAL after the base, and a running-transactions record
    // (a checkpoint's) before the segment the new base begins.
    src.exec("UPDATE items SET a = a + 1; UPDATE items SET a = a + 1; CHECKPOINT;");
    src.archive_wal();
    src.exec("UPDATE items SET a = a WHERE id = 1");
    src.archive_wal();
    let mut service = Service::start(&walfill, false, &[]);
    // The minute the service starts in is remembered, the next one runs.
    wait_for(
        &dest,
        "SELECT EXISTS (SELECT FROM walfill.events
                         WHERE kind = 'compacted' AND detail->>'why' = 'schedule')",
        Duration::from_secs(150),
        "a scheduled compaction",
        &[&service],
    );
    service.stop(Duration::from_secs(30));
    let walfill = two_databases(
        &src,
        &dest,
        &format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a * 3 AS a3\"\nversion = \"v2\"\n"
        ),
    );
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        version_field(&dest, "v1", "boundary_lsn::text"),
        "replayed from the first base, not the compacted one"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, a * 3 AS a3",
        None,
        "id",
    );
}

/// A compaction killed (as by `kill -9`) when it starts, after writing a
/// part, and before its manifest leaves the old base usable: the table
/// replays from it meanwhile, and the rerun writes the new base, from
/// which the next version replays exactly.
#[test]
fn a_killed_compaction_leaves_the_old_base_and_a_rerun_finishes() {
    let src = TestDb::new("rp_compact_kill_src");
    let dest = TestDb::new("rp_compact_kill_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let first = version_field(&dest, "v1", "boundary_lsn::text");
    let writer = std::thread::spawn({
        let url = src.url();
        move || {
            let mut client = crate::support::cluster::connect(&url);
            for i in 0..40 {
                client
                    .batch_execute(&format!(
                        "UPDATE items SET a = a + 1, b = 'w{i}' WHERE id % 40 = {i};
                         DELETE FROM items WHERE id = {};
                         INSERT INTO items VALUES ({}, {i}, 'new');",
                        i * 7 + 1,
                        5000 + i
                    ))
                    .unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    for point in ["compact.start", "base.part_written", "base.before_manifest"] {
        // The newest complete segment begins after the base.
        src.archive_wal();
        src.exec("UPDATE items SET a = a WHERE id = 2");
        src.archive_wal();
        let out = walfill.run_env(&["compact"], &[("WALFILL_FAILPOINTS", point)]);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{point}: not killed\n{log}{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(log.contains(&format!("failpoint {point} reached")), "{log}");
        // The old base is still the newest usable one.
        let plan = two_databases(&src, &dest, &target("id, b", "probe")).ok(&["plan", "items_v"]);
        assert!(
            plan.contains(&format!("consistent at {first}")),
            "{point}: {plan}"
        );
    }
    writer.join().unwrap();
    src.archive_wal();
    let out = walfill.ok(&["compact"]);
    assert!(out.contains("a new base at"), "{out}");
    src.exec("UPDATE items SET b = 'after' WHERE id % 11 = 0");
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        first
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// Compaction reads the archive alone: with the source unreachable it
/// still rolls the base forward (the cluster's identity comes from the
/// base's manifest and the archive), and the next version replays from the
/// new base exactly.
#[test]
fn compaction_runs_while_the_source_is_unreachable() {
    let src = TestDb::new("rp_compact_nosrc_src");
    let dest = TestDb::new("rp_compact_nosrc_dest");
    let settings = archive_section(&archive_url());
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let first = version_field(&dest, "v1", "boundary_lsn::text");
    src.exec(
        "UPDATE items SET a = a + 1, b = repeat('y', 100) WHERE id % 4 = 0;
         DELETE FROM items WHERE id % 9 = 0;
         CHECKPOINT;",
    );
    src.archive_wal();
    src.exec("UPDATE items SET a = a WHERE id = 1");
    src.archive_wal();
    // Nothing listens on port 1.
    let offline = Walfill::with_text(&format!(
        "[source]\nurl = \"postgresql://walfill@127.0.0.1:1/gone\"\n\
         [destination]\nurl = \"{}\"\n{}",
        dest.url(),
        target("id, a", "v1")
    ));
    // A name that is neither a target nor a table one reads.
    let out = offline.run(&["compact", "public.nope"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("public.nope") && err.contains("public.items"),
        "{err}"
    );
    // The table, by its name.
    let out = offline.run(&["compact", "public.items"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("a new base at"),
        "{log}"
    );
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        first,
        "replayed from the first base, not the compacted one"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}
