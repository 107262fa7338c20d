//! What operators do around versions: TRUNCATE while a copy runs and on the
//! stream, tables keyed by a chosen unique index, a swap blocked by a
//! reader (retried, killed), retire, teardown and catalog.

use std::time::Duration;

use crate::support::{assert_view_matches, TestDb, Walfill};

fn target(name: &str, source: &str, select: &str, version: &str) -> String {
    format!(
        "[[target]]\nname = \"{name}\"\nsource = \"{source}\"\nselect = \"{select}\"\n\
         version = \"{version}\"\n"
    )
}

fn phase(db: &TestDb, version: &str) -> String {
    db.value(&format!(
        "SELECT phase FROM walfill.versions WHERE version = '{version}'"
    ))
    .unwrap_or_default()
}

/// A TRUNCATE issued while the copy runs waits for the copy's lock and
/// reaches the version through the stream; one on the live stream later
/// empties the view, and rows written after it come through.
#[test]
fn truncate_during_the_copy_and_on_the_stream() {
    let db = TestDb::new("ops_trunc");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3000) g;",
    );
    let settings = "[backfill]\nchunk_rows = 200\nmax_rows_per_second = 3000\n";
    let walfill = Walfill::new(
        &db,
        &format!("{settings}\n{}", target("tv", "t", "id, v", "v1")),
    );
    walfill.ok(&["setup"]);
    let run = walfill.spawn(&["backfill", "tv"]);
    db.wait_for(
        "SELECT coalesce((SELECT rows_copied > 0 FROM walfill.versions), false)",
        Duration::from_secs(60),
        "the copy to start",
    );
    // Blocks until the copy ends (it holds ACCESS SHARE), then commits.
    db.exec("TRUNCATE t; INSERT INTO t SELECT g, 'after ' || g FROM generate_series(1, 50) g");
    walfill.wait_ok(run, Duration::from_secs(120));
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.tv", "t", "id, v", None, "id");
    assert_eq!(
        db.value("SELECT count(*) FROM public.tv").as_deref(),
        Some("50")
    );

    db.exec("INSERT INTO t VALUES (9000, 'x'); TRUNCATE t; INSERT INTO t VALUES (1, 'last')");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.tv", "t", "id, v", None, "id");
}

/// A table whose row identity is a chosen unique index over two columns
/// (REPLICA IDENTITY USING INDEX), then FULL: key changes, deletes and
/// updates reach the version through backfill and sync.
#[test]
fn replica_identity_using_index_and_full_with_a_two_column_key() {
    let db = TestDb::new("ops_ident");
    db.exec(
        "CREATE TABLE u (tenant text NOT NULL, n int NOT NULL, body text, serial int);
         CREATE UNIQUE INDEX u_key ON u (tenant, n);
         ALTER TABLE u REPLICA IDENTITY USING INDEX u_key;
         INSERT INTO u SELECT 't' || (g % 3), g, repeat('b', g % 50), g FROM generate_series(1, 600) g;",
    );
    let select = "tenant, n, upper(body) AS body";
    let walfill = Walfill::new(&db, &target("uv", "u", select, "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "uv"]);
    assert_eq!(
        db.value("SELECT key_columns::text FROM walfill.versions")
            .as_deref(),
        Some("{tenant,n}")
    );
    db.exec(
        "UPDATE u SET body = 'changed' WHERE n % 7 = 0;
         UPDATE u SET n = n + 10000 WHERE n % 11 = 0;
         DELETE FROM u WHERE n % 13 = 0;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.uv", "u", select, None, "tenant, n");
    db.exec(
        "ALTER TABLE u REPLICA IDENTITY FULL;
         UPDATE u SET tenant = 'moved' WHERE n % 17 = 0;
         DELETE FROM u WHERE n % 19 = 0;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.uv", "u", select, None, "tenant, n");
}

/// A reader holding the view makes the swap fail after its retries; the
/// version stays ready and the view unchanged. A swap killed while it waits
/// changes nothing either. Once the reader is gone, the swap goes through,
/// and rollback brings the first version back.
#[test]
fn a_swap_blocked_by_a_reader_fails_cleanly_then_retry_and_rollback() {
    let db = TestDb::new("ops_swap");
    db.exec(
        "CREATE TABLE s (id int PRIMARY KEY, n int);
         INSERT INTO s SELECT g, g FROM generate_series(1, 300) g;",
    );
    // Hardly any lag allowed at a swap: the rollback below catches v1 up
    // itself (nothing follows it meanwhile), however little WAL other
    // tests write meanwhile (the 100-row update alone is more).
    let settings = "[backfill]\nswap_lock_timeout_ms = 50\nswap_max_lag_bytes = 2048\n";
    let v1 = "id, n, 'v1' AS ver";
    let v2 = "id, n, 'v2' AS ver";
    let walfill = Walfill::new(&db, &format!("{settings}\n{}", target("sv", "s", v1, "v1")));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "sv"]);
    walfill.configure(&db, &format!("{settings}\n{}", target("sv", "s", v2, "v2")));
    walfill.ok(&["backfill", "sv", "--no-swap"]);

    let mut reader = db.client();
    reader
        .batch_execute("BEGIN; SELECT count(*) FROM public.sv")
        .expect("a reader holding the view");
    let out = walfill.run(&["swap", "sv", "v2"]);
    assert!(!out.status.success(), "the swap got through a held view");
    assert_eq!(phase(&db, "v2"), "ready");
    assert_eq!(phase(&db, "v1"), "active");

    let mut waiting = walfill.spawn(&["swap", "sv", "v2"]);
    std::thread::sleep(Duration::from_millis(400));
    waiting.kill().expect("kill -9 the waiting swap");
    let _ = waiting.wait();
    assert_eq!(phase(&db, "v2"), "ready");
    reader.batch_execute("COMMIT").expect("the reader ends");
    assert_eq!(
        db.value("SELECT DISTINCT ver FROM public.sv").as_deref(),
        Some("v1")
    );

    walfill.ok(&["swap", "sv", "v2"]);
    assert_eq!(
        db.value("SELECT DISTINCT ver FROM public.sv").as_deref(),
        Some("v2")
    );
    db.exec("UPDATE s SET n = -n WHERE id % 3 = 0");
    walfill.ok(&["rollback", "sv"]);
    assert_eq!(phase(&db, "v1"), "active");
    assert_view_matches(&db, "public.sv", "s", v1, None, "id");
}

/// retire drops a version's slot and table; teardown removes the catalog
/// journal; catalog describes the source's tables.
#[test]
fn retire_teardown_and_catalog() {
    let db = TestDb::new("ops_life");
    db.exec(
        "CREATE TABLE r (id int PRIMARY KEY, n int);
         INSERT INTO r SELECT g, g FROM generate_series(1, 100) g;",
    );
    let archive = format!(
        "[archive]\nurl = \"{}\"\n",
        crate::support::cluster::archive_url()
    );
    let walfill = Walfill::new(
        &db,
        &format!("{archive}\n{}", target("rv", "r", "id, n", "v1")),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "rv", "--path", "snapshot"]);
    walfill.configure(
        &db,
        &format!("{archive}\n{}", target("rv", "r", "id, n * 2 AS n", "v2")),
    );
    walfill.ok(&["backfill", "rv", "--path", "snapshot"]);
    let slot = db
        .value("SELECT slot_name FROM walfill.versions WHERE version = 'v1'")
        .unwrap();

    let refused = walfill.run(&["retire", "rv", "v2"]);
    assert!(!refused.status.success(), "the active version was retired");
    walfill.ok(&["retire", "rv", "v1"]);
    assert_eq!(phase(&db, "v1"), "retired");
    assert_eq!(
        db.value(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ))
        .as_deref(),
        Some("0")
    );
    assert_eq!(db.value("SELECT to_regclass('public.rv__v1')::text"), None);
    assert_eq!(
        db.value("SELECT previous_version FROM walfill.targets WHERE target = 'rv'"),
        None
    );
    let again = walfill.ok(&["retire", "rv", "v1"]);
    assert!(again.contains("retired"), "{again}");

    let catalog = walfill.ok(&["catalog"]);
    let parsed: serde_json::Value = serde_json::from_str(&catalog).expect("catalog JSON");
    assert!(
        parsed["relations"]
            .as_array()
            .is_some_and(|r| r.iter().any(|t| t["name"] == "r")),
        "{catalog}"
    );

    assert_eq!(
        db.value("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'walfill%'")
            .as_deref(),
        Some("2")
    );
    walfill.ok(&["teardown"]);
    assert_eq!(
        db.value("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'walfill%'")
            .as_deref(),
        Some("0")
    );
    // Built versions keep working without it.
    db.exec("UPDATE r SET n = 0 WHERE id < 10");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.rv", "r", "id, n * 2 AS n", None, "id");
}

/// The state schema takes only the phases and paths walfill knows (every
/// `Phase` and `Path`, as walfill names them), and `walfill setup` adds the
/// checks to a state schema made before them.
#[test]
fn the_state_schema_takes_only_known_phases_and_paths() {
    use walfill::control::state::{Path, Phase};
    let db = TestDb::new("ops_phases");
    db.exec("CREATE TABLE p (id int PRIMARY KEY, n int); INSERT INTO p VALUES (1, 1);");
    let walfill = Walfill::new(&db, &target("pv", "p", "id, n", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "pv", "--path", "snapshot"]);
    let set = |column: &str, value: &str| {
        db.client().batch_execute(&format!(
            "BEGIN; UPDATE walfill.versions SET {column} = '{value}' WHERE target = 'pv';
             ROLLBACK;"
        ))
    };
    let phases = [
        Phase::Planned,
        Phase::Copying,
        Phase::Replaying,
        Phase::CatchingUp,
        Phase::Ready,
        Phase::Active,
        Phase::Previous,
        Phase::Retired,
    ];
    for phase in phases {
        set("phase", phase.as_str()).unwrap_or_else(|e| panic!("{phase:?}: {e}"));
    }
    for path in [Path::Snapshot, Path::Replay] {
        set("path", path.as_str()).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    }
    let refused = |column: &str, value: &str| {
        let e = set(column, value).expect_err("an unknown value was stored");
        assert_eq!(
            e.code(),
            Some(&postgres::error::SqlState::CHECK_VIOLATION),
            "{e}"
        );
    };
    refused("phase", "swapping");
    refused("path", "refresh");

    // A state schema from before the checks: setup adds them.
    db.exec(
        "ALTER TABLE walfill.versions DROP CONSTRAINT versions_phase_check;
         ALTER TABLE walfill.versions DROP CONSTRAINT versions_path_check;",
    );
    set("phase", "swapping").expect("no check any more");
    walfill.ok(&["setup"]);
    refused("phase", "swapping");
    refused("path", "refresh");
    assert_eq!(phase(&db, "v1"), "active");
}

/// A version whose table nobody writes still confirms its slot while the
/// rest of the database is busy: the server's keepalives about WAL that is
/// not ours must not keep the stream from noticing it is idle, or the slot
/// would hold back all of that WAL for as long as the writes go on (and
/// `sync` would not see a stop request).
#[test]
fn a_quiet_tables_slot_keeps_up_while_other_tables_are_busy() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let db = TestDb::new("ops_quiet");
    db.exec(
        "CREATE TABLE quiet (id int PRIMARY KEY, v text);
         INSERT INTO quiet SELECT g, 'v' || g FROM generate_series(1, 100) g;
         CREATE TABLE busy (id bigserial PRIMARY KEY, v text);",
    );
    let walfill = Walfill::new(&db, &target("quiet_t", "public.quiet", "id, v", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "quiet_t"]);
    let sync = crate::support::service::Background::start(&walfill, &["sync"]);

    // Small commits, one after another: the server has new WAL to read
    // (and a keepalive to send) many times a second.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_failure = StopOnDrop(stop.clone());
    let writer = {
        let stop = stop.clone();
        let mut client = db.client();
        std::thread::spawn(move || {
            let mut commits = 0u64;
            while !stop.load(Ordering::Relaxed) {
                client
                    .batch_execute("INSERT INTO busy (v) SELECT repeat('x', 200)")
                    .expect("insert into busy");
                commits += 1;
            }
            commits
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let mark = db.value("SELECT pg_current_wal_lsn()::text").unwrap();
    db.wait_for(
        &format!(
            "SELECT confirmed_flush_lsn >= '{mark}'::pg_lsn FROM pg_replication_slots
              WHERE slot_name = (SELECT slot_name FROM walfill.versions WHERE version = 'v1')"
        ),
        Duration::from_secs(20),
        "the quiet table's slot to be confirmed past the busy table's writes",
    );
    // `sync` stops on SIGTERM while the writes go on (dropping it waits).
    drop(sync);
    assert!(
        !writer.is_finished(),
        "the writes must still be going on when the slot moves and sync stops"
    );
    stop.store(true, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 100);
}
