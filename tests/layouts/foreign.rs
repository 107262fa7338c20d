//! Replays from archives other tools keep: a flat folder, WAL-G, pgBackRest, and across a failover

use super::*;

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
    writer.wait_for_ops(11);
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
    writer.wait_for_ops(11);
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
