//! Snapshot backfill end to end: copy, live catch-up, swap.

use std::time::Duration;

use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches, TestDb, Walfill};

/// Writes during the copy (inserts, updates, deletes, key changes): after the
/// swap the view equals the transform of the source table.
#[test]
fn writes_during_the_copy_end_up_in_the_view() {
    let db = TestDb::new("writes");
    create_orders(&db, 30_000);
    let settings = "[backfill]\nchunk_rows = 1000\nmax_rows_per_second = 15000\n";
    let walfill = Walfill::new(&db, &format!("{settings}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);

    let writer = Writer::start(&db, 30_000, 1_000_000, 7);
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    // Keep writing until the copy is well under way, then a bit longer.
    db.wait_for(
        "SELECT rows_copied > 10000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 10000 rows",
    );
    std::thread::sleep(Duration::from_millis(500));
    let ops = writer.stop();
    assert!(ops > 100, "the writer only managed {ops} statements");
    walfill.wait_ok(backfill, Duration::from_secs(120));

    assert_eq!(
        db.value("SELECT phase FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("active")
    );
    // The writer stopped during the copy, so catching up applied everything.
    assert_view_matches(
        &db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );

    // Live changes after the swap reach the view through sync.
    db.exec(
        "UPDATE orders SET status = 'late' WHERE id % 1000 = 1;
         DELETE FROM orders WHERE id % 1000 = 2;
         INSERT INTO orders VALUES (5000000, 1, 'fresh', 1, NULL);",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(
        &db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );

    let status = walfill.ok(&["status", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&status).expect("status --json is JSON");
    assert_eq!(report["versions"][0]["phase"], "active");
    let copied = report["versions"][0]["rows_copied"].as_i64().unwrap();
    assert!(copied > 25_000, "status reports {copied} rows copied");
}
