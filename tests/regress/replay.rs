//! Replay backfills (defects 1, 2, 3, 4 by replay, 17) and the archive
//! checks found by reading the code (c1, c3).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{archive_section, field, fill_docs, stderr, target, DOCS_SELECT};
use crate::archiver::LocalArchive;
use crate::support::cluster::{archive_url, replica_admin_url};
use crate::support::{assert_view_matches, TestDb, Walfill};

/// Defect 1. Session A assigns its xid (a write to another table), a
/// checkpoint writes a restart point listing A as running, session B creates
/// `t` and inserts row 1, then A inserts row 2 into `t` and commits. A
/// replay from the table's creation must see both rows: the restart point
/// must be one from which every transaction that can touch the table is
/// seen whole.
#[test]
fn r01_replay_sees_a_transaction_that_began_before_the_restart_point() {
    let db = TestDb::new("r01");
    let archive = archive_section(&archive_url());
    db.exec("CREATE TABLE other (id int PRIMARY KEY)");
    // The journal must be installed before `t` exists, so replay from its
    // creation is possible.
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);

    let mut a = db.client();
    let mut b = db.client();
    a.batch_execute("BEGIN; INSERT INTO other VALUES (1)")
        .expect("session A begins");
    db.exec("CHECKPOINT");
    b.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'from B')",
    )
    .expect("session B creates t");
    a.batch_execute("INSERT INTO t VALUES (2, 'from A'); COMMIT")
        .expect("session A writes t and commits");
    drop((a, b));

    walfill.configure(
        &db,
        &format!("{archive}\n{}", target("t_view", "t", "id, v", None, "v1")),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();
    walfill.ok(&["backfill", "t_view", "--path", "replay"]);
    assert_eq!(field(&db, "t_view", "v1", "path"), "replay");
    assert_view_matches(&db, "public.t_view", "t", "id, v", None, "id");
}

/// Defect 2, by replay. A column dropped and added again under the same
/// name is a new column: rows written before the drop have NULL in it, and
/// a replay must not bring the dropped values back.
#[test]
fn r02_replay_does_not_bring_back_a_dropped_column_re_added_under_its_name() {
    let db = TestDb::new("r02r");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE t2 (id int PRIMARY KEY, v text);
         INSERT INTO t2 VALUES (1, 'old-1'), (2, 'old-2');
         ALTER TABLE t2 DROP COLUMN v;
         ALTER TABLE t2 ADD COLUMN v text;
         INSERT INTO t2 VALUES (3, 'new-3');",
    );
    walfill.configure(
        &db,
        &format!(
            "{archive}\n{}",
            target("t2_view", "t2", "id, v", None, "v1")
        ),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();
    walfill.ok(&["backfill", "t2_view", "--path", "replay"]);
    assert_view_matches(&db, "public.t2_view", "t2", "id, v", None, "id");
}

/// `docs` with out-of-line bodies, created before `setup` (so no replay
/// from its creation), and a version v1 built by snapshot, which leaves a
/// base snapshot in the archive: later replays start from that base, and
/// the TOAST chunks of the bodies lie before it.
fn docs_with_a_base(db: &TestDb, archive: &str) -> Walfill {
    db.exec("CREATE TABLE docs (id int PRIMARY KEY, status text, body text)");
    fill_docs(db, 200);
    let walfill = Walfill::new(
        db,
        &format!(
            "{archive}\n{}",
            target("doc_digest", "docs", "id, status", None, "v1")
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "doc_digest"]);
    assert_eq!(field(db, "doc_digest", "v1", "path"), "snapshot");
    walfill
}

/// Builds v2 of `doc_digest` (reading the body) by replay from v1's base.
fn replay_v2_reading_the_body(db: &TestDb, walfill: &Walfill, archive: &str) {
    walfill.configure(
        db,
        &format!(
            "{archive}\n{}",
            target("doc_digest", "docs", DOCS_SELECT, None, "v2")
        ),
    );
    db.archive_wal();
    walfill.ok(&["backfill", "doc_digest", "--path", "replay"]);
    assert_eq!(
        field(db, "doc_digest", "v2", "replay_base->>'kind'"),
        "snapshot"
    );
    assert_view_matches(db, "public.doc_digest", "docs", DOCS_SELECT, None, "id");
}

/// Defect 3. History written under REPLICA IDENTITY DEFAULT (updates that
/// leave the TOASTed body unchanged, so WAL does not resend it), then the
/// table switched to REPLICA IDENTITY FULL: a replay from a base snapshot
/// must still compute the transform of those rows with their bodies.
#[test]
fn r03_replay_keeps_unchanged_toast_values_written_before_replica_identity_full() {
    let db = TestDb::new("r03");
    let archive = archive_section(&archive_url());
    let walfill = docs_with_a_base(&db, &archive);
    db.exec(
        "UPDATE docs SET status = 'published' WHERE id % 2 = 0;
         ALTER TABLE docs REPLICA IDENTITY FULL;
         UPDATE docs SET status = 'late' WHERE id % 5 = 0;",
    );
    replay_v2_reading_the_body(&db, &walfill, &archive);
}

/// Defect 3, replayed from the table's creation (the TOAST chunks are in
/// the replayed WAL, so the decoder has the bodies). Passes at 31049f4;
/// kept as a control.
#[test]
fn r03_replay_from_creation_keeps_unchanged_toast_values_written_before_replica_identity_full() {
    let db = TestDb::new("r03c");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec("CREATE TABLE docs (id int PRIMARY KEY, status text, body text)");
    fill_docs(&db, 200);
    db.exec(
        "UPDATE docs SET status = 'published' WHERE id % 2 = 0;
         ALTER TABLE docs REPLICA IDENTITY FULL;
         UPDATE docs SET status = 'late' WHERE id % 5 = 0;",
    );
    walfill.configure(
        &db,
        &format!(
            "{archive}\n{}",
            target("doc_digest", "docs", DOCS_SELECT, None, "v1")
        ),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();
    walfill.ok(&["backfill", "doc_digest", "--path", "replay"]);
    assert_view_matches(&db, "public.doc_digest", "docs", DOCS_SELECT, None, "id");
}

/// Defect 4, by replay. Bodies stored out of line, then `SET STORAGE
/// PLAIN`: the old rows still hold external values, and updates that leave
/// them unchanged still do not resend them; a replay from a base snapshot
/// must keep them.
#[test]
fn r04_replay_keeps_unchanged_toast_values_after_set_storage_plain() {
    let db = TestDb::new("r04r");
    let archive = archive_section(&archive_url());
    let walfill = docs_with_a_base(&db, &archive);
    db.exec(
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE PLAIN;
         UPDATE docs SET status = 'published' WHERE id % 2 = 0;",
    );
    replay_v2_reading_the_body(&db, &walfill, &archive);
}

/// Defect 17. Right after `ADD COLUMN c int DEFAULT 25` (not archived yet),
/// with a transform that reads `c`: `plan` must say snapshot and name the
/// column (what the backfill will do), and the backfill must succeed.
#[test]
fn r17_plan_accounts_for_ddl_not_yet_archived() {
    let db = TestDb::new("r17");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g;",
    );
    walfill.configure(
        &db,
        &format!("{archive}\n{}", target("t_view", "t", "id, v", None, "v1")),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();
    let plan = walfill.ok(&["plan", "t_view"]);
    assert!(plan.contains(": replay"), "before the DDL: {plan}");

    db.exec("ALTER TABLE t ADD COLUMN c int DEFAULT 25");
    let select = "id, v, c";
    walfill.configure(
        &db,
        &format!("{archive}\n{}", target("t_view", "t", select, None, "v1")),
    );
    let plan = walfill.ok(&["plan", "t_view"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("column c"),
        "plan right after ADD COLUMN c ... DEFAULT 25 (not archived yet) must say snapshot \
         and name column c:\n{plan}"
    );
    walfill.ok(&["backfill", "t_view"]);
    assert_view_matches(&db, "public.t_view", "t", select, None, "id");
}

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

/// The files of the base snapshots of table `table` of `db` in the
/// cluster's archive.
fn base_files(db: &TestDb, table: &str) -> Vec<PathBuf> {
    let database = db
        .value("SELECT oid FROM pg_database WHERE datname = current_database()")
        .unwrap();
    let relid = db
        .value(&format!("SELECT '{table}'::regclass::oid"))
        .unwrap();
    let dir = PathBuf::from(archive_url().trim_start_matches("file://"))
        .join("base")
        .join(database)
        .join(relid);
    let mut files = Vec::new();
    let mut stack = vec![dir];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A table older than the journal, built by snapshot (which leaves a base
/// snapshot in the archive), then written to; returns the configuration.
fn table_with_a_base(db: &TestDb) -> (Walfill, String) {
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text, w int);
         INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 3000) g;",
    );
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(
        db,
        &format!(
            "{archive}\n{}",
            target("t_view", "t", "id, v, w", None, "v1")
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "t_view"]);
    assert_eq!(field(db, "t_view", "v1", "path"), "snapshot");
    db.exec("UPDATE t SET w = w + 1 WHERE id % 3 = 0; DELETE FROM t WHERE id % 11 = 0");
    db.archive_wal();
    (walfill, archive)
}

/// Builds v2 (auto path) over a damaged base: it must fall back to a
/// snapshot (like a WAL gap), never fail or panic.
fn v2_over_damaged_base(db: &TestDb, walfill: &Walfill, archive: &str, damage: &str) {
    let select = "id, upper(v) AS v, w";
    walfill.configure(
        db,
        &format!("{archive}\n{}", target("t_view", "t", select, None, "v2")),
    );
    let plan = walfill.run(&["plan", "t_view"]);
    let out = walfill.run(&["backfill", "t_view"]);
    let err = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(101),
        "backfill panicked over {damage}:\n{err}"
    );
    assert!(
        out.status.success(),
        "backfill over {damage} failed with {} instead of taking a snapshot (plan said: {}):\n{err}",
        out.status,
        String::from_utf8_lossy(&plan.stdout)
    );
    assert_eq!(field(db, "t_view", "v2", "phase"), "active");
    assert_view_matches(db, "public.t_view", "t", select, None, "id");
}

/// c3, a truncated part. A base snapshot whose Parquet part is damaged:
/// a later backfill (auto) of a new version falls back to a snapshot and
/// the view equals the source.
#[test]
fn c3_a_truncated_base_snapshot_part_falls_back_to_a_snapshot() {
    let db = TestDb::new("c3a");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        let len = std::fs::metadata(&part).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
        file.set_len(len / 2).unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "a truncated part");
}

/// c3, a part with fewer columns than the manifest says (a valid Parquet
/// file with one column): fall back, never panic.
#[test]
fn c3_a_base_snapshot_part_with_fewer_columns_falls_back_to_a_snapshot() {
    use arrow::array::{ArrayRef, StringArray};
    use arrow::record_batch::RecordBatch;

    let db = TestDb::new("c3b");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        let ids: ArrayRef = Arc::new(StringArray::from(vec!["1", "2", "3"]));
        let batch = RecordBatch::try_from_iter([("id", ids)]).unwrap();
        let file = std::fs::File::create(&part).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "a part with one column");
}

/// The Parquet parts of the base snapshots of `t`.
fn base_parts(db: &TestDb) -> Vec<PathBuf> {
    let files = base_files(db, "t");
    let parts: Vec<PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .cloned()
        .collect();
    assert!(!parts.is_empty(), "no base snapshot parts in {files:?}");
    parts
}

/// c3, a part holding fewer rows than the manifest says (a valid Parquet
/// file with the same columns, its second half lost): the base is not
/// usable, so the backfill falls back to a snapshot; never a view missing
/// those rows.
#[test]
fn c3_a_base_snapshot_part_with_fewer_rows_than_its_manifest_falls_back() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let db = TestDb::new("c3c");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        let bytes = bytes::Bytes::from(std::fs::read(&part).unwrap());
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
        let schema = batches[0].schema();
        let file = std::fs::File::create(&part).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
        for batch in &batches {
            writer.write(&batch.slice(0, batch.num_rows() / 2)).unwrap();
        }
        writer.close().unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "parts with half their rows");
}

/// c3, a part missing from the archive: fall back to a snapshot.
#[test]
fn c3_a_missing_base_snapshot_part_falls_back_to_a_snapshot() {
    let db = TestDb::new("c3d");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        std::fs::remove_file(&part).unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "a missing part");
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
