//! c1, c2: WAL of another cluster or another system identifier is refused, and changes written under wal_level=replica are never replayed.

use super::*;

/// The archive directory of the wal_level=replica test cluster (the second
/// cluster `scripts/test.sh` starts, `$WALFILL_PG_HOME-replica`).
fn replica_archive_dir() -> PathBuf {
    if let Ok(url) = std::env::var("WALFILL_TEST_REPLICA_ARCHIVE_URL") {
        return PathBuf::from(url.trim_start_matches("file://"));
    }
    let main = archive_url();
    let main = Path::new(main.trim_start_matches("file://"));
    let home = main
        .parent()
        .expect("the archive is inside WALFILL_PG_HOME");
    PathBuf::from(format!("{}-replica", home.display())).join("archive")
}

/// A table created after `setup`, so a replay from its creation is
/// possible with the cluster's own archive.
fn replayable_table(db: &TestDb, archive: &str) -> Walfill {
    let walfill = Walfill::new(db, archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g;
         UPDATE t SET v = 'updated' WHERE id % 7 = 0;",
    );
    walfill.configure(
        db,
        &format!("{archive}\n{}", target("t_view", "t", "id, v", None, "v1")),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();
    let plan = walfill.ok(&["plan", "t_view"]);
    assert!(
        plan.contains(": replay"),
        "with the cluster's own archive: {plan}"
    );
    walfill
}

/// c1. `[archive] url` pointing at another cluster's archive (the
/// wal_level=replica test cluster's): `plan` says snapshot because the
/// archive's system identifier is not the source's, and `--path replay`
/// refuses.
#[test]
fn c1_replay_refuses_the_archive_of_another_cluster() {
    let db = TestDb::new("c1");
    let own = archive_section(&archive_url());
    let walfill = replayable_table(&db, &own);
    // Make sure the other cluster has archived something.
    let other = TestDb::on(&replica_admin_url(), "c1_other");
    other.archive_wal();
    let dir = replica_archive_dir();
    assert!(dir.join("wal").is_dir(), "no archive at {}", dir.display());
    let foreign = format!(
        "[archive]\nurl = \"file://{}\"\nwait_seconds = 5\n",
        dir.display()
    );
    walfill.configure(
        &db,
        &format!("{foreign}\n{}", target("t_view", "t", "id, v", None, "v1")),
    );
    let plan = walfill.ok(&["plan", "t_view"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("system identifier"),
        "plan with another cluster's archive must refuse it by its system identifier:\n{plan}"
    );
    let out = walfill.run(&["backfill", "t_view", "--path", "replay"]);
    assert!(
        !out.status.success(),
        "backfill --path replay from another cluster's archive succeeded"
    );
    assert!(
        stderr(&out).contains("system identifier"),
        "{}",
        stderr(&out)
    );
}

/// Offset of `xlp_sysid` in a segment's first (long) page header.
const SYSID_OFFSET: usize = 24;

/// Copies the cluster's archived segments from `first` on into `dest`,
/// each with the system identifier in its long page header replaced by
/// `sysid`: WAL that claims to come from another cluster.
fn copy_as_other_cluster(server: &Path, dest: &Path, first: &str, sysid: u64) {
    let Ok(entries) = std::fs::read_dir(server) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.len() != 24 || name.as_str() < first || dest.join(&name).exists() {
            continue;
        }
        let Ok(mut bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        if bytes.len() < SYSID_OFFSET + 8 {
            continue;
        }
        bytes[SYSID_OFFSET..SYSID_OFFSET + 8].copy_from_slice(&sysid.to_le_bytes());
        let tmp = dest.join(format!("{name}.tmp"));
        std::fs::write(&tmp, &bytes).expect("write a segment");
        std::fs::rename(&tmp, dest.join(&name)).expect("rename a segment");
    }
}

/// c1, with WAL whose headers name another system: the source's own
/// segments copied into a separate archive with the wal_level=replica
/// cluster's system identifier in their headers (kept filled while the
/// backfill runs). `plan` must not choose replay, and `--path replay` must
/// refuse, naming the system identifier.
#[test]
fn c1_replay_refuses_segments_with_another_system_identifier() {
    let db = TestDb::new("c1b");
    let own = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &own);
    walfill.ok(&["setup"]);
    db.archive_wal();
    let first = db.checkpoint_segment();
    drop(walfill);
    let walfill = replayable_table(&db, &own);

    let ours: String = db
        .value("SELECT system_identifier FROM pg_control_system()")
        .unwrap();
    let other = TestDb::on(&replica_admin_url(), "c1b_other");
    let theirs: String = other
        .value("SELECT system_identifier FROM pg_control_system()")
        .unwrap();
    assert_ne!(
        ours, theirs,
        "the two test clusters have one system identifier"
    );
    let sysid: u64 = theirs.parse().unwrap();

    let archive = LocalArchive::new("c1b");
    std::fs::create_dir_all(archive.wal()).unwrap();
    let server = PathBuf::from(archive_url().trim_start_matches("file://")).join("wal");
    copy_as_other_cluster(&server, &archive.wal(), &first, sysid);
    // Keep it filled, as an archive_command would, while walfill runs.
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (stop, dest, first) = (stop.clone(), archive.wal(), first.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                copy_as_other_cluster(&server, &dest, &first, sysid);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let section = archive_section(&archive.url());
    walfill.configure(
        &db,
        &format!("{section}\n{}", target("t_view", "t", "id, v", None, "v1")),
    );
    let plan = walfill.ok(&["plan", "t_view"]);
    let out = walfill.run(&["backfill", "t_view", "--path", "replay"]);
    stop.store(true, Ordering::Relaxed);
    feeder.join().expect("the feeder thread");
    let backfill = if out.status.success() {
        format!(
            "backfill --path replay exited 0 (path {})",
            field(&db, "t_view", "v1", "path")
        )
    } else {
        format!(
            "backfill --path replay failed ({}): {}",
            out.status,
            stderr(&out)
        )
    };
    assert!(
        plan.contains(": snapshot") && plan.contains("system identifier"),
        "plan over segments of system {sysid} (the source is {ours}) must refuse them:\n{plan}\n\
         {backfill}"
    );
    assert!(
        !out.status.success() && stderr(&out).contains("system identifier"),
        "backfill --path replay over segments of system {sysid} into a source of system {ours}: \
         {backfill}"
    );
}

/// A cluster of its own, started and restarted by the project's scripts.
struct PrivateCluster {
    home: PathBuf,
    port: u16,
    url: String,
}

impl PrivateCluster {
    fn script(&self, name: &str) -> std::process::Output {
        let out =
            std::process::Command::new(format!("{}/scripts/{name}", env!("CARGO_MANIFEST_DIR")))
                .env("WALFILL_PG_HOME", &self.home)
                .env("WALFILL_PG_PORT", self.port.to_string())
                .output()
                .expect("run a cluster script");
        assert!(
            out.status.success(),
            "scripts/{name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn start(tag: &str) -> PrivateCluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let home = std::env::temp_dir().join(format!("walfill-{tag}-{}", std::process::id()));
        let mut cluster = PrivateCluster {
            home,
            port,
            url: String::new(),
        };
        let out = cluster.script("pg-up.sh");
        cluster.url = String::from_utf8_lossy(&out.stdout).trim().to_string();
        cluster
    }

    fn restart_with_wal_level(&self, level: &str) {
        crate::support::cluster::connect(&self.url)
            .batch_execute(&format!("ALTER SYSTEM SET wal_level = {level}"))
            .expect("set wal_level");
        self.script("pg-down.sh");
        self.script("pg-up.sh");
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(format!(
            "{}/scripts/pg-down.sh",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg("--purge")
        .env("WALFILL_PG_HOME", &self.home)
        .env("WALFILL_PG_PORT", self.port.to_string())
        .output();
    }
}

/// The read-from-code case of a `wal_level` change inside the replayed
/// range: changes written under `replica` lack what decoding needs (a
/// delete's old key; an insert's data sits in a full-page image), so the
/// plan refuses replay and the backfill builds the version from a snapshot,
/// exact; never a silent skip.
#[test]
fn c2_changes_written_under_wal_level_replica_are_never_replayed() {
    let cluster = PrivateCluster::start("c2");
    let db = TestDb::on(&cluster.url, "c2");
    let archive = format!(
        "[archive]\nurl = \"file://{}/archive\"\nwait_seconds = 60\n",
        cluster.home.display()
    );
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g;",
    );
    cluster.restart_with_wal_level("replica");
    db.exec(
        "CHECKPOINT;
         UPDATE t SET v = 'under replica' WHERE id % 10 = 0;
         DELETE FROM t WHERE id % 7 = 0;
         INSERT INTO t SELECT g, 'replica ' || g FROM generate_series(1000, 1100) g;",
    );
    cluster.restart_with_wal_level("logical");
    db.exec("UPDATE t SET v = v || '!' WHERE id % 3 = 0");
    let select = "id, v";
    walfill.configure(
        &db,
        &format!("{archive}\n{}", target("t_view", "t", select, None, "v1")),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();

    let plan = walfill.ok(&["plan", "t_view"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("wal_level"),
        "the plan does not refuse replay over WAL written under wal_level=replica:\n{plan}"
    );
    let forced = walfill.run(&["backfill", "t_view", "--path", "replay"]);
    assert!(
        !forced.status.success(),
        "a replay over WAL written under wal_level=replica was taken"
    );
    walfill.ok(&["backfill", "t_view"]);
    assert_eq!(field(&db, "t_view", "v1", "path"), "snapshot");
    assert_view_matches(&db, "public.t_view", "t", select, None, "id");
}
