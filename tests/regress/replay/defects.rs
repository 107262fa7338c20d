//! Replay defects 1, 2, 3, 4 and 17: a transaction older than the restart point, a dropped column added again, unchanged TOAST values, DDL not yet archived.

use super::*;

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
