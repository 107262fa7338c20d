//! The chunked snapshot copy: each chunk in a short transaction of its own,
//! reconciled with the stream by what each chunk's snapshot could see.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::failover::Failover;
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches, TestDb, Walfill};

mod ranges;
mod resume;
mod visibility;

const CHUNKED: &str = "[backfill]\nsnapshot = \"chunked\"\nchunk_rows = 1000\n";

/// Samples, every 100 ms until stopped, the age of the oldest open
/// transaction of any other client session of `db`; returns the largest.
struct OldestXact {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<f64>,
}

impl OldestXact {
    fn start(db: &TestDb) -> OldestXact {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut client = db.client();
        let handle = std::thread::spawn(move || {
            let mut oldest = 0f64;
            while !flag.load(Ordering::Relaxed) {
                let age: f64 = client
                    .query_one(
                        "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0)::float8
                           FROM pg_stat_activity
                          WHERE datname = current_database() AND backend_type = 'client backend'
                            AND pid <> pg_backend_pid() AND application_name LIKE 'walfill%'",
                        &[],
                    )
                    .expect("sampling transactions")
                    .get(0);
                oldest = oldest.max(age);
                std::thread::sleep(Duration::from_millis(100));
            }
            oldest
        });
        OldestXact { stop, handle }
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("sampler")
    }
}

/// The one number `sql` returns.
fn number(db: &TestDb, sql: &str) -> i64 {
    db.value(sql)
        .unwrap_or_else(|| panic!("{sql} returned NULL"))
        .parse()
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The view equals the transform of the source, row by row.
fn assert_orders_exact(db: &TestDb) {
    assert_view_matches(
        db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
}

fn wait_child(mut child: std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            panic!("walfill did not finish in {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` contains `text`.
fn wait_log(path: &Path, text: &str, timeout: Duration) -> String {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(text) {
            return log;
        }
        assert!(
            started.elapsed() < timeout,
            "no {text:?} in walfill's log after {timeout:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
