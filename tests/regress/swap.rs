//! Publishing versions: the swap's lock timeout (defect 12) and versions
//! published while far behind (defect 14).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{field, stderr, target};
use crate::support::{assert_view_matches, TestDb, Walfill};

const V1: &str = "id, n, 'v1' AS ver";
const V2: &str = "id, n, 'v2' AS ver";

/// Defect 12, configuration. `swap_lock_timeout_ms = 0` means "wait
/// forever" to PostgreSQL: loading the configuration must reject it (exit
/// code 2, naming the key).
#[test]
fn r12_swap_lock_timeout_zero_is_rejected() {
    let db = TestDb::new("r12c");
    db.exec("CREATE TABLE items (id int PRIMARY KEY, n int)");
    let walfill = Walfill::new(&db, &target("summary", "items", V1, None, "v1"));
    walfill.ok(&["setup"]);
    walfill.configure(
        &db,
        &format!(
            "[backfill]\nswap_lock_timeout_ms = 0\n\n{}",
            target("summary", "items", V1, None, "v1")
        ),
    );
    let out = walfill.run(&["status"]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "swap_lock_timeout_ms = 0 was accepted (exit {}):\n{err}",
        out.status
    );
    assert!(err.contains("swap_lock_timeout_ms"), "{err}");
}

/// Defect 12, readers. A reader holds a transaction open on the view, which
/// blocks a swap; a second reader's `SELECT count(*)` from the view during
/// the swap attempt must be answered within 3 s (it may queue behind the
/// swap's lock request for at most the swap's lock timeout), with
/// `swap_lock_timeout_ms = 300` and with the value 0 (which must be
/// rejected, or else it makes readers queue forever).
#[test]
fn r12_readers_never_queue_behind_a_blocked_swap() {
    let mut problems = Vec::new();
    for timeout in [300, 0] {
        let db = TestDb::new("r12r");
        db.exec(
            "CREATE TABLE items (id int PRIMARY KEY, n int);
             INSERT INTO items SELECT g, g FROM generate_series(1, 1000) g;",
        );
        let walfill = Walfill::new(&db, &target("summary", "items", V1, None, "v1"));
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "summary"]);
        walfill.configure(&db, &target("summary", "items", V2, None, "v2"));
        walfill.ok(&["backfill", "summary", "--no-swap"]);
        walfill.configure(
            &db,
            &format!(
                "[backfill]\nswap_lock_timeout_ms = {timeout}\n\n{}",
                target("summary", "items", V2, None, "v2")
            ),
        );

        let mut holder = db.client();
        holder
            .batch_execute("BEGIN; SELECT count(*) FROM public.summary")
            .expect("the long reader");
        let mut swap = walfill.spawn(&["swap", "summary", "v2"]);
        std::thread::sleep(Duration::from_millis(500));
        let (tx, rx) = mpsc::channel();
        let url = db.url();
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut client = crate::support::cluster::connect(&url);
            let result = client
                .query_one("SELECT count(*) FROM public.summary", &[])
                .map(|r| r.get::<_, i64>(0))
                .map_err(|e| e.to_string());
            let _ = tx.send((result, started.elapsed()));
        });
        match rx.recv_timeout(Duration::from_secs(3)) {
            Ok((Ok(_), _)) => {}
            Ok((Err(e), took)) => problems.push(format!(
                "swap_lock_timeout_ms = {timeout}: the second reader failed after {took:?}: {e}"
            )),
            Err(_) => problems.push(format!(
                "swap_lock_timeout_ms = {timeout}: the second reader got no answer within 3 s \
                 (it queued behind the blocked swap)"
            )),
        }
        // Let go: the long reader ends, the swap finishes (or is stopped).
        holder.batch_execute("COMMIT").expect("end the long reader");
        let started = Instant::now();
        while swap.try_wait().expect("wait").is_none()
            && started.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = swap.kill();
        let _ = swap.wait();
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `out` either published a version the view now shows exactly (`select`
/// over the source), or refused saying how far behind it is. Returns
/// whether it published.
fn published_exactly_or_refused(
    db: &TestDb,
    out: &std::process::Output,
    select: &str,
    what: &str,
) -> bool {
    if out.status.success() {
        eprintln!("{what} exited 0: the view must now equal the source");
        assert_view_matches(db, "public.summary", "items", select, None, "id");
        true
    } else {
        let err = stderr(out);
        assert!(
            err.contains("behind"),
            "{what} failed without saying how far behind the version is:\n{err}"
        );
        false
    }
}

/// Defect 14. v1 active, v2 built with `--no-swap`; then more than
/// `swap_max_lag_bytes` (64 kB here) of WAL is written with no sync
/// running. `walfill swap` exits 0 only if the view then equals the source
/// (it catches the version up first), or fails saying how far behind it
/// is. The same for `walfill rollback` to v1, left behind in turn.
#[test]
fn r14_swap_and_rollback_never_publish_a_version_far_behind() {
    let db = TestDb::new("r14");
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, n int, pad text);
         INSERT INTO items SELECT g, g, 'p' FROM generate_series(1, 1000) g;",
    );
    let settings = "[backfill]\nswap_max_lag_bytes = 65536\n";
    let config = |select: &str, version: &str| {
        format!(
            "{settings}\n{}",
            target("summary", "items", select, None, version)
        )
    };
    let walfill = Walfill::new(&db, &config(V1, "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "summary"]);
    walfill.configure(&db, &config(V2, "v2"));
    walfill.ok(&["backfill", "summary", "--no-swap"]);
    assert_eq!(field(&db, "summary", "v2", "phase"), "ready");

    let before = super::current_lsn(&db);
    db.exec(
        "INSERT INTO items SELECT g, g, repeat('x', 200) FROM generate_series(1001, 11000) g;
         UPDATE items SET n = n + 1 WHERE id % 2 = 0;",
    );
    let written = db
        .value(&format!("SELECT pg_current_wal_lsn() - '{before}'::pg_lsn"))
        .unwrap();
    assert!(
        written.parse::<f64>().unwrap() > 1_000_000.0,
        "only {written} bytes of WAL written"
    );

    let out = walfill.run(&["swap", "summary", "v2"]);
    if !published_exactly_or_refused(&db, &out, V2, "swap") {
        walfill.ok(&["sync", "--once"]);
        walfill.ok(&["swap", "summary", "v2"]);
        assert_view_matches(&db, "public.summary", "items", V2, None, "id");
    }

    // v1, the previous version, is now far behind in turn.
    db.exec(
        "UPDATE items SET pad = repeat('y', 200), n = n + 1;
         DELETE FROM items WHERE id % 7 = 0;",
    );
    let out = walfill.run(&["rollback", "summary"]);
    published_exactly_or_refused(&db, &out, V1, "rollback");
}

/// Defect 14, rollback alone. v1 then v2 built and swapped, both caught
/// up; then more than `swap_max_lag_bytes` of WAL is written with no sync
/// running: `walfill rollback` exits 0 only if the view then equals the
/// source (v1 caught up first), or fails saying how far behind v1 is.
#[test]
fn r14_rollback_never_publishes_a_previous_version_far_behind() {
    let db = TestDb::new("r14r");
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, n int, pad text);
         INSERT INTO items SELECT g, g, 'p' FROM generate_series(1, 1000) g;",
    );
    let settings = "[backfill]\nswap_max_lag_bytes = 65536\n";
    let config = |select: &str, version: &str| {
        format!(
            "{settings}\n{}",
            target("summary", "items", select, None, version)
        )
    };
    let walfill = Walfill::new(&db, &config(V1, "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "summary"]);
    walfill.configure(&db, &config(V2, "v2"));
    walfill.ok(&["backfill", "summary"]);
    assert_eq!(field(&db, "summary", "v1", "phase"), "previous");
    db.exec(
        "INSERT INTO items SELECT g, g, repeat('x', 200) FROM generate_series(1001, 11000) g;
         UPDATE items SET n = n + 1 WHERE id % 2 = 0;
         DELETE FROM items WHERE id % 7 = 0;",
    );
    let out = walfill.run(&["rollback", "summary"]);
    published_exactly_or_refused(&db, &out, V1, "rollback");
}
