//! The cut-over gate: a request that builds a version and holds it back
//! (`--no-swap`), publishes it at a planned time (`--swap-at`), and
//! verifies it first (`verify_before_swap`), from the CLI, SQL and HTTP.

use std::time::Duration;

use crate::support::service::{wait_for, wait_view_matches, Service};
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{TestDb, Walfill};

const VIEW: &str = "derived.orders_summary";

fn serve_section() -> &'static str {
    "[serve]\nlease_seconds = 3\npoll_seconds = 1\nretry_seconds = 1\narchiver = false\n"
}

fn active_version(db: &TestDb) -> Option<String> {
    db.value("SELECT active_version FROM walfill.targets WHERE target = 'orders_summary'")
}

/// Orders built and published as v1, then a `walfill serve` over them.
fn served(tag: &str, http: bool, target_extra: &str) -> (TestDb, Walfill, Service) {
    let db = TestDb::new(tag);
    create_orders(&db, 3_000);
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    walfill.configure(
        &db,
        &format!("{}\n{}{target_extra}", serve_section(), orders_target("v1")),
    );
    let service = Service::start(&walfill, http, &[]);
    (db, walfill, service)
}

fn request_done(db: &TestDb, id: &str, service: &Service) -> String {
    wait_for(
        db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(120),
        "the request to be done",
        &[service],
    );
    db.value(&format!(
        "SELECT version FROM walfill.requests WHERE id = {id}"
    ))
    .expect("the request's version")
}

fn status_json(walfill: &Walfill, version: &str) -> serde_json::Value {
    let out = walfill.ok(&["status", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out).expect("status json");
    report["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .find(|v| v["version"] == version)
        .cloned()
        .unwrap_or_else(|| panic!("no version {version} in {out}"))
}

/// `walfill request --no-swap` builds the version, keeps it caught up while
/// the view stays on v1, shows it held, and `walfill swap` publishes it.
#[test]
fn a_request_with_no_swap_builds_and_holds_the_version_until_swapped() {
    let (db, walfill, mut service) = served("gate_hold", false, "");
    let writer = Writer::start(&db, 3_000, 1_000_000, 31);
    let id = walfill.ok(&["request", "orders_summary", "--no-swap"]);
    let version = request_done(&db, id.trim(), &service);
    assert_eq!(active_version(&db).as_deref(), Some("v1"));
    let held = status_json(&walfill, &version);
    assert_eq!(held["phase"], "ready", "{held}");
    assert_eq!(held["held"], true, "{held}");
    assert!(held["swap_at"].is_null(), "{held}");
    let text = walfill.ok(&["status"]);
    assert!(
        text.contains(&format!(
            "HELD: `walfill swap orders_summary {version}` publishes it"
        )),
        "{text}"
    );
    // It follows the source while held: later changes reach it.
    std::thread::sleep(Duration::from_secs(3));
    let before: i64 = status_json(&walfill, &version)["changes_applied"]
        .as_i64()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let after: i64 = status_json(&walfill, &version)["changes_applied"]
        .as_i64()
        .unwrap();
    assert!(
        after > before,
        "held version not followed: {before} -> {after}"
    );
    assert_eq!(active_version(&db).as_deref(), Some("v1"));

    walfill.ok(&["swap", "orders_summary", &version]);
    assert_eq!(active_version(&db).as_deref(), Some(version.as_str()));
    assert_eq!(status_json(&walfill, &version)["held"], false);
    assert!(writer.stop() > 10);
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&service],
    );
    service.stop(Duration::from_secs(30));
}

/// `--swap-at` over HTTP with `verify_before_swap`: held and shown with its
/// time until then, verified, then published by the leader at that time.
#[test]
fn a_request_with_swap_at_is_verified_and_published_at_that_time() {
    let (db, walfill, mut service) = served("gate_at", true, "");
    let writer = Writer::start(&db, 3_000, 1_000_000, 32);
    let at = db
        .value(
            "SELECT to_char((now() + interval '25 seconds') AT TIME ZONE 'UTC',
                            'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"')",
        )
        .unwrap();
    let (code, body) = service.post(&format!(
        "/targets/orders_summary/backfill?swap_at={}&verify_before_swap=true",
        at.replace('+', "%2B")
    ));
    assert_eq!(code, 202, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = reply["id"].to_string();
    let version = request_done(&db, &id, &service);
    let held = status_json(&walfill, &version);
    if active_version(&db).as_deref() == Some("v1") {
        assert_eq!(held["held"], true, "{held}");
        let planned = at.replace('T', " ").replace("+00:00", " UTC");
        assert_eq!(held["swap_at"], planned.as_str(), "{held}");
        let text = walfill.ok(&["status"]);
        assert!(
            text.contains(&format!("HELD: published at {planned}")),
            "{text}"
        );
    }
    wait_for(
        &db,
        &format!(
            "SELECT active_version = '{version}' FROM walfill.targets \
              WHERE target = 'orders_summary'"
        ),
        Duration::from_secs(120),
        "the planned swap",
        &[&service],
    );
    assert!(
        db.value(&format!("SELECT now() >= '{at}'::timestamptz")) == Some("true".into()),
        "published before its time"
    );
    assert_eq!(
        db.value(&format!(
            "SELECT count(*) FROM walfill.events WHERE kind = 'verified' AND version = '{version}'"
        )),
        Some("1".into()),
        "verified before the swap"
    );
    assert!(writer.stop() > 10);
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&service],
    );
    service.stop(Duration::from_secs(30));
}

/// The SQL form carries the gate; a planned swap of a version that differs
/// from its source (rows changed behind walfill's back) is refused, leaves
/// the view alone and says why in `status`.
#[test]
fn a_planned_swap_of_a_version_that_differs_is_refused_and_shown() {
    let (db, walfill, mut service) = served("gate_sql", false, "verify_before_swap = true\n");
    let id = db
        .value("SELECT walfill.request_backfill('orders_summary', no_swap => true)")
        .unwrap();
    let version = request_done(&db, &id, &service);
    assert_eq!(
        db.value(&format!(
            "SELECT no_swap FROM walfill.requests WHERE id = {id}"
        )),
        Some("true".into())
    );
    assert_eq!(status_json(&walfill, &version)["held"], true);
    // Damage the held version, then plan its swap for now.
    db.exec(&format!(
        "UPDATE derived.orders_summary__{version} SET status = 'WRONG' WHERE id = 7;
         UPDATE walfill.versions SET swap_at = now() WHERE version = '{version}'"
    ));
    wait_for(
        &db,
        &format!("SELECT swap_error IS NOT NULL FROM walfill.versions WHERE version = '{version}'"),
        Duration::from_secs(120),
        "the planned swap to fail",
        &[&service],
    );
    assert_eq!(active_version(&db).as_deref(), Some("v1"));
    let text = walfill.ok(&["status"]);
    assert!(
        text.contains("the planned swap failed") && text.contains("differs from its source"),
        "{text}"
    );
    service.stop(Duration::from_secs(30));
}

/// A `--swap-at` without an offset is refused with the form it wants
/// (exit 2), and so is a gate on a scoped refresh.
#[test]
fn a_bad_swap_at_is_refused() {
    let db = TestDb::new("gate_bad");
    create_orders(&db, 10);
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["request", "orders_summary", "--swap-at", "2026-12-08 02:00"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("RFC 3339") && log.contains("+01:00"), "{log}");
    let out = walfill.run(&[
        "request",
        "orders_summary",
        "--where",
        "id < 5",
        "--no-swap",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.requests"),
        Some("0".into())
    );
}

/// A configured version rebuilt under another name (a request's
/// `VERSION_rID`) and then retired is not reported `unbuilt` (whose advice
/// would fail), neither by `status` nor by `/metrics`, and its dead letters
/// went with it.
#[test]
fn a_configured_version_rebuilt_under_another_name_is_not_unbuilt() {
    let (db, walfill, mut service) = served("gate_unbuilt", true, "");
    let id = walfill.ok(&["request", "orders_summary"]);
    let version = request_done(&db, id.trim(), &service);
    assert_eq!(active_version(&db).as_deref(), Some(version.as_str()));
    db.exec(
        "INSERT INTO walfill.dead_letters (target, version, key, key_columns, lsn, seq, error)
         VALUES ('orders_summary', 'v1', '{1}', '{id}', '0/1', 0, 'old')",
    );
    walfill.ok(&["retire", "orders_summary", "v1"]);
    let text = walfill.ok(&["status"]);
    assert!(
        !text.contains("unbuilt") && !text.contains("dead letter"),
        "{text}"
    );
    let (_, metrics) = service.get("/metrics");
    assert!(!metrics.contains("phase=\"unbuilt\""), "{metrics}");
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters"),
        Some("0".into())
    );
    service.stop(Duration::from_secs(30));
}

/// A request claimed again after a failed attempt does not show that old
/// error while the new attempt runs.
#[test]
fn a_running_attempt_shows_no_old_error() {
    let db = TestDb::new("gate_old_error");
    create_orders(&db, 6_000);
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    walfill.configure(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 200\nmax_rows_per_second = 1500\n{}\n{}",
            serve_section(),
            orders_target("v1")
        ),
    );
    db.exec(
        "INSERT INTO walfill.requests (target, origin, attempts, last_error)
         VALUES ('orders_summary', 'sql', 1, 'an error of the attempt before')",
    );
    let mut service = Service::start(&walfill, false, &[]);
    wait_for(
        &db,
        "SELECT state = 'running' FROM walfill.requests",
        Duration::from_secs(60),
        "the request to run",
        &[&service],
    );
    assert_eq!(
        db.value("SELECT last_error IS NULL FROM walfill.requests"),
        Some("true".into())
    );
    let status = walfill.ok(&["status"]);
    assert!(
        !status.contains("an error of the attempt before"),
        "{status}"
    );
    service.stop(Duration::from_secs(30));
}
