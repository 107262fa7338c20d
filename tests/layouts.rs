//! Replay backfills from archives that other tools fill, read where they
//! are: a flat folder of segment files, WAL-G's `wal_005/`, and a
//! pgBackRest repository filled by `pgbackrest archive-push`. Each holds
//! the WAL of the table's creation and of writes after it, compressed by
//! the tools' own programs, and the backfill must build exactly the view
//! the source's rows give, without reading the table.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::failover::Failover;
use crate::support::foreign::{ForeignArchive, Mirror};
use crate::support::service::Service;
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches_in, TestDb, Walfill};

fn two_databases(source: &TestDb, dest: &TestDb, rest: &str) -> Walfill {
    Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n{rest}",
        source.url(),
        dest.url()
    ))
}

/// The table is created (after `walfill setup`) and written to while the
/// foreign archive is filled; `walfill backfill --path replay` then builds
/// the view from that archive alone. `named` puts the layout in the
/// configuration instead of leaving it to detection. Returns the walfill
/// runner and the archive for more checks.
fn replay_from(kind: &str, named: bool) -> (TestDb, TestDb, Walfill, Arc<ForeignArchive>) {
    let src = TestDb::new("lay_src");
    let dest = TestDb::new("lay_dest");
    let archive = Arc::new(ForeignArchive::new(kind, &src));
    // Everything from here on reaches the foreign archive: the segment
    // begun now, with a checkpoint (a restart point for decoding) in it.
    src.archive_wal();
    let first = src
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .expect("a segment name");
    src.exec("CHECKPOINT");
    let mirror = Mirror::start(archive.clone(), &first);

    let layout = if named {
        format!("layout = \"{kind}\"\n")
    } else {
        String::new()
    };
    let section = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n{layout}",
        archive.url()
    );
    // Setup before the table exists installs the journal.
    two_databases(&src, &dest, &section).ok(&["setup"]);
    create_orders(&src, 10_000);
    let writer = Writer::start(&src, 10_000, 1_000_000, 11);
    // Segments switched while writes go on: enough files for every codec
    // the layout is stored with to be used.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(600));
        src.archive_wal();
    }
    assert!(writer.stop() > 20);

    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    src.archive_wal();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    let how = if named { "as configured" } else { "detected" };
    assert!(
        plan.contains(": replay")
            && plan.contains("creation")
            && plan.contains(&format!(
                "archive: {} (layout {kind}, {how})",
                archive.url()
            )),
        "plan: {plan}"
    );

    let before = src.table_reads("orders");
    walfill.ok(&["backfill", "orders_summary", "--path", "replay"]);
    assert_eq!(
        src.table_reads("orders"),
        before,
        "the backfill read orders"
    );
    let stored = mirror.finish();
    assert!(stored >= 5, "only {stored} segments reached the archive");
    assert_eq!(
        dest.value("SELECT path FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("replay")
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
    // walfill wrote nothing into the other tool's archive.
    assert!(
        !archive
            .files()
            .iter()
            .any(|f| f.starts_with("wal/") || f.starts_with("base/")),
        "{:?}",
        archive.files()
    );
    (src, dest, walfill, archive)
}

/// A folder an `archive_command` copies (and compresses) segments into:
/// detected, read in every codec, and never written into.
#[test]
fn replay_from_a_flat_archive_folder() {
    let (src, dest, walfill, archive) = replay_from("flat", false);
    let files = archive.files();
    for ext in [".gz", ".zst", ".lz4"] {
        assert!(
            files.iter().any(|f| f.ends_with(ext)),
            "no {ext}: {files:?}"
        );
    }
    assert!(
        files.iter().any(|f| f.len() == 24),
        "no plain segment: {files:?}"
    );
    // status names the archive's layout.
    let status: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["status", "--json"])).expect("status JSON");
    assert_eq!(status["archive"]["url"], archive.url().as_str());
    assert_eq!(status["archive"]["layout"], "flat");
    assert_eq!(status["archive"]["detected"], true);
    let text = walfill.ok(&["status"]);
    assert!(
        text.contains(&format!(
            "archive: {} (layout flat, detected)",
            archive.url()
        )),
        "{text}"
    );
    // wal-push refuses to write into it.
    let segment = archive.dir.join(&files[0]);
    let out = walfill.run(&["wal-push", &segment.display().to_string()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("flat layout") && stderr.contains("never writes"),
        "{stderr}"
    );
    assert_eq!(archive.files(), files, "wal-push wrote into the archive");

    // `serve` leaves the archiving to the tool that fills the archive
    // (`[serve] archiver = "auto"`, the default) instead of failing on it
    // again and again; `archiver = true` over it is refused at start.
    let serving = |archiver: &str| {
        two_databases(
            &src,
            &dest,
            &format!(
                "[archive]\nurl = \"{}\"\n\n[serve]\npoll_seconds = 1\n{archiver}\n{}",
                archive.url(),
                orders_target("v1")
            ),
        )
    };
    let auto = serving("");
    let mut service = Service::start(&auto, false, &[]);
    let started = std::time::Instant::now();
    while !service.log().contains("the archiver stays off") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no word of the archiver:\n{}",
            service.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    let log = service.log();
    assert!(
        log.contains("flat layout") && !log.contains("failed; starting it again"),
        "{log}"
    );
    service.stop(Duration::from_secs(30));
    let on = serving("archiver = true");
    let out = on.run(&["serve"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("archiver = true") && stderr.contains("flat layout"),
        "{stderr}"
    );
    assert_eq!(archive.files(), files, "serve wrote into the archive");
}

/// WAL-G's `wal_005/`, in the four formats WAL-G compresses with.
#[test]
fn replay_from_a_wal_g_archive() {
    let (_src, _dest, _walfill, archive) = replay_from("wal-g", false);
    let files = archive.files();
    for ext in [".lz4", ".zst", ".br", ".lzma"] {
        assert!(
            files
                .iter()
                .any(|f| f.starts_with("wal_005/") && f.ends_with(ext)),
            "no {ext}: {files:?}"
        );
    }
}

/// A pgBackRest repository filled by `pgbackrest archive-push`, the layout
/// named in the configuration; a segment whose content does not have the
/// checksum its name states stops a replay, naming the file.
#[test]
fn replay_from_a_pgbackrest_repository() {
    let (src, _dest, walfill, archive) = replay_from("pgbackrest", true);
    let files = archive.files();
    for ext in [".gz", ".lz4", ".zst", ".bz2"] {
        assert!(
            files
                .iter()
                .any(|f| f.starts_with("repo/archive/main/15-1/") && f.ends_with(ext)),
            "no {ext}: {files:?}"
        );
    }

    // One segment's content changed (recompressed under the same name, so
    // with the checksum of the original): reading it fails, naming it.
    let prefix = "repo/archive/main/";
    let victim = files
        .iter()
        .find(|f| f.starts_with(prefix) && f.ends_with(".gz") && !f.contains(".history"))
        .expect("a gzip segment");
    let path = archive.dir.join(victim);
    let unpacked = Command::new("gzip")
        .arg("-dc")
        .arg(&path)
        .output()
        .expect("gzip -dc");
    assert!(unpacked.status.success());
    let mut content = unpacked.stdout;
    content[100_000] ^= 0xFF;
    let mut gzip = Command::new("gzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = gzip.stdin.take().expect("stdin");
    let writing = std::thread::spawn(move || stdin.write_all(&content));
    let packed = gzip.wait_with_output().expect("gzip -c");
    writing.join().expect("writer").expect("write to gzip");
    std::fs::write(&path, packed.stdout).expect("rewrite segment");

    let name = victim.rsplit('/').next().unwrap_or_default();
    let segment_size: u64 = src
        .value("SELECT pg_size_bytes(current_setting('wal_segment_size'))")
        .and_then(|v| v.parse().ok())
        .expect("segment size");
    let hi = u64::from_str_radix(&name[8..16], 16).expect("hex");
    let lo = u64::from_str_radix(&name[16..24], 16).expect("hex");
    let start = (hi << 32) | (lo * segment_size);
    let end = start + segment_size;
    let start = format!("{:X}/{:X}", start >> 32, start & 0xFFFF_FFFF);
    // Reading starts right there (no scan back for a restart point).
    let out = walfill.run(&[
        "decode",
        "--restart-from",
        &start,
        "--from",
        &start,
        "--to",
        &format!("{:X}/{:X}", end >> 32, end & 0xFFFF_FFFF),
    ]);
    assert!(!out.status.success(), "a corrupt segment was read");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let relative = victim.strip_prefix(prefix).unwrap_or(victim);
    assert!(
        stderr.contains("SHA-1") && stderr.contains(relative) && stderr.contains("corrupt"),
        "{stderr}"
    );
}

/// A failover: the table is created and written on a primary on timeline
/// 1, a standby is promoted to timeline 2 and written on; both archive
/// into one flat folder with `cp`. A replay backfill of the promoted
/// server's table follows its timeline through the archived history file:
/// timeline 1's WAL up to the switch, timeline 2's after it.
#[test]
fn replay_follows_the_source_across_a_failover() {
    let mut failover = Failover::start();
    let dest = TestDb::new("fo_dest");
    let primary = TestDb::on(&failover.primary_url("postgres"), "fo_src");
    let section = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n",
        failover.archive_url()
    );
    two_databases(&primary, &dest, &section).ok(&["setup"]);
    create_orders(&primary, 5_000);
    let writer = Writer::start(&primary, 5_000, 1_000_000, 21);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(writer.stop() > 10);
    failover.add_standby();
    // Written on timeline 1 and streamed to the standby.
    primary.exec("UPDATE orders SET status = 'moved' WHERE id % 11 = 0");
    failover.promote();
    let src = TestDb::existing(&failover.standby_url("postgres"), &primary.name);
    drop(primary);
    // Timeline 2: changes the old primary never saw.
    src.exec(
        "UPDATE orders SET total_cents = total_cents + 1 WHERE id % 5 = 0;
         DELETE FROM orders WHERE id % 13 = 0;
         INSERT INTO orders SELECT g, 1, 'open', g, 'after failover'
           FROM generate_series(2000001, 2000500) g;",
    );
    let writer = Writer::start(&src, 5_000, 3_000_000, 22);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(writer.stop() > 10);
    src.archive_wal();
    let archived: Vec<String> = std::fs::read_dir(&failover.archive)
        .expect("archive folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        archived.iter().any(|f| f == "00000002.history"),
        "{archived:?}"
    );
    assert!(
        archived
            .iter()
            .any(|f| f.starts_with("00000001") && f.len() == 24),
        "{archived:?}"
    );
    assert!(
        archived
            .iter()
            .any(|f| f.starts_with("00000002") && f.len() == 24),
        "{archived:?}"
    );

    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": replay") && plan.contains("creation") && plan.contains("layout flat"),
        "plan: {plan}"
    );
    let before = src.table_reads("orders");
    walfill.ok(&["backfill", "orders_summary", "--path", "replay"]);
    assert_eq!(
        src.table_reads("orders"),
        before,
        "the backfill read orders"
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
}

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
