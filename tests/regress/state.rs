//! Versions' state and its transitions: a fallback interrupted (defect 9),
//! a version whose slot is gone (defect 11), a lock still held by a killed
//! process's backend (defect 13).

use std::time::Duration;

use super::{archive_section, drop_slot, field, stderr, target};
use crate::support::cluster::archive_url;
use crate::support::{assert_view_matches, TestDb, Walfill};

/// Defect 9. `kill -9` inside the fallback from replay to snapshot leaves
/// the version in phase `replaying` with path `snapshot` (the old code
/// records path and phase in separate autocommit statements). The state is
/// made by hand, exactly as the fallback's first statements leave it (the
/// replay's progress forgotten, the path switched, the phase not yet
/// `planned`); a rerun of `backfill` must build the version (phase active,
/// view equal to the source), not exit 0 having done nothing.
#[test]
fn r09_backfill_resumes_a_fallback_interrupted_between_path_and_phase() {
    let db = TestDb::new("r09");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g;",
    );
    walfill.configure(
        &db,
        &format!("{archive}\n{}", target("t_view", "t", "id, v", None, "v1")),
    );
    walfill.ok(&["setup"]);
    db.archive_wal();
    walfill.ok(&["backfill", "t_view", "--path", "replay", "--no-swap"]);
    assert_eq!(field(&db, "t_view", "v1", "path"), "replay");
    // What `fall_back_to_snapshot` has written when killed before its last
    // statement (which sets phase = 'planned').
    db.exec(
        "UPDATE walfill.versions
            SET copy_cursor = NULL, rows_copied = 0, replayed_lsn = NULL, changes_applied = 0,
                truncated_lsn = NULL, truncated_seq = NULL, applied_lsn = boundary_lsn,
                path = 'snapshot', path_reason = 'replay abandoned: simulated',
                replay_base = NULL, phase = 'replaying'
          WHERE target = 't_view' AND version = 'v1'",
    );
    db.exec(
        "UPDATE t SET v = 'after' WHERE id % 5 = 0;
         DELETE FROM t WHERE id % 9 = 0;
         INSERT INTO t SELECT g, 'late' FROM generate_series(3001, 3100) g;",
    );
    walfill.ok(&["backfill", "t_view"]);
    let phase = field(&db, "t_view", "v1", "phase");
    assert_eq!(
        phase,
        "active",
        "backfill exited 0 and left the version in phase {phase} (path {})",
        field(&db, "t_view", "v1", "path")
    );
    assert_view_matches(&db, "public.t_view", "t", "id, v", None, "id");
}

/// `items (id, n)`, v1 built, then v2 built and swapped in (v1 is previous).
fn items_v1_then_v2(db: &TestDb) -> Walfill {
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, n int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 500) g;",
    );
    let walfill = Walfill::new(db, &target("items_view", "items", V1, None, "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_view"]);
    walfill.configure(db, &target("items_view", "items", V2, None, "v2"));
    walfill.ok(&["backfill", "items_view"]);
    assert_eq!(field(db, "items_view", "v1", "phase"), "previous");
    walfill
}

const V1: &str = "id, n";
const V2: &str = "id, n * 2 AS n2";

/// Defect 11, rollback. The previous version's slot is dropped and a row
/// written: that version has lost the change, so `walfill rollback` must
/// refuse, naming the slot. Configuring that version again, `backfill`
/// rebuilds it (it does not say "already active; nothing to do"), and the
/// view then equals the source.
#[test]
fn r11_rollback_refuses_a_version_whose_slot_is_gone_and_backfill_rebuilds_it() {
    let db = TestDb::new("r11a");
    let walfill = items_v1_then_v2(&db);
    let slot = field(&db, "items_view", "v1", "slot_name");
    drop_slot(&db, &slot);
    db.exec("INSERT INTO items VALUES (1000, 1000); DELETE FROM items WHERE id = 1");
    let out = walfill.run(&["rollback", "items_view"]);
    assert!(
        !out.status.success(),
        "rollback published v1, whose slot {slot} is gone (it misses the last writes)"
    );
    assert!(stderr(&out).contains("slot"), "{}", stderr(&out));

    walfill.configure(&db, &target("items_view", "items", V1, None, "v1"));
    let out = walfill.run(&["backfill", "items_view"]);
    let err = stderr(&out);
    assert!(out.status.success(), "backfill of v1 failed:\n{err}");
    assert!(
        !err.contains("nothing to do"),
        "backfill did not rebuild v1:\n{err}"
    );
    assert_eq!(field(&db, "items_view", "v1", "phase"), "active");
    assert_view_matches(&db, "public.items_view", "items", V1, None, "id");
}

/// Defect 11, the active version. Its slot is dropped and rows written:
/// `backfill` (the fix `sync` advises) must rebuild it so the view equals
/// the source, not say "already active; nothing to do".
#[test]
fn r11_backfill_rebuilds_the_active_version_whose_slot_is_gone() {
    let db = TestDb::new("r11b");
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, n int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 500) g;",
    );
    let walfill = Walfill::new(&db, &target("items_view", "items", V1, None, "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_view"]);
    let slot = field(&db, "items_view", "v1", "slot_name");
    drop_slot(&db, &slot);
    db.exec("INSERT INTO items VALUES (1000, 1000); DELETE FROM items WHERE id = 1");
    // What an operator runs first; its error advises `walfill backfill`.
    let _ = walfill.run(&["sync", "--once"]);
    let out = walfill.run(&["backfill", "items_view"]);
    let err = stderr(&out);
    assert!(out.status.success(), "backfill failed:\n{err}");
    assert!(
        !err.contains("nothing to do"),
        "backfill did not rebuild v1:\n{err}"
    );
    assert_view_matches(&db, "public.items_view", "items", V1, None, "id");
}

/// Defect 13. Right after a `kill -9`, the killed process's backend may
/// still hold the version's advisory lock. Simulated by holding the same
/// lock from a test session for 3 s: a `backfill` started meanwhile must
/// wait for it and then succeed, not fail with exit code 4.
#[test]
fn r13_a_rerun_waits_for_a_lock_left_by_a_killed_process() {
    let db = TestDb::new("r13");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g;",
    );
    let walfill = Walfill::new(&db, &target("t_view", "t", "id, v", None, "v1"));
    walfill.ok(&["setup"]);
    let mut holder = db.client();
    holder
        .batch_execute(
            "SELECT pg_advisory_lock(hashtextextended('walfill:version:t_view:v1', 7472616))",
        )
        .expect("take the version's lock");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        drop(holder);
    });
    let backfill = walfill.spawn(&["backfill", "t_view"]);
    walfill.wait_ok(backfill, Duration::from_secs(120));
    release.join().expect("the lock holder");
    assert_eq!(field(&db, "t_view", "v1", "phase"), "active");
    assert_view_matches(&db, "public.t_view", "t", "id, v", None, "id");
}
