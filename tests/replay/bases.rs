//! Base snapshots: left by one version for the next, damaged, renamed with their table, after a blocking change, and weighed by the planner.

use super::*;

/// A table older than the journal is built by snapshot, which leaves a base
/// snapshot in the archive; a new transform is then replayed from that base
/// while writes go on, TOASTed values left unchanged by updates included.
#[test]
fn a_new_transform_replays_from_the_base_snapshot_while_writes_continue() {
    let db = TestDb::new("rp_base");
    create_orders(&db, 20_000);
    // Large, incompressible notes are stored out of line; the writer's
    // updates leave them unchanged.
    db.exec(
        "UPDATE orders SET note = (SELECT string_agg(md5(id::text || g::text), '')
                                     FROM generate_series(1, 120) g)
          WHERE id % 40 = 1",
    );
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &format!("{archive}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(plan.contains(": snapshot"), "plan: {plan}");
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v1", "path"), "snapshot");

    let select = "id, status, length(note) AS note_length, md5(note) AS note_md5, total_cents";
    let v2 = orders_target("v2").replace(ORDERS_SELECT, select);
    walfill.configure(&db, &format!("{archive}\n{v2}"));
    db.archive_wal();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": replay") && plan.contains("base snapshot of 20000 rows"),
        "plan: {plan}"
    );

    let writer = Writer::start(&db, 20_000, 1_000_000, 9);
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    db.wait_for(
        "SELECT phase <> 'planned' FROM walfill.versions WHERE version = 'v2'",
        Duration::from_secs(60),
        "the replay to start",
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(writer.stop() > 50);
    walfill.wait_ok(backfill, Duration::from_secs(180));

    assert_eq!(version_field(&db, "v2", "path"), "replay");
    assert_eq!(version_field(&db, "v2", "replay_base->>'kind'"), "snapshot");
    assert_eq!(version_field(&db, "v2", "phase"), "active");
    // The swap happens once the version is within `swap_max_lag_bytes` of
    // the source, so the writer's last transactions may still be on their
    // way; `sync --once` applies everything committed by now.
    walfill.ok(&["sync", "--once"]);
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", select, Some(ORDERS_WHERE), "id");
}

/// A replay leaves a base snapshot of the table's rows at its boundary,
/// every column included (not only those its transform reads); the next
/// version, reading another column, replays from that base instead of the
/// table's creation, without reading the source.
#[test]
fn a_replay_leaves_a_base_the_next_version_replays_from() {
    let src = TestDb::new("rp_leaves_src");
    let dest = TestDb::new("rp_leaves_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;
         UPDATE items SET b = 'changed ' || id WHERE id % 7 = 0;
         DELETE FROM items WHERE id % 11 = 0;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a * 2 AS a2", "v1"));
    walfill.ok(&["setup"]);
    src.archive_wal();
    let out = walfill.run(&["backfill", "items_v", "--path", "replay"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("base snapshot written"), "{log}");
    assert_eq!(
        version_field(&dest, "v1", "replay_base->>'kind'"),
        "creation"
    );

    src.exec(
        "UPDATE items SET b = 'later ' || id, a = a + 1 WHERE id % 5 = 0;
         DELETE FROM items WHERE id % 13 = 0;
         INSERT INTO items SELECT g, g, 'new' FROM generate_series(3001, 3100) g;",
    );
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains("from the base snapshot of"), "{plan}");
    let before = src.table_reads("items");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(src.table_reads("items"), before, "the replay read items");
    assert_eq!(
        version_field(&dest, "v2", "replay_base->>'kind'"),
        "snapshot"
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

/// A base snapshot part that was damaged (truncated) never gives a wrong
/// row: the replay from that base stops, says which part, and the backfill
/// builds the version from a snapshot instead.
#[test]
fn a_damaged_base_part_makes_the_backfill_take_a_snapshot() {
    let src = TestDb::new("rp_bad_base_src");
    let dest = TestDb::new("rp_bad_base_dest");
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
    src.exec("UPDATE items SET b = 'later' WHERE id % 3 = 0");
    src.archive_wal();
    // Truncate the base's part.
    let (database, relid) = (
        src.value("SELECT oid FROM pg_database WHERE datname = current_database()")
            .unwrap(),
        src.value("SELECT 'items'::regclass::oid").unwrap(),
    );
    let dir = std::path::PathBuf::from(archive_url().trim_start_matches("file://"))
        .join("base")
        .join(&database)
        .join(&relid);
    let mut damaged = 0;
    for base in std::fs::read_dir(&dir).unwrap().flatten() {
        for part in std::fs::read_dir(base.path()).unwrap().flatten() {
            let path = part.path();
            if path.extension().is_some_and(|e| e == "parquet") {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "no part under {}", dir.display());
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    let out = walfill.run(&["backfill", "items_v"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("cannot replay; building the version from a snapshot instead")
            && log.contains("base snapshot"),
        "{log}"
    );
    assert_eq!(version_field(&dest, "v2", "path"), "snapshot");
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

/// The planner weighs both paths: a small table with more WAL since its
/// creation than a replay is worth takes a snapshot (`plan` shows both
/// estimates and the rule), and once a compaction leaves a recent base the
/// same table replays from it, exactly.
#[test]
fn the_planner_weighs_both_paths_and_a_compaction_makes_replay_cheap_again() {
    let src = TestDb::new("rp_cost_src");
    let dest = TestDb::new("rp_cost_dest");
    let settings = format!(
        "{}\n[backfill]\nreplay_max_slowdown = 400\nsnapshot = \"exported\"\n",
        archive_section(&archive_url())
    );
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 2000) g;
         ANALYZE items;",
    );
    // About 250 MiB of WAL after the table's creation (another table's,
    // whatever the segment size): over 6 s of decoding at the default
    // rate, for 2000 rows a snapshot copies in 0.01 s. (The limit of 400
    // times, 4 s here, leaves room for the WAL the tests running beside
    // this one write into the same cluster.)
    let more_wal = || {
        src.exec(
            "CREATE TABLE IF NOT EXISTS filler (g int, t text);
             INSERT INTO filler SELECT g, repeat(md5(g::text), 30)
               FROM generate_series(1, 230000) g;
             TRUNCATE filler;",
        );
        src.archive_wal();
    };
    more_wal();
    let target = |version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a * 2 AS a2\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("v1"));
    walfill.ok(&["setup"]);
    let plan: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "snapshot", "{plan:#}");
    let estimates = &plan["estimates"];
    let (replay, snapshot) = (
        estimates["replay_seconds"].as_f64().unwrap(),
        estimates["snapshot_seconds"].as_f64().unwrap(),
    );
    assert!(replay > 400.0 * snapshot, "{plan:#}");
    assert!(
        plan["reason"]
            .as_str()
            .unwrap()
            .starts_with("snapshot: a replay would decode"),
        "{plan:#}"
    );
    let text = walfill.ok(&["plan", "items_v"]);
    assert!(
        text.contains("estimates: replay") && text.contains("rule: snapshot: "),
        "{text}"
    );
    // The operator who must spare the source raises the limit: a replay.
    let spare = two_databases(
        &src,
        &dest,
        &target("v1").replace("replay_max_slowdown = 400", "replay_max_slowdown = 100000"),
    );
    let plan: serde_json::Value =
        serde_json::from_str(&spare.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "replay", "{plan:#}");
    // The snapshot it takes leaves a base; more WAL makes it old.
    walfill.ok(&["backfill", "items_v"]);
    assert_eq!(version_field(&dest, "v1", "path"), "snapshot");
    more_wal();
    let plan: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "snapshot", "{plan:#}");
    let uncompacted = plan["estimates"]["replay_wal_bytes"].as_i64().unwrap();
    // A compaction rolls the base forward: replay again, from it.
    // (A checkpoint logs the running transactions, as the background
    // writer does every 15 s on a busy cluster: the new base's restart
    // point. This test writes its WAL faster than that.)
    src.exec(
        "UPDATE items SET a = a + 1 WHERE id % 10 = 0; DELETE FROM items WHERE id = 7;
         CHECKPOINT;",
    );
    src.archive_wal();
    // The new base's boundary: the start of the newest complete segment.
    src.exec("UPDATE items SET a = a WHERE id = 2");
    src.archive_wal();
    walfill.ok(&["compact"]);
    let walfill = two_databases(&src, &dest, &target("v2"));
    let plan: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "replay", "{plan:#}");
    assert!(
        plan["estimates"]["replay_base_rows"].as_u64().unwrap() >= 1999,
        "{plan:#}"
    );
    let restart = plan["start"]["manifest"]["restart_lsn"]
        .as_str()
        .unwrap()
        .to_string();
    walfill.ok(&["backfill", "items_v"]);
    assert_eq!(version_field(&dest, "v2", "path"), "replay");
    assert_eq!(
        version_field(&dest, "v2", "replay_base->>'kind'"),
        "snapshot"
    );
    // It read no segment older than the compacted base's restart point:
    // the `filled` event and `status` say what it read.
    let first = dest
        .value(
            "SELECT detail->>'first_segment_lsn' FROM walfill.events
              WHERE kind = 'filled' AND version = 'v2'",
        )
        .expect("a filled event");
    let newer = src
        .value(&format!(
            "SELECT ('{first}'::pg_lsn - '0/0') >= ('{restart}'::pg_lsn - '0/0')
                    - (('{restart}'::pg_lsn - '0/0')
                       % pg_size_bytes(current_setting('wal_segment_size')))"
        ))
        .unwrap();
    assert_eq!(
        newer, "true",
        "the replay read from {first}, before the base's {restart}"
    );
    let segments: i64 = version_field(&dest, "v2", "segments_read").parse().unwrap();
    let read: i64 = version_field(&dest, "v2", "wal_read_bytes")
        .parse()
        .unwrap();
    assert!(
        segments >= 1 && read < uncompacted,
        "{segments} segments, {read} bytes read (the old base needed {uncompacted})"
    );
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains(&format!("from {segments} segments")),
        "{status}"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, a * 2 AS a2",
        None,
        "id",
    );
}

/// A base follows its table by OID: renamed (and moved to another schema)
/// after its base was taken, the table replays from that base under its new
/// name, exactly.
#[test]
fn a_base_follows_its_table_across_a_rename() {
    let src = TestDb::new("rp_base_rename_src");
    let dest = TestDb::new("rp_base_rename_dest");
    let settings = archive_section(&archive_url());
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 2000) g;",
    );
    let target = |source: &str, version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"{source}\"\n\
             select = \"id, a + 1 AS a1, b\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("public.items", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let boundary = version_field(&dest, "v1", "boundary_lsn::text");
    src.exec(
        "CREATE SCHEMA shop;
         ALTER TABLE items RENAME TO goods;
         ALTER TABLE goods SET SCHEMA shop;
         UPDATE shop.goods SET a = a * 2 WHERE id % 7 = 0;
         DELETE FROM shop.goods WHERE id % 11 = 0;
         INSERT INTO shop.goods VALUES (5000, 1, 'new');",
    );
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("shop.goods", "v2"));
    let before = src.table_reads("shop.goods");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(
        src.table_reads("shop.goods"),
        before,
        "the replay read the table"
    );
    assert_eq!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        boundary,
        "not replayed from the base taken before the rename"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "shop.goods",
        "id, a + 1 AS a1, b",
        None,
        "id",
    );
}

/// `ADD COLUMN ... DEFAULT` writes no row changes, so no replay from before
/// it can know the column's values: the next version is copied. The base
/// that copy leaves makes the table replayable again, from it.
#[test]
fn a_base_after_a_blocking_change_makes_the_table_replayable_again() {
    let src = TestDb::new("rp_base_unblock_src");
    let dest = TestDb::new("rp_base_unblock_dest");
    let settings = archive_section(&archive_url());
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 2000) g;
         ALTER TABLE items ADD COLUMN c int DEFAULT 5;
         UPDATE items SET a = a + 1 WHERE id % 3 = 0;",
    );
    src.archive_wal();
    let target = |version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a, c\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("v1"));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains(": snapshot"), "{plan}");
    walfill.ok(&["backfill", "items_v"]);
    assert_eq!(version_field(&dest, "v1", "path"), "snapshot");
    src.exec(
        "UPDATE items SET c = c + id WHERE id % 5 = 0;
         DELETE FROM items WHERE id % 13 = 0;
         INSERT INTO items VALUES (9000, 1, 2);",
    );
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("v2"));
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains(": replay"), "{plan}");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(
        version_field(&dest, "v2", "replay_base->>'kind'"),
        "snapshot"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, a, c",
        None,
        "id",
    );
}
