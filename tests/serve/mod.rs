//! `walfill serve`: requests from every entry point, several workers,
//! configuration reloads, schedules, pauses, recovery and the HTTP
//! endpoints.

use std::time::{Duration, Instant};

use crate::support::cluster::archive_url;
use crate::support::service::{wait_for, wait_view_matches, Background, Service};
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{TestDb, Walfill};

mod endpoints;
mod pacing;
mod requests;
mod workers;

const VIEW: &str = "derived.orders_summary";

/// `[serve]` for tests: short leases and polls, no streaming archiver.
fn serve_section(extra: &str) -> String {
    format!(
        "[serve]\nlease_seconds = 3\npoll_seconds = 1\nretry_seconds = 1\narchiver = false\n{extra}\n"
    )
}

/// A slow copy: small chunks and a rate cap, so a test can act mid-copy.
const SLOW_COPY: &str = "[backfill]\nchunk_rows = 200\nmax_rows_per_second = 2500\n";

fn active_version(db: &TestDb) -> Option<String> {
    db.value("SELECT active_version FROM walfill.targets WHERE target = 'orders_summary'")
}

/// Orders with `rows` rows, set up and built once as v1 by the CLI.
fn built_v1(tag: &str, rows: i64, rest: &str) -> (TestDb, Walfill) {
    let db = TestDb::new(tag);
    create_orders(&db, rows);
    let walfill = Walfill::new(&db, &format!("{}\n{rest}", orders_target("v1")));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    (db, walfill)
}

/// The first sample of `name` in a scrape of `/metrics` whose labels
/// include `labels`.
fn metric(service: &Service, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (code, text) = service.get("/metrics");
    assert_eq!(code, 200, "{text}");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text");
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Counter(v) => v,
            _ => f64::NAN,
        })
}

/// Polls `path` until it answers `code`; returns the body.
fn wait_http(service: &Service, path: &str, code: u16, what: &str) -> String {
    let started = Instant::now();
    loop {
        let (got, body) = service.get(path);
        if got == code {
            return body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{what}: {path} still says {got} {body}:\n{}",
            service.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
