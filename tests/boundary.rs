//! The version rule at the boundary: a transaction that writes a row before
//! the slot's consistent point and commits after it.

use std::time::Duration;

use crate::support::{assert_view_matches, TestDb, Walfill};

const SELECT: &str = "id, v";

/// Makes the slot's snapshot builder reach its consistent point while a
/// transaction that already wrote is still open (PostgreSQL's builder goes
/// BUILDING → FULL → CONSISTENT at running-xacts records, which CHECKPOINT
/// writes), then commits that transaction after the boundary.
#[test]
fn a_write_before_the_boundary_committed_after_it_wins() {
    let db = TestDb::new("boundary");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'orig' FROM generate_series(1, 20) g;
         CREATE TABLE other (x int);",
    );
    let walfill = Walfill::new(
        &db,
        "[[target]]\nname = \"tv\"\nsource = \"t\"\nselect = \"id, v\"\nversion = \"v1\"\n",
    );
    walfill.ok(&["setup"]);

    // A: running before the slot exists, so the builder must wait for it.
    let mut a = db.client();
    a.batch_execute("BEGIN; INSERT INTO other VALUES (1)")
        .unwrap();
    let backfill = walfill.spawn(&["backfill", "tv"]);
    db.wait_for(
        "SELECT count(*) = 1 FROM pg_replication_slots
          WHERE slot_name LIKE 'walfill_tv_v1_%' AND database = current_database()",
        Duration::from_secs(30),
        "the slot to be created",
    );
    std::thread::sleep(Duration::from_millis(300));

    // B: starts after the builder's first running-xacts record.
    let mut b = db.client();
    b.batch_execute("BEGIN; UPDATE t SET v = 'b' WHERE id = 2")
        .unwrap();
    a.batch_execute("COMMIT").unwrap();
    db.exec("CHECKPOINT"); // builder: FULL, waiting for B

    // D: starts after FULL; it writes now and commits after the boundary.
    let mut d = db.client();
    d.batch_execute(
        "BEGIN; UPDATE t SET v = 'd-before' WHERE id = 3; INSERT INTO t VALUES (100, 'd-new')",
    )
    .unwrap();
    let written: String = d
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    b.batch_execute("COMMIT").unwrap();
    db.exec("CHECKPOINT"); // builder: CONSISTENT, D still open
    db.wait_for(
        "SELECT boundary_lsn IS NOT NULL FROM walfill.versions",
        Duration::from_secs(30),
        "the boundary to be recorded",
    );
    d.batch_execute("UPDATE t SET v = 'd-after' WHERE id = 4; DELETE FROM t WHERE id = 5; COMMIT")
        .unwrap();
    let committed: String = d
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    walfill.wait_ok(backfill, Duration::from_secs(60));
    // The backfill's catch-up may have finished before D committed (it
    // aims at the source's position when it starts, and an open
    // transaction does not hold it back); the stream brings D either way.
    walfill.ok(&["sync", "--once"]);

    let boundary = db
        .value("SELECT boundary_lsn::text FROM walfill.versions")
        .expect("a recorded boundary");
    let before: bool = db
        .client()
        .query_one(
            "SELECT $1::text::pg_lsn < $2::text::pg_lsn AND $2::text::pg_lsn < $3::text::pg_lsn",
            &[&written, &boundary, &committed],
        )
        .unwrap()
        .get(0);
    assert!(
        before,
        "the scenario needs D's first write ({written}) before the boundary ({boundary}) \
         and its commit ({committed}) after it"
    );
    assert_view_matches(&db, "public.tv", "t", SELECT, None, "id");
    assert_eq!(
        db.value("SELECT v FROM tv WHERE id = 3").as_deref(),
        Some("d-before")
    );
    assert_eq!(
        db.value("SELECT v FROM tv WHERE id = 100").as_deref(),
        Some("d-new")
    );
    assert_eq!(
        db.value("SELECT count(*)::text FROM tv WHERE id = 5")
            .as_deref(),
        Some("0")
    );
}
