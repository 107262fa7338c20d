//! `kill -9` at any moment, then the same command again: same result, nothing
//! duplicated or lost.

use std::time::Duration;

use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches, TestDb, Walfill};

fn kill9(child: &mut std::process::Child) {
    child.kill().expect("SIGKILL walfill");
    let _ = child.wait();
}

/// Killed mid-copy (twice, the second time after it resumed with a new
/// snapshot), then mid-stream; every rerun resumes and the view ends exact.
#[test]
fn kill_mid_copy_and_mid_stream_then_rerun() {
    let db = TestDb::new("resume");
    create_orders(&db, 40_000);
    let settings =
        "[backfill]\nchunk_rows = 500\nmax_rows_per_second = 20000\napply_batch_changes = 200\n";
    let walfill = Walfill::new(&db, &format!("{settings}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);

    let writer = Writer::start(&db, 40_000, 1_000_000, 11);
    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT rows_copied >= 5000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 5000 rows",
    );
    kill9(&mut run);
    let first = db
        .value("SELECT copy_cursor::text FROM walfill.versions")
        .unwrap();

    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        &format!(
            "SELECT copy_cursor::text <> '{first}' AND rows_copied >= 15000 FROM walfill.versions"
        ),
        Duration::from_secs(60),
        "the resumed copy to move on",
    );
    kill9(&mut run);
    let resumed = db
        .value("SELECT copy_boundary_lsn > boundary_lsn FROM walfill.versions")
        .is_some_and(|v| v == "true");

    assert!(
        resumed,
        "a resumed copy reads a newer snapshot than the boundary"
    );

    // Let the copy finish while writes continue, so the stream has work.
    let run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT phase <> 'copying' FROM walfill.versions",
        Duration::from_secs(120),
        "the copy to finish",
    );
    std::thread::sleep(Duration::from_millis(300));
    writer.stop();
    walfill.wait_ok(run, Duration::from_secs(120));

    // Many more transactions, then kill the stream apply while it is under way.
    db.exec(
        "DO $$ BEGIN FOR i IN 0..299 LOOP
             UPDATE orders SET total_cents = total_cents + 3 WHERE id % 300 = i;
             DELETE FROM orders WHERE id % 3000 = i * 7;
             UPDATE orders SET id = id + 2000000 WHERE id % 3001 = i AND id < 2000000;
             COMMIT;
         END LOOP; END $$;",
    );
    let end = db.value("SELECT pg_current_wal_lsn()::text").unwrap();
    let changes = db
        .value("SELECT changes_applied::text FROM walfill.versions")
        .unwrap();
    let mut sync = walfill.spawn(&["sync", "--once"]);
    db.wait_for(
        &format!("SELECT changes_applied > {changes} FROM walfill.versions"),
        Duration::from_secs(60),
        "the stream apply to start",
    );
    kill9(&mut sync);
    let midway = db
        .value(&format!(
            "SELECT applied_lsn < '{end}' FROM walfill.versions"
        ))
        .unwrap();
    assert_eq!(
        midway, "true",
        "the kill landed after the stream was fully applied"
    );
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_summary", "v1"]);

    assert_view_matches(
        &db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
    // What a duplicate would look like, each counted where it would show:
    // a row deleted at the source alive again in the version's table, and a
    // stale copy (versioned at or before the boundary) winning over the
    // updates every surviving row received after it.
    let resurrected = db
        .value(
            "SELECT count(*) FROM derived.orders_summary__v1 s
              WHERE NOT s._walfill_deleted AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = s.id)",
        )
        .unwrap();
    assert_eq!(resurrected, "0", "deleted rows came back");
    let stale = db
        .value(
            "SELECT count(*) FROM derived.orders_summary__v1 s, walfill.versions v
              WHERE NOT s._walfill_deleted AND s._walfill_lsn <= v.copy_boundary_lsn",
        )
        .unwrap();
    assert_eq!(stale, "0", "copied rows won over later updates");
    let events = db
        .value("SELECT count(*) FROM walfill.events WHERE kind = 'copy_resumed'")
        .unwrap();
    assert_eq!(events, "2", "both resumes are recorded");
}

/// An identity transform's chunks go straight into the version's table (no
/// work table, no key index until the copy ends), their version from the
/// table's defaults: killed mid-copy and resumed with a newer snapshot, the
/// rows of each run carry that run's snapshot, the defaults are gone
/// afterwards, and the view is exact.
#[test]
fn an_identity_copy_killed_and_resumed_versions_each_run_by_its_snapshot() {
    let db = TestDb::new("resume_identity");
    create_orders(&db, 20_000);
    let select = "id, customer_id, status, total_cents, note";
    let settings = "[backfill]\nchunk_rows = 500\nmax_rows_per_second = 20000\n";
    let target = orders_target("v1")
        .replace(ORDERS_SELECT, select)
        .replace(&format!("where = \"{ORDERS_WHERE}\"\n"), "");
    let walfill = Walfill::new(&db, &format!("{settings}\n{target}"));
    walfill.ok(&["setup"]);

    let writer = Writer::start(&db, 20_000, 1_000_000, 23);
    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT rows_copied >= 4000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 4000 rows",
    );
    kill9(&mut run);
    let has_key = "SELECT count(*)::text FROM pg_constraint
                    WHERE conrelid = 'derived.orders_summary__v1'::regclass AND contype = 'p'";
    assert_eq!(
        db.value(has_key).as_deref(),
        Some("0"),
        "loaded without its key"
    );
    let run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT phase <> 'copying' FROM walfill.versions",
        Duration::from_secs(120),
        "the resumed copy to finish",
    );
    writer.stop();
    walfill.wait_ok(run, Duration::from_secs(120));

    assert_eq!(db.value(has_key).as_deref(), Some("1"), "the key is built");
    let defaults = db
        .value(
            "SELECT count(*)::text FROM pg_attrdef d
               JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
              WHERE d.adrelid = 'derived.orders_summary__v1'::regclass
                AND a.attname IN ('_walfill_lsn', '_walfill_seq')",
        )
        .unwrap();
    assert_eq!(defaults, "0", "the load's defaults are removed");
    // Copied rows not changed since carry the first run's boundary or the
    // resumed run's snapshot, nothing else at sequence 0 before the latter.
    let versions = db
        .value(
            "SELECT count(DISTINCT s._walfill_lsn)::text FROM derived.orders_summary__v1 s,
                    walfill.versions v
              WHERE s._walfill_seq = 0
                AND s._walfill_lsn IN (v.boundary_lsn, v.copy_boundary_lsn)",
        )
        .unwrap();
    assert_eq!(versions, "2", "rows of both runs, each at its snapshot");
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_summary", "v1"]);
    assert_view_matches(&db, "derived.orders_summary", "orders", select, None, "id");
}

/// A column renamed between a killed straight copy and its resumption: the
/// resumed copy reads it under its new name into the planned column, and
/// the stream follows the rename.
#[test]
fn an_identity_copy_resumed_after_a_column_rename_is_exact() {
    let db = TestDb::new("resume_rename");
    create_orders(&db, 12_000);
    let select = "id, customer_id, status, total_cents, note";
    let settings = "[backfill]\nchunk_rows = 500\nmax_rows_per_second = 20000\n";
    let target = orders_target("v1")
        .replace(ORDERS_SELECT, select)
        .replace(&format!("where = \"{ORDERS_WHERE}\"\n"), "");
    let walfill = Walfill::new(&db, &format!("{settings}\n{target}"));
    walfill.ok(&["setup"]);
    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT rows_copied >= 3000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 3000 rows",
    );
    kill9(&mut run);
    db.exec(
        "ALTER TABLE orders RENAME COLUMN status TO state;
         UPDATE orders SET state = 'renamed', note = 'after' WHERE id % 50 = 0;
         INSERT INTO orders VALUES (500000, 1, 'late', 5, 'new');",
    );
    walfill.ok(&["backfill", "orders_summary"]);
    assert_view_matches(
        &db,
        "derived.orders_summary",
        "orders",
        "id, customer_id, state AS status, total_cents, note",
        None,
        "id",
    );
}
