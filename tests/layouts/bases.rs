//! Bases beside another tool's archive: nothing written into it, bases_url, and replays after its retention expired the WAL

use super::*;

/// A snapshot backfill with another tool's archive configured copies the
/// table and writes no base snapshot into that archive (it says so once);
/// `walfill archive` refuses to stream into it, before creating a slot.
#[test]
fn nothing_is_written_into_another_tools_archive() {
    let db = TestDb::new("lay_ro");
    // Older than the journal: only a snapshot can build it.
    create_orders(&db, 3_000);
    let archive = Arc::new(ForeignArchive::new("wal-g", &db));
    db.archive_wal();
    let first = db
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .expect("a segment name");
    let mirror = Mirror::start(archive.clone(), &first);
    db.archive_wal();
    let section = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 30\n",
        archive.url()
    );
    let walfill = Walfill::new(&db, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "orders_summary"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        db.value("SELECT path FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("snapshot")
    );
    assert_eq!(
        stderr.matches("not writing a base snapshot").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("wal-g"), "{stderr}");
    assert_view_matches_in(
        &db,
        &db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );

    let out = walfill.run(&["archive", "--slot", "walfill_lay_ro_refused"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("wal-g layout") && stderr.contains("never writes"),
        "{stderr}"
    );
    assert_eq!(
        db.value(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walfill_lay_ro_refused'"
        )
        .as_deref(),
        Some("0")
    );
    mirror.finish();
    let files = archive.files();
    assert!(files.iter().all(|f| f.starts_with("wal_005/")), "{files:?}");
}

/// A table older than an archive another tool fills can never replay
/// there (walfill keeps no base snapshots in it): `plan` says so, instead
/// of promising a base the first snapshot backfill would write.
#[test]
fn plan_says_a_table_older_than_a_foreign_archive_never_replays() {
    let src = TestDb::new("lay_old_src");
    let dest = TestDb::new("lay_old_dest");
    create_orders(&src, 100);
    let archive = Arc::new(ForeignArchive::new("flat", &src));
    src.archive_wal();
    let first = src
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .expect("a segment name");
    src.exec("CHECKPOINT");
    let mirror = Mirror::start(archive.clone(), &first);
    let section = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n",
        archive.url()
    );
    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    src.exec("UPDATE orders SET note = 'x' WHERE id = 1");
    src.archive_wal();
    mirror.finish();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains("can never replay here; set [archive] bases_url")
            && plan.contains("flat layout")
            && !plan.contains("the first snapshot backfill writes one"),
        "{plan}"
    );
}

/// A table older than a flat archive (whose oldest segments then expire)
/// replays from the base snapshot a snapshot backfill kept in `[archive]
/// bases_url`, beside the archive: no source row is read, and nothing but
/// segments is ever written into the archive's folder.
#[test]
fn a_table_older_than_a_flat_archive_replays_from_a_base_in_bases_url() {
    let src = TestDb::new("lay_bases_src");
    let dest = TestDb::new("lay_bases_dest");
    // Older than the archive: only a base can replay it.
    create_orders(&src, 5_000);
    let archive = Arc::new(ForeignArchive::new("flat", &src));
    let bases = archive.dir.with_extension("bases");
    let _ = std::fs::remove_dir_all(&bases);
    src.archive_wal();
    let first = src
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .expect("a segment name");
    src.exec("CHECKPOINT");
    let mirror = Mirror::start(archive.clone(), &first);
    let section = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\nbases_url = \"file://{}\"\n",
        archive.url(),
        bases.display()
    );
    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    src.archive_wal();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains("the first snapshot backfill writes one into [archive] bases_url"),
        "{plan}"
    );
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(
        dest.value("SELECT path FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("snapshot")
    );
    let restart = dest
        .value("SELECT restart_lsn::text FROM walfill.versions WHERE version = 'v1'")
        .unwrap_or_default();
    let manifests = base_manifests(&bases);
    assert_eq!(manifests.len(), 1, "one base in bases_url");
    let manifest: serde_json::Value = serde_json::from_str(&manifests[0]).unwrap();
    let base_restart = manifest["restart_lsn"].as_str().unwrap().to_string();

    let writer = Writer::start(&src, 5_000, 1_000_000, 21);
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(500));
        src.archive_wal();
    }
    assert!(writer.stop() > 20);
    src.exec("DELETE FROM orders WHERE id % 50 = 0");
    src.archive_wal();
    // The mirror goes on (the replay waits for its boundary's segment).
    std::thread::sleep(Duration::from_secs(1));

    // The archive's retention expires every segment before the base's.
    let keep_from = src
        .value(&format!("SELECT pg_walfile_name('{base_restart}')"))
        .unwrap();
    let mut expired = 0;
    for file in archive.files() {
        let name = file.split('.').next().unwrap_or_default();
        if name.len() == 24 && name < keep_from.as_str() {
            std::fs::remove_file(archive.dir.join(&file)).unwrap();
            expired += 1;
        }
    }
    assert!(
        expired > 0,
        "nothing expired before {keep_from} ({restart})"
    );

    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v2")));
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(plan.contains(": replay"), "{plan}");
    let before = src.table_reads("orders");
    walfill.ok(&["backfill", "orders_summary", "--path", "replay"]);
    assert_eq!(src.table_reads("orders"), before, "the replay read orders");
    assert_eq!(
        dest.value(
            "SELECT path || ' ' || (replay_base->>'kind') FROM walfill.versions WHERE version = 'v2'"
        )
        .as_deref(),
        Some("replay snapshot")
    );
    assert_view_matches_in(
        &src,
        &dest,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
    // Only segments in the archive's folder.
    let files = archive.files();
    assert!(
        files
            .iter()
            .all(|f| f.len() >= 24 && f[..24].chars().all(|c| c.is_ascii_hexdigit())),
        "{files:?}"
    );

    // Retention outruns every base (the replay's own included): the plan
    // says the newest can no longer be replayed from, and takes a snapshot.
    src.exec("UPDATE orders SET note = 'after' WHERE id % 17 = 0");
    src.archive_wal();
    src.archive_wal();
    mirror.finish();
    let restarts: Vec<String> = base_manifests(&bases)
        .iter()
        .map(|m| {
            let m: serde_json::Value = serde_json::from_str(m).unwrap();
            m["restart_lsn"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(restarts.len(), 2, "the copy's base and the replay's");
    let drop_through = src
        .value(&format!(
            "SELECT pg_walfile_name(max(r::pg_lsn)) FROM unnest(ARRAY['{}']) r",
            restarts.join("','")
        ))
        .unwrap();
    let mut later = Vec::new();
    for file in archive.files() {
        let name = file.split('.').next().unwrap_or_default();
        if name.len() == 24 && name <= drop_through.as_str() {
            std::fs::remove_file(archive.dir.join(&file)).unwrap();
        } else {
            later.push(file);
        }
    }
    assert!(!later.is_empty(), "no segment after {drop_through}");
    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v3")));
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("it can no longer be replayed from"),
        "{plan}"
    );
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains("it can no longer be replayed from"),
        "{status}"
    );
    let _ = std::fs::remove_dir_all(&bases);
}

/// The manifests of the bases under folder `bases`.
fn base_manifests(bases: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![bases.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.ends_with("manifest.json") {
                found.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    found
}

/// A real pgBackRest stanza on a cluster of the test's own, archiving by
/// `archive-push`: two full backups with `repo1-retention-full = 1` and
/// `pgbackrest expire` remove the WAL of a table's creation, so the table
/// is older than the archive. One snapshot backfill keeps its base in
/// `[archive] bases_url` (beside the repository, never in it), and the next
/// version replays from that base with zero source reads, exactly.
#[test]
fn after_pgbackrest_expires_a_tables_wal_it_replays_from_walfills_base() {
    use crate::support::backrest::BackRestCluster;
    use crate::support::cluster::connect;
    let cluster = BackRestCluster::start();
    let mut admin = connect(&cluster.url("postgres"));
    for db in ["app", "warehouse"] {
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
    }
    let mut app = connect(&cluster.url("app"));
    let config = |rest: &str| {
        format!(
            "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\
             [archive]\nurl = \"{}\"\nbases_url = \"{}\"\nwait_seconds = 120\n\n{rest}",
            cluster.url("app"),
            cluster.url("warehouse"),
            cluster.archive_url(),
            cluster.bases_url()
        )
    };
    let target = |version: &str| {
        format!(
            "[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a * 2 AS a2, b\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = Walfill::with_text(&config(""));
    walfill.ok(&["setup"]);
    app.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    )
    .unwrap();
    let created: String = app
        .query_one("SELECT pg_walfile_name(pg_current_wal_lsn())", &[])
        .unwrap()
        .get(0);
    cluster.pgbackrest(&["--type=full", "backup"]);
    app.batch_execute("UPDATE items SET a = a + 1 WHERE id % 3 = 0")
        .unwrap();
    cluster.pgbackrest(&["--type=full", "backup"]);
    cluster.pgbackrest(&["expire"]);
    let kept = cluster.archived_segments();
    assert!(
        kept.first().is_some_and(|first| *first > created),
        "pgbackrest expire kept the segment of the table's creation {created}: {kept:?}"
    );

    walfill.write_config(&config(&target("v1")));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("layout pgbackrest"),
        "{plan}"
    );
    walfill.ok(&["backfill", "items_v"]);
    app.batch_execute(
        "UPDATE items SET b = 'later ' || id WHERE id % 4 = 0;
         DELETE FROM items WHERE id % 7 = 0;
         INSERT INTO items VALUES (9000, 1, 'new');",
    )
    .unwrap();
    walfill.write_config(&config(&target("v2")));
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains(": replay"), "{plan}");
    let reads = "SELECT seq_scan + coalesce(idx_scan, 0)
                   FROM pg_stat_user_tables WHERE relname = 'items'";
    let scans = |client: &mut postgres::Client| -> i64 {
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .unwrap();
        client.query_one(reads, &[]).unwrap().get(0)
    };
    let before = scans(&mut app);
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    // (A backend's table statistics reach the others when it ends.)
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(scans(&mut app), before, "the replay read items");
    let mut warehouse = connect(&cluster.url("warehouse"));
    let how: String = warehouse
        .query_one(
            "SELECT path || ' ' || (replay_base->>'kind') FROM walfill.versions
              WHERE version = 'v2'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(how, "replay snapshot");
    let rows = |client: &mut postgres::Client, sql: &str| -> Vec<String> {
        client
            .query(sql, &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let expected = rows(
        &mut app,
        "SELECT t::text FROM (SELECT id, a * 2 AS a2, b FROM items) t ORDER BY t.id",
    );
    let published = rows(
        &mut warehouse,
        "SELECT t::text FROM public.items_v t ORDER BY t.id",
    );
    assert_eq!(expected.len(), 3000 - 428 + 1);
    assert_eq!(published, expected);
    // Nothing of walfill's in the repository.
    assert!(
        !cluster.archived_segments().is_empty()
            && std::fs::read_dir(
                std::path::Path::new(cluster.archive_url().trim_start_matches("file://"))
                    .join("../.."),
            )
            .unwrap()
            .flatten()
            .all(|e| e.file_name() != "base"),
        "walfill wrote into the repository"
    );
}
