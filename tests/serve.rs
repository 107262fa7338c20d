//! `walfill serve`: requests from every entry point, several workers,
//! configuration reloads, schedules, pauses, recovery and the HTTP
//! endpoints.

use std::time::{Duration, Instant};

use crate::support::cluster::archive_url;
use crate::support::service::{wait_for, wait_view_matches, Background, Service};
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{TestDb, Walfill};

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

#[test]
fn a_killed_workers_backfill_is_finished_by_another() {
    let (db, walfill) = built_v1("sv_kill", 20_000, "");
    walfill.configure(
        &db,
        &format!(
            "{SLOW_COPY}\n{}\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    let mut first = Service::start(&walfill, false, &[]);
    let mut second = Service::start(&walfill, false, &[]);
    let writer = Writer::start(&db, 20_000, 1_000_000, 11);

    let id = db
        .value("SELECT walfill.request_backfill('orders_summary')")
        .expect("a request id");
    let version = format!("v1_r{id}");
    wait_for(
        &db,
        &format!("SELECT rows_copied >= 2000 FROM walfill.versions WHERE version = '{version}'"),
        Duration::from_secs(60),
        "the copy to be under way",
        &[&first, &second],
    );
    let worker = db
        .value(&format!(
            "SELECT worker FROM walfill.requests WHERE id = {id}"
        ))
        .expect("the request's worker");
    let copier_pid: u32 = worker.split(':').nth(1).unwrap().parse().unwrap();
    let (copier, other) = if copier_pid == first.pid() {
        (&mut first, &mut second)
    } else {
        assert_eq!(copier_pid, second.pid(), "worker {worker}");
        (&mut second, &mut first)
    };
    copier.kill9();

    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(120),
        "the other worker to finish the request",
        &[other],
    );
    let (attempts, last_worker): (i32, String) = {
        let row = db
            .client()
            .query_one(
                "SELECT attempts, worker FROM walfill.requests WHERE id = $1",
                &[&id.parse::<i64>().unwrap()],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(attempts, 2, "claimed once by each worker");
    assert_ne!(last_worker, worker, "finished by the other worker");
    assert_eq!(active_version(&db).as_deref(), Some(version.as_str()));
    assert!(writer.stop() > 20);
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[other],
    );
    other.stop(Duration::from_secs(30));
}

#[test]
fn a_version_change_and_sighup_build_and_swap_the_new_version() {
    let (db, walfill) = built_v1("sv_hup", 5_000, "");
    let serve = serve_section("");
    walfill.configure(&db, &format!("{serve}\n{}", orders_target("v1")));
    let mut service = Service::start(
        &walfill,
        false,
        &[("RUST_LOG", "info,walfill::apply=debug")],
    );
    let writer = Writer::start(&db, 5_000, 1_000_000, 12);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        active_version(&db).as_deref(),
        Some("v1"),
        "nothing to build yet"
    );

    let select = "id, status, total_cents * 2 AS double_cents";
    let v2 = orders_target("v2").replace(ORDERS_SELECT, select);
    walfill.configure(&db, &format!("{serve}\n{v2}"));
    service.signal("HUP");
    wait_for(
        &db,
        "SELECT active_version = 'v2' FROM walfill.targets WHERE target = 'orders_summary'",
        Duration::from_secs(120),
        "v2 to be built and swapped in",
        &[&service],
    );
    let log = service.log();
    assert!(log.contains("configuration reloaded"));
    // Spans: the job's, and one per chunk stored inside it.
    assert!(
        log.lines()
            .any(|l| l.contains("job{request=") && l.contains("batch{of=copy n=1")),
        "{log}"
    );
    assert_eq!(
        db.value("SELECT phase FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("previous"),
        "v1 is kept for rollback"
    );
    assert_eq!(
        db.value("SELECT origin FROM walfill.requests WHERE version = 'v2'")
            .as_deref(),
        Some("config")
    );
    assert!(writer.stop() > 10);
    wait_view_matches(&db, VIEW, "orders", select, Some(ORDERS_WHERE), &[&service]);
    service.stop(Duration::from_secs(30));
}

/// Sets the services' clock.
fn set_clock(path: &std::path::Path, at: &str) {
    std::fs::write(path, at).unwrap();
}

#[test]
fn a_schedule_runs_once_per_due_time_and_a_missed_one_once_after_a_restart() {
    let (db, walfill) = built_v1("sv_cron", 2_000, "");
    let target = orders_target("v1").replace(
        "version = \"v1\"",
        "version = \"v1\"\nschedule = \"0 3 * * *\"",
    );
    walfill.configure(
        &db,
        &format!("{}\n{target}", serve_section("timezone = \"UTC\"")),
    );
    let clock = std::env::temp_dir().join(format!("walfill-clock-{}", std::process::id()));
    let clock_env = clock.to_str().unwrap().to_string();
    let env = [("WALFILL_CLOCK_FILE", clock_env.as_str())];
    set_clock(&clock, "2026-12-01T02:30:00Z");
    let mut service = Service::start(&walfill, false, &env);
    let scheduled = "SELECT count(*) FROM walfill.requests WHERE origin = 'schedule'";
    wait_for(
        &db,
        "SELECT EXISTS (SELECT 1 FROM walfill.schedules WHERE target = 'orders_summary')",
        Duration::from_secs(30),
        "the schedule to be seen",
        &[&service],
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(db.value(scheduled).as_deref(), Some("0"), "not due yet");

    let writer = Writer::start(&db, 2_000, 1_000_000, 13);
    for (n, (now, version)) in [
        ("2026-12-01T03:00:10Z", "v1_s202612010300"),
        ("2026-12-02T03:20:00Z", "v1_s202612020300"),
        ("2026-12-03T03:00:00Z", "v1_s202612030300"),
    ]
    .into_iter()
    .enumerate()
    {
        set_clock(&clock, now);
        wait_for(
            &db,
            &format!(
                "SELECT active_version = '{version}' FROM walfill.targets
                  WHERE target = 'orders_summary'"
            ),
            Duration::from_secs(90),
            &format!("the run due before {now}"),
            &[&service],
        );
        // The clock stays: several more looks start nothing more.
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(db.value(scheduled), Some((n + 1).to_string()), "at {now}");
    }
    service.stop(Duration::from_secs(30));

    // Down over two due times: one run at start, for the latest.
    set_clock(&clock, "2026-12-05T04:00:00Z");
    let mut service = Service::start(&walfill, false, &env);
    wait_for(
        &db,
        "SELECT active_version = 'v1_s202612050300' FROM walfill.targets
          WHERE target = 'orders_summary'",
        Duration::from_secs(90),
        "the missed run",
        &[&service],
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(db.value(scheduled).as_deref(), Some("4"));
    assert_eq!(
        db.value(
            "SELECT string_agg(to_char(due_at AT TIME ZONE 'UTC', 'MM-DD HH24:MI'), ',' ORDER BY due_at)
               FROM walfill.requests WHERE origin = 'schedule'"
        )
        .as_deref(),
        Some("12-01 03:00,12-02 03:00,12-03 03:00,12-05 03:00")
    );
    // `status` gives the next due time and the last scheduled run.
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains("schedule: orders_summary \"0 3 * * *\" (UTC): next due 20")
            && status.contains("last run due 2026-12-05 03:00:00 UTC: done (v1_s202612050300)"),
        "{status}"
    );
    // keep_versions = 1: the one before the active version is kept, the
    // older ones retired with their slots.
    wait_for(
        &db,
        "SELECT count(*) FILTER (WHERE phase = 'retired') = 3
            AND count(*) FILTER (WHERE phase = 'previous') = 1
           FROM walfill.versions",
        Duration::from_secs(60),
        "old versions to be retired",
        &[&service],
    );
    // Retiring versions the sync follows is routine, not a killed process.
    let log = service.log();
    assert!(!log.contains("a killed walfill"), "{log}");
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
    let _ = std::fs::remove_file(&clock);
}

/// Sessions of `db` (client backends other than this check's) inside a
/// transaction.
fn open_transactions(db: &TestDb) -> i64 {
    db.value(&format!(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = '{}' AND backend_type = 'client backend'
            AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
            AND now() - xact_start > interval '200 milliseconds'",
        db.name
    ))
    .unwrap()
    .parse()
    .unwrap()
}

#[test]
fn pause_holds_within_a_second_and_resume_continues() {
    let (db, walfill) = built_v1("sv_pause", 20_000, "");
    walfill.configure(
        &db,
        &format!(
            "{SLOW_COPY}\n{}\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    let mut service = Service::start(&walfill, true, &[]);
    let (code, body) = service.post("/targets/orders_summary/backfill");
    assert_eq!(code, 202, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_i64()
        .unwrap();
    let version = format!("v1_r{id}");
    let rows = format!("SELECT rows_copied FROM walfill.versions WHERE version = '{version}'");
    wait_for(
        &db,
        &format!("SELECT ({rows}) >= 1000"),
        Duration::from_secs(60),
        "the copy to be under way",
        &[&service],
    );

    walfill.ok(&["pause", "orders_summary"]);
    std::thread::sleep(Duration::from_secs(1));
    let held = db.value(&rows).unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert_eq!(db.value(&rows).unwrap(), held, "rows moved while paused");
        assert_eq!(
            open_transactions(&db),
            0,
            "a transaction is open while paused"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, status) = service.get(&format!("/requests/{id}"));
    let request: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(request["state"], "queued", "{status}");
    let held: i64 = held.parse().unwrap();
    assert!(held < 20_000, "paused before the end ({held} rows)");
    // A fresh copy loads its table without the key index, and builds it at
    // the end (after the resumed copy here).
    let has_key = format!(
        "SELECT count(*)::text FROM pg_constraint
          WHERE conrelid = 'derived.orders_summary__{version}'::regclass AND contype = 'p'"
    );
    assert_eq!(db.value(&has_key).as_deref(), Some("0"));
    // status tells how to go on: resume, not a rerun.
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains("paused: `walfill resume orders_summary` continues it")
            && !status.contains("rerun `walfill backfill"),
        "{status}"
    );

    walfill.ok(&["resume", "orders_summary"]);
    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(120),
        "the resumed request to finish",
        &[&service],
    );
    assert_eq!(active_version(&db).as_deref(), Some(version.as_str()));
    assert_eq!(db.value(&has_key).as_deref(), Some("1"));
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

#[test]
fn a_dropped_version_table_is_rebuilt_by_replay_without_a_request() {
    let db = TestDb::new("sv_lost");
    create_orders(&db, 5_000);
    let archive = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n",
        archive_url()
    );
    let walfill = Walfill::new(
        &db,
        &format!("{archive}\n{}\n{}", serve_section(""), orders_target("v1")),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    let mut service = Service::start(&walfill, false, &[]);
    let writer = Writer::start(&db, 5_000, 1_000_000, 14);
    std::thread::sleep(Duration::from_secs(1));
    db.exec("DROP TABLE derived.orders_summary__v1 CASCADE");
    wait_for(
        &db,
        "SELECT EXISTS (SELECT 1 FROM walfill.requests WHERE origin = 'recovery' AND state = 'done')",
        Duration::from_secs(180),
        "the lost version to be rebuilt",
        &[&service],
    );
    let version = active_version(&db).unwrap();
    assert!(version.starts_with("v1_r"), "active: {version}");
    assert_eq!(
        db.value(&format!(
            "SELECT path FROM walfill.versions WHERE version = '{version}'"
        ))
        .as_deref(),
        Some("replay"),
        "rebuilt from the archive"
    );
    assert!(db
        .value("SELECT lost FROM walfill.versions WHERE version = 'v1'")
        .unwrap()
        .contains("was dropped"));
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

/// `/ready` is 200 while every built version is followed, and 503 naming
/// the version once its follower stops (a column it reads was dropped on
/// the source), while `/health`, the liveness probe, stays 200. The
/// metrics and `status` say the same; a version nobody follows (the
/// service stopped) is named by `status` once its grace is over.
#[test]
fn ready_names_a_version_that_stopped_following_and_health_stays_up() {
    let (db, walfill) = built_v1("sv_ready", 2_000, "");
    walfill.configure(
        &db,
        &format!("{}\n{}", serve_section(""), orders_target("v1")),
    );
    let mut service = Service::start(&walfill, true, &[]);
    wait_http(&service, "/ready", 200, "the service to follow v1");
    let v1 = [("target", "orders_summary"), ("version", "v1")];
    assert_eq!(
        metric(&service, "walfill_version_following", &v1),
        Some(1.0)
    );
    assert_eq!(metric(&service, "walfill_ready", &[]), Some(1.0));
    let built = metric(
        &service,
        "walfill_last_successful_build_timestamp",
        &[("target", "orders_summary")],
    )
    .expect("the time v1 was built");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 600.0..=now + 5.0).contains(&built),
        "{built} vs {now}"
    );

    // The version reads `note`: dropped on the source, its follower stops.
    db.exec("ALTER TABLE orders DROP COLUMN note; UPDATE orders SET status = 'x' WHERE id = 1");
    let body = wait_http(&service, "/ready", 503, "the stopped follower to show");
    assert!(
        body.contains("orders_summary version v1") && body.contains("follower failed"),
        "{body}"
    );
    let (code, body) = service.get("/health");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        metric(&service, "walfill_version_following", &v1),
        Some(0.0)
    );
    assert_eq!(metric(&service, "walfill_version_error", &v1), Some(1.0));
    assert_eq!(metric(&service, "walfill_ready", &[]), Some(0.0));
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains("NOT FOLLOWED: its follower failed"),
        "{status}"
    );
    assert!(
        status.contains("not ready: orders_summary version v1"),
        "{status}"
    );
    service.stop(Duration::from_secs(30));

    // Nobody follows a version whose state has not moved for a minute.
    let (db2, walfill2) = built_v1("sv_unfollowed", 100, "");
    let status = walfill2.ok(&["status"]);
    assert!(!status.contains("not ready"), "within the grace: {status}");
    db2.exec("UPDATE walfill.versions SET updated_at = now() - interval '1 minute'");
    let status = walfill2.ok(&["status"]);
    assert!(
        status.contains("NOT FOLLOWED: no process follows it")
            && status.contains("not ready: orders_summary version v1"),
        "{status}"
    );
}

/// A running `walfill sync` reads its configuration again on SIGHUP and
/// follows the versions of a target added since; before that, `status`
/// names the built version nobody follows.
#[test]
fn sync_follows_targets_added_to_the_configuration_on_sighup() {
    let (db, walfill) = built_v1("sv_sync_hup", 500, "");
    let mut sync = Background::start(&walfill, &["sync"]);
    // A second target, built while the running sync's configuration
    // lacks it.
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items VALUES (1, 'a');",
    );
    let items = "[[target]]\nname = \"items_view\"\nsource = \"public.items\"\n\
                 select = \"id, upper(name) AS name\"\nversion = \"v1\"\n";
    walfill.configure(&db, &format!("{}\n{items}", orders_target("v1")));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_view"]);
    db.exec(
        "INSERT INTO items VALUES (2, 'b');
         UPDATE walfill.versions SET updated_at = now() - interval '1 minute'
          WHERE target = 'items_view'",
    );
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains("not ready: items_view version v1 (active): no process follows it"),
        "{status}"
    );
    sync.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sync.running(), Ok(()), "SIGHUP ended walfill sync");
    wait_for(
        &db,
        "SELECT count(*) = 2 FROM public.items_view",
        Duration::from_secs(60),
        "the reloaded sync to follow items_view",
        &[],
    );
    db.exec("UPDATE items SET name = 'c' WHERE id = 1");
    wait_for(
        &db,
        "SELECT name = 'C' FROM public.items_view WHERE id = 1",
        Duration::from_secs(60),
        "the reloaded sync to go on following items_view",
        &[],
    );
    let status = walfill.ok(&["status"]);
    assert!(!status.contains("not ready"), "{status}");
    assert_eq!(sync.running(), Ok(()));
}

/// No slot is left keeping WAL for nothing: the leader finishes a
/// retirement cut short (the state says retired, the slot and table are
/// still there), retires a version kept for rollback whose table was
/// dropped, and drops a slot of this deployment no version owns, while a
/// slot of another deployment stays. `status` shows what it dropped, and
/// warns that the source keeps WAL for slots without limit.
#[test]
fn the_leader_leaves_no_slot_behind() {
    let (db, walfill) = built_v1("sv_slots", 300, "");
    for version in ["v2", "v3"] {
        walfill.configure(&db, &orders_target(version));
        walfill.ok(&["backfill", "orders_summary"]);
    }
    let slot_of = |version: &str| {
        db.value(&format!(
            "SELECT slot_name FROM walfill.versions WHERE version = '{version}'"
        ))
        .unwrap()
    };
    let (v1_slot, v2_slot) = (slot_of("v1"), slot_of("v2"));
    let tag = v1_slot.rsplit('_').next().unwrap().to_string();
    let ghost = format!("walfill_ghost_v9_{tag}");
    let other = "walfill_ghost_v9_0badc0de";
    db.exec(
        "UPDATE walfill.versions SET phase = 'retired' WHERE version = 'v1';
         DROP TABLE derived.orders_summary__v2;",
    );
    for slot in [ghost.as_str(), other] {
        db.exec(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
        ));
    }
    let slot_exists = |name: &str| {
        db.value(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{name}'"
        ))
        .as_deref()
            == Some("1")
    };
    assert!(slot_exists(&v1_slot) && slot_exists(&v2_slot) && slot_exists(&ghost));
    walfill.configure(
        &db,
        &format!(
            "{}\n{}",
            serve_section("keep_versions = 5\nslot_reap_after_minutes = 0"),
            orders_target("v3")
        ),
    );
    let service = Service::start(&walfill, false, &[]);
    wait_for(
        &db,
        &format!(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_replication_slots
                                 WHERE slot_name IN ('{v1_slot}', '{v2_slot}', '{ghost}'))
                AND to_regclass('derived.orders_summary__v1') IS NULL"
        ),
        Duration::from_secs(60),
        "the leader to drop the slots no version needs",
        &[&service],
    );
    assert_eq!(
        db.value(
            "SELECT phase || ' ' || (lost IS NOT NULL) FROM walfill.versions WHERE version = 'v2'"
        )
        .as_deref(),
        Some("retired true")
    );
    assert!(slot_exists(other), "another deployment's slot was dropped");
    assert!(
        slot_exists(&slot_of("v3")),
        "the active version's slot was dropped"
    );
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains(&format!("reaped: slot {ghost} dropped at")),
        "{status}"
    );
    let unlimited = db
        .value("SELECT setting FROM pg_settings WHERE name = 'max_slot_wal_keep_size'")
        .as_deref()
        == Some("-1");
    assert_eq!(
        status.contains("max_slot_wal_keep_size is unset"),
        unlimited,
        "{status}"
    );
    db.exec(&format!("SELECT pg_drop_replication_slot('{other}')"));
    drop(service);
}

/// A request queued again after a failed attempt, then cancelled: the
/// version it had begun (and its slot) is retired, not left behind.
#[test]
fn cancelling_a_request_retires_the_version_it_began() {
    let (db, walfill) = built_v1("sv_cancel_slot", 300, "");
    let broken = "[[target]]\nname = \"broken\"\nsource = \"public.orders\"\nkey = [\"id\"]\n\
                  select = \"id, total_cents / (id - id) AS boom\"\nversion = \"v1\"\n\
                  schema = \"derived\"\n";
    walfill.configure(
        &db,
        &format!(
            "[serve]\nlease_seconds = 3\npoll_seconds = 1\nretry_seconds = 30\n\n{}\n{broken}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let service = Service::start(&walfill, false, &[]);
    wait_for(
        &db,
        "SELECT EXISTS (SELECT 1 FROM walfill.requests r JOIN walfill.versions v
                          ON v.target = r.target AND v.version = r.version
                        WHERE r.target = 'broken' AND r.state = 'queued' AND r.attempts >= 1)",
        Duration::from_secs(60),
        "the broken target's request to fail once and wait",
        &[&service],
    );
    let (id, slot) = {
        let row = db.value(
            "SELECT r.id || ' ' || v.slot_name FROM walfill.requests r JOIN walfill.versions v
                ON v.target = r.target AND v.version = r.version WHERE r.target = 'broken'",
        );
        let row = row.unwrap();
        let (id, slot) = row.split_once(' ').unwrap();
        (id.to_string(), slot.to_string())
    };
    assert_eq!(
        db.value(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ))
        .as_deref(),
        Some("1")
    );
    walfill.ok(&["cancel", &id]);
    wait_for(
        &db,
        &format!(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '{slot}')
                AND (SELECT phase = 'retired' FROM walfill.versions WHERE target = 'broken')"
        ),
        Duration::from_secs(60),
        "the cancelled request's version to be retired",
        &[&service],
    );
}

/// With `[[serve.tokens]]`, the API wants a bearer token: a read token
/// opens the GETs, a write token the POSTs too, and the request records
/// the token's name as who asked; `/health` and the page stay open. Without
/// tokens, `serve` refuses to listen beyond loopback; a token whose secret
/// is not in the environment stops it at start.
#[test]
fn the_api_wants_a_token_of_the_right_access() {
    let (db, walfill) = built_v1("sv_tokens", 200, "");
    let (read, write) = ("r3ad-secret-0123456789", "wr1te-secret-0123456789");
    walfill.configure(
        &db,
        &format!(
            "{}\n[[serve.tokens]]\nname = \"dashboard\"\naccess = \"read\"\n\
             secret_env = \"WF_TEST_TOKEN_READ\"\n\n[[serve.tokens]]\nname = \"ci\"\n\
             access = \"write\"\nsecret_env = \"WF_TEST_TOKEN_WRITE\"\n\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    // Other commands never need the secrets.
    walfill.ok(&["status"]);
    let env = [("WF_TEST_TOKEN_READ", read), ("WF_TEST_TOKEN_WRITE", write)];
    let mut service = Service::start(&walfill, true, &env);
    assert_eq!(service.call("GET", "/health", None).0, 200);
    assert_eq!(service.call("GET", "/", None).0, 200);
    for path in ["/status", "/metrics", "/ready"] {
        assert_eq!(
            service.call("GET", path, None).0,
            401,
            "{path} without a token"
        );
        assert_eq!(
            service.call("GET", path, Some("wrong-secret-0123456789")).0,
            401,
            "{path} with a wrong token"
        );
        assert_eq!(
            service.call("GET", path, Some(read)).0,
            200,
            "{path} with a read token"
        );
    }
    let post = "/targets/orders_summary/backfill";
    assert_eq!(service.call("POST", post, None).0, 401);
    let (code, body) = service.call("POST", post, Some(read));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("dashboard"), "{body}");
    assert_eq!(service.call("POST", "/pause", Some(read)).0, 403);
    let (code, body) = service.call("POST", post, Some(write));
    assert_eq!(code, 202, "{body}");
    assert_eq!(
        db.value("SELECT requested_by FROM walfill.requests WHERE origin = 'http'")
            .as_deref(),
        Some("ci")
    );
    service.stop(Duration::from_secs(30));

    // A secret missing from the environment: refused at start.
    let out = walfill.run(&["serve"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("WF_TEST_TOKEN_READ") && stderr.contains("not set"),
        "{stderr}"
    );
    // No tokens, beyond loopback: refused.
    walfill.configure(
        &db,
        &format!("{}\n{}", serve_section(""), orders_target("v1")),
    );
    let out = walfill.run(&["serve", "--listen", "0.0.0.0:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("beyond this host, needs tokens"),
        "{stderr}"
    );
}

/// Messages that match the state: SIGTERM is not answered with advice
/// about Ctrl-C; `dead-letters` of a target whose one version is not
/// published needs no `--version`, and with several it names them.
#[test]
fn messages_match_the_state() {
    let db = TestDb::new("sv_messages");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 5 FROM generate_series(1, 50) g;",
    );
    let target = |version: &str| {
        format!(
            "[backfill]\nallow_dead_letters = true\n\n[serve]\npoll_seconds = 1\n\n\
             [[target]]\nname = \"per\"\nsource = \"public.stock\"\n\
             select = \"id, 100 / qty AS per\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = Walfill::new(&db, &target("v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "per", "--no-swap"]);
    let listed = walfill.ok(&["dead-letters", "per"]);
    assert!(listed.contains("division by zero"), "{listed}");
    walfill.configure(&db, &target("v2"));
    walfill.ok(&["backfill", "per", "--no-swap"]);
    let out = walfill.run(&["dead-letters", "per"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("name one with --version: v1, v2"),
        "{stderr}"
    );

    let mut service = Service::start(&walfill, false, &[]);
    std::thread::sleep(Duration::from_secs(2));
    service.stop(Duration::from_secs(30));
    let log = service.log();
    assert!(
        log.contains("SIGTERM: stopping") && !log.contains("Ctrl-C"),
        "{log}"
    );
}

/// An idle-in-transaction session holding a transaction id blocks the
/// creation of a backfill's slot for as long as it lives: `status` names
/// it (pid, user, application, age) while the backfill waits, and the
/// backfill goes on once it ends.
#[test]
fn status_names_the_sessions_a_slot_creation_waits_for() {
    let db = TestDb::new("sv_slot_wait");
    create_orders(&db, 200);
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    let mut stuck = db.client();
    stuck
        .batch_execute("SET application_name = 'forgotten_psql'; BEGIN; SELECT txid_current();")
        .unwrap();
    let pid: i32 = stuck
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    let started = Instant::now();
    loop {
        let status = walfill.ok(&["status"]);
        if status.contains("WAITING: creating its slot waits for") {
            assert!(
                status.contains(&format!("pid {pid} ")) && status.contains("forgotten_psql"),
                "{status}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "status never named the session:\n{status}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    stuck.batch_execute("ROLLBACK").unwrap();
    walfill.wait_ok(backfill, Duration::from_secs(60));
    let status = walfill.ok(&["status"]);
    assert!(!status.contains("WAITING"), "{status}");
}

#[test]
fn metrics_parse_as_prometheus_text_and_ready_flips_on_repeated_failures() {
    let (db, walfill) = built_v1("sv_http", 3_000, "");
    let broken = "[[target]]\nname = \"broken\"\nsource = \"public.orders\"\nkey = [\"id\"]\n\
                  select = \"id, total_cents / (id - id) AS boom\"\nversion = \"v1\"\n\
                  schema = \"derived\"\n";
    walfill.configure(
        &db,
        &format!(
            "[archive]\nurl = \"{}\"\n\n{}\n{}",
            archive_url(),
            serve_section(""),
            orders_target("v1")
        ),
    );
    let mut service = Service::start(&walfill, true, &[]);
    let (code, body) = service.get("/health");
    assert_eq!(code, 200, "{body}");
    // A change applied by the live stream gives the apply lag in seconds.
    db.exec("UPDATE orders SET note = 'lag' WHERE id = 1; SELECT pg_switch_wal()");
    wait_for(
        &db,
        "SELECT apply_lag_seconds IS NOT NULL FROM walfill.versions WHERE version = 'v1'",
        Duration::from_secs(60),
        "the stream to apply a change",
        &[&service],
    );

    let (code, text) = service.get("/metrics");
    assert_eq!(code, 200, "{text}");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let sample = |name: &str, label: Option<(&str, &str)>| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Counter(v) => v,
                _ => f64::NAN,
            })
    };
    assert_eq!(sample("walfill_up", None), Some(1.0));
    let rows: f64 = db
        .value("SELECT count(*) FROM orders")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        sample("walfill_rows_copied", Some(("version", "v1"))),
        Some(rows)
    );
    assert!(sample("walfill_apply_lag_bytes", Some(("version", "v1"))).is_some());
    let lag = sample("walfill_apply_lag_seconds", Some(("version", "v1"))).unwrap();
    assert!((0.0..60.0).contains(&lag), "{lag}");
    // The archive has segments (the test cluster archives every one).
    let age = sample("walfill_archive_last_segment_age_seconds", None).unwrap();
    assert!((0.0..3600.0).contains(&age), "{age}");
    assert!(sample("walfill_events_total", Some(("kind", "swap"))).unwrap_or(0.0) >= 1.0);
    assert_eq!(
        sample("walfill_backfills", Some(("state", "failed"))),
        Some(0.0)
    );
    for s in &scrape.samples {
        assert!(s.metric.starts_with("walfill_"), "{}", s.metric);
    }

    // A target whose transform fails on every row: tried again and again.
    walfill.configure(
        &db,
        &format!("{}\n{}\n{broken}", serve_section(""), orders_target("v1")),
    );
    service.signal("HUP");
    let started = Instant::now();
    loop {
        let (code, body) = service.get("/ready");
        if code == 503 {
            assert!(body.contains("broken"), "{body}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "/ready still says {code} {body}:\n{}",
            service.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // A failing target is no reason to restart the process.
    let (code, body) = service.get("/health");
    assert_eq!(code, 200, "{body}");
    let attempts: i32 = db
        .value("SELECT max(attempts) FROM walfill.requests WHERE target = 'broken'")
        .unwrap()
        .parse()
        .unwrap();
    assert!(attempts >= 1);
    // The other target's live stream was never stopped.
    db.exec("UPDATE orders SET total_cents = total_cents + 1 WHERE id = 1");
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&service],
    );
    let (code, status) = service.get("/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["requests"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["target"] == "broken" && r["last_error"].is_string()));
    let (code, page) = service.get("/");
    assert_eq!(code, 200);
    assert!(page.contains("<title>walfill</title>"));
    service.stop(Duration::from_secs(30));
}

#[test]
fn requests_are_made_listed_and_cancelled_from_the_cli() {
    let (db, walfill) = built_v1("sv_cli", 500, "");
    // No service runs: the request waits, and can be withdrawn.
    let id = walfill
        .ok(&["request", "orders_summary"])
        .trim()
        .to_string();
    let status = walfill.ok(&["status"]);
    assert!(status.contains("queued"), "{status}");
    let out = walfill.ok(&["cancel", &id]);
    assert!(out.contains("cancelled"), "{out}");
    let again = walfill.run(&["cancel", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not queued"));
    let unknown = walfill.run(&["request", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no target named"));
    // SQL checks the name against the running configuration, once a
    // service has recorded it.
    db.exec("INSERT INTO walfill.configured (target, version) VALUES ('orders_summary', 'v1')");
    let err = db
        .client()
        .query_one("SELECT walfill.request_backfill('nope')", &[])
        .unwrap_err();
    assert!(
        err.to_string().contains("no target named")
            || format!("{err:?}").contains("no target named"),
        "{err:?}"
    );
    let scoped = db
        .value("SELECT walfill.request_backfill('orders_summary', 'id < 5')")
        .unwrap();
    assert_eq!(
        db.value(&format!(
            "SELECT scope FROM walfill.requests WHERE id = {scoped}"
        ))
        .as_deref(),
        Some("id < 5")
    );
}

#[test]
fn poison_rows_land_in_the_dead_letters_while_the_rest_completes() {
    let db = TestDb::new("sv_dead");
    create_orders(&db, 5_000);
    // Fails on every 997th id: its value cannot be computed.
    let ratio = |body: &str| {
        format!(
            "CREATE OR REPLACE FUNCTION public.cents_ratio(id bigint, cents bigint) RETURNS numeric
             LANGUAGE sql IMMUTABLE AS $f$ SELECT {body} $f$"
        )
    };
    db.exec(&ratio("cents / (id % 997)::numeric"));
    let select = "id, status, public.cents_ratio(id, total_cents) AS ratio";
    let target = orders_target("v1")
        .replace(ORDERS_SELECT, select)
        .replace(&format!("where = \"{ORDERS_WHERE}\"\n"), "");
    let walfill = Walfill::new(&db, &format!("[backfill]\nchunk_rows = 1000\n\n{target}"));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "orders_summary"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("5 dead letter(s)"), "{stderr}");
    assert_eq!(
        db.value("SELECT phase FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("ready"),
        "built, not swapped"
    );
    let letters =
        "SELECT string_agg(key[1], ',' ORDER BY key[1]::bigint) FROM walfill.dead_letters";
    assert_eq!(
        db.value(letters).as_deref(),
        Some("997,1994,2991,3988,4985")
    );
    assert!(db
        .value("SELECT min(error) FROM walfill.dead_letters")
        .unwrap()
        .contains("division by zero"));
    let table = "derived.orders_summary__v1";
    let live = format!("SELECT count(*) FROM {table} WHERE NOT _walfill_deleted");
    assert_eq!(
        db.value(&live).as_deref(),
        Some("4995"),
        "every other row is stored"
    );
    assert_eq!(
        db.value(&format!(
            "SELECT count(*) FROM {table} WHERE id % 997 = 0 AND NOT _walfill_deleted"
        ))
        .as_deref(),
        Some("0"),
        "no poisoned key is present"
    );

    // Changes from the stream: a new poison row joins, a deleted one leaves.
    db.exec(
        "INSERT INTO orders VALUES (5982, 1, 'open', 70, NULL);
         DELETE FROM orders WHERE id = 1994;
         UPDATE orders SET total_cents = total_cents + 1 WHERE id IN (1, 997)",
    );
    walfill.ok(&["sync", "--once"]);
    assert_eq!(
        db.value(letters).as_deref(),
        Some("997,2991,3988,4985,5982")
    );
    let listed = walfill.ok(&["dead-letters", "orders_summary", "--version", "v1"]);
    assert!(
        listed.contains("5982") && listed.contains("division by zero"),
        "{listed}"
    );

    // The cause is fixed: the dead letters apply, and the version is whole.
    db.exec(&ratio(
        "CASE WHEN id % 997 = 0 THEN NULL ELSE cents / (id % 997)::numeric END",
    ));
    let retried = walfill.ok(&[
        "dead-letters",
        "orders_summary",
        "--version",
        "v1",
        "--retry",
    ]);
    assert!(
        retried.contains("5 dead letter(s) applied, 0 still failing"),
        "{retried}"
    );
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters")
            .as_deref(),
        Some("0")
    );
    walfill.ok(&["swap", "orders_summary", "v1"]);
    crate::support::assert_view_matches(&db, VIEW, "orders", select, None, "id");
}

#[test]
fn the_throttle_engages_over_its_threshold_and_releases_after() {
    let db = TestDb::new("sv_throttle");
    create_orders(&db, 20_000);
    let other =
        "[[target]]\nname = \"orders_a\"\nsource = \"public.orders\"\nselect = \"id, status\"\n\
                 version = \"a1\"\nschema = \"derived\"\n";
    let walfill = Walfill::new(
        &db,
        &format!(
            "{SLOW_COPY}\n[throttle]\nmax_apply_lag_mb = 8\n\n{other}\n{}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_a"]);
    // orders_a's live version falls behind: nothing syncs it.
    db.exec("UPDATE orders SET note = repeat(md5(id::text), 20)");
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    db.wait_for(
        "SELECT EXISTS (SELECT 1 FROM walfill.events WHERE kind = 'throttle_engaged')",
        Duration::from_secs(60),
        "the throttle to engage",
    );
    let rows = "SELECT rows_copied FROM walfill.versions WHERE version = 'v1'";
    let held = db.value(rows).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        db.value(rows).unwrap(),
        held,
        "the copy waits while throttled"
    );
    assert!(db
        .value("SELECT throttled FROM walfill.versions WHERE version = 'v1'")
        .unwrap()
        .contains("apply lag"));
    let status = walfill.ok(&["status"]);
    assert!(status.contains("THROTTLED"), "{status}");

    // orders_a is followed again: the lag goes (the copy's own writes
    // land in the same cluster, so it must stay followed), and the copy
    // goes on.
    let sync = Background::start(&walfill, &["sync", "orders_a"]);
    walfill.wait_ok(backfill, Duration::from_secs(120));
    drop(sync);
    let released: i64 = db
        .value("SELECT count(*) FROM walfill.events WHERE kind = 'throttle_released'")
        .unwrap()
        .parse()
        .unwrap();
    assert!(released >= 1);
    assert_eq!(
        db.value("SELECT throttled IS NULL FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("true")
    );
    crate::support::assert_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
}

#[test]
fn verify_catches_a_row_changed_behind_walfills_back() {
    let (db, walfill) = built_v1("sv_verify", 6_000, "");
    walfill.configure(
        &db,
        &format!("[backfill]\nchunk_rows = 1000\n\n{}", orders_target("v1")),
    );
    let sync = Background::start(&walfill, &["sync"]);
    let writer = Writer::start(&db, 6_000, 1_000_000, 15);
    // Under writes, ranges read while changes are on their way compare
    // equal once the stream has them.
    let out = walfill.ok(&["verify", "orders_summary"]);
    assert!(out.contains("equals the transform of its source"), "{out}");
    assert!(writer.stop() > 10);

    let id = db
        .value(
            "SELECT id FROM derived.orders_summary__v1 WHERE NOT _walfill_deleted
              ORDER BY id LIMIT 1 OFFSET 3000",
        )
        .unwrap();
    db.exec(&format!(
        "UPDATE derived.orders_summary__v1 SET status = 'TAMPERED' WHERE id = {id}"
    ));
    let failed = walfill.run(&["verify", "orders_summary"]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(3), "{stderr}");
    // Only the tampered range differs.
    assert_eq!(
        stderr
            .matches("- version v1 of orders_summary: keys")
            .count(),
        1,
        "{stderr}"
    );
    db.exec(&format!(
        "UPDATE derived.orders_summary__v1
            SET status = (SELECT upper(status) FROM orders WHERE id = {id}) WHERE id = {id}"
    ));
    let out = walfill.ok(&["verify", "orders_summary"]);
    assert!(out.contains("equals"), "{out}");
    drop(sync);
}

#[test]
fn verify_before_swap_compares_the_version_before_publishing_it() {
    let db = TestDb::new("sv_vbs");
    create_orders(&db, 5_000);
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 1000\nverify_before_swap = true\n\n{}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let writer = Writer::start(&db, 5_000, 1_000_000, 16);
    walfill.ok(&["backfill", "orders_summary"]);
    assert!(writer.stop() > 10);
    assert_eq!(active_version(&db).as_deref(), Some("v1"));
    assert_eq!(
        db.value(
            "SELECT detail->>'differences' FROM walfill.events
              WHERE kind = 'verified' AND version = 'v1'"
        )
        .as_deref(),
        Some("[]"),
        "verified before the swap, equal"
    );
    let verified_before_swap: bool = db
        .value(
            "SELECT (SELECT max(at) FROM walfill.events WHERE kind = 'verified')
                  < (SELECT min(at) FROM walfill.events WHERE kind = 'swap')",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!(verified_before_swap);
    walfill.ok(&["sync", "--once"]);
    crate::support::assert_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
}

#[test]
fn a_scoped_request_refreshes_its_rows_in_place_and_tombstones_lost_keys() {
    let (db, walfill) = built_v1("sv_scope", 6_000, "");
    walfill.configure(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 300\n\n{}\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    let mut service = Service::start(&walfill, false, &[]);
    // The writer works on ids up to 4000: the scope's first part is
    // refreshed while the stream changes it, its second part only by the
    // refresh.
    let writer = Writer::start(&db, 4_000, 1_000_000, 21);
    let scope = "id <= 2000 OR id BETWEEN 4501 AND 5000";
    let staging = "derived.orders_summary__v1";
    // Behind walfill's back: a changed row and a lost row in scope, a
    // changed row out of scope, and a row the source never had.
    db.exec(&format!(
        "UPDATE {staging} SET status = 'TAMPERED' WHERE id IN (4601, 5001);
         DELETE FROM {staging} WHERE id = 4602;
         CREATE TEMP TABLE stale AS SELECT * FROM {staging} WHERE id = 5002;
         UPDATE stale SET id = 2000000;
         INSERT INTO {staging} SELECT * FROM stale;"
    ));
    let id = walfill
        .ok(&["request", "orders_summary", "--where", scope])
        .trim()
        .to_string();
    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(120),
        "the scoped refresh to finish",
        &[&service],
    );
    assert!(writer.stop() > 10);
    let outcome = db
        .value(&format!(
            "SELECT outcome::text FROM walfill.requests WHERE id = {id}"
        ))
        .unwrap();
    let outcome: serde_json::Value = serde_json::from_str(&outcome).unwrap();
    assert_eq!(outcome["path"], "refresh", "{outcome}");
    assert_eq!(outcome["version"], "v1", "in place: {outcome}");
    assert!(outcome["rows"].as_i64().unwrap() > 1_000, "{outcome}");
    assert!(outcome["tombstoned"].as_i64().unwrap() >= 1, "{outcome}");
    assert_eq!(active_version(&db).as_deref(), Some("v1"));

    let status_of = |id: i64| {
        db.value(&format!(
            "SELECT (SELECT status FROM {VIEW} WHERE id = {id})"
        ))
    };
    assert_eq!(
        status_of(4601).as_deref(),
        Some("OPEN"),
        "repaired in scope"
    );
    assert_eq!(
        status_of(4602).as_deref(),
        Some("OPEN"),
        "restored in scope"
    );
    assert_eq!(status_of(2_000_000), None, "a key the source lacks is gone");
    assert_eq!(
        status_of(5001).as_deref(),
        Some("TAMPERED"),
        "out of scope, left alone"
    );
    db.exec(&format!(
        "UPDATE {staging} SET status = 'OPEN' WHERE id = 5001"
    ));
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&service],
    );

    // A condition the source cannot run fails the request for good, with
    // PostgreSQL's reason.
    let bad = walfill
        .ok(&["request", "orders_summary", "--where", "no_such_column = 1"])
        .trim()
        .to_string();
    wait_for(
        &db,
        &format!("SELECT state = 'failed' FROM walfill.requests WHERE id = {bad}"),
        Duration::from_secs(60),
        "the bad request to fail",
        &[&service],
    );
    let error = db
        .value(&format!(
            "SELECT last_error FROM walfill.requests WHERE id = {bad}"
        ))
        .unwrap();
    assert!(
        error.contains("--where condition does not work") && error.contains("no_such_column"),
        "{error}"
    );
    let both = walfill.run(&["request", "orders_summary", "--where", "id < 3", "--purge"]);
    assert_eq!(both.status.code(), Some(2));
    service.stop(Duration::from_secs(30));
}

/// `GET /history` holds the page's plots: the published version's apply
/// lag (bytes and seconds) and the WAL its slot keeps, a point per sample,
/// more as time goes.
#[test]
fn history_records_apply_lag_and_slot_wal_for_the_plots() {
    let (db, walfill) = built_v1("sv_history", 1_000, "");
    walfill.configure(
        &db,
        &format!("{}\n{}", serve_section(""), orders_target("v1")),
    );
    let mut service = Service::start(&walfill, true, &[]);
    let writer = Writer::start(&db, 1_000, 1_000_000, 41);
    let points = |kind: &str| -> usize {
        let (code, body) = service.get("/history");
        assert_eq!(code, 200, "{body}");
        let history: serde_json::Value = serde_json::from_str(&body).unwrap();
        history["series"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| s["points"].as_array().unwrap().len())
            .max()
            .unwrap_or(0)
    };
    let started = Instant::now();
    while points("apply_lag_seconds") < 2 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let first = (points("apply_lag_bytes"), points("slot_retained_bytes"));
    assert!(
        first.0 >= 2 && first.1 >= 2,
        "{first:?}: {}",
        service.get("/history").1
    );
    std::thread::sleep(Duration::from_secs(6));
    let second = (points("apply_lag_bytes"), points("slot_retained_bytes"));
    assert!(
        second.0 > first.0 && second.1 > first.1,
        "{first:?} then {second:?}"
    );
    let (_, body) = service.get("/history");
    assert!(body.contains("\"label\":\"orders_summary/v1\""), "{body}");
    writer.stop();
    service.stop(Duration::from_secs(30));
}

/// One HTTPS request with a client that trusts only `ca` (PEM); the raw
/// response, or why it failed.
fn https_get(port: u16, path: &str, ca: &str) -> Result<String, String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tls.read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    Ok(response)
}

/// With `tls_cert` and `tls_key` the endpoints speak HTTPS (and nothing
/// else on that port); a key that does not fit its certificate stops the
/// start, naming the setting (exit 2).
#[test]
fn the_endpoints_are_served_over_https_with_tls_cert_and_key() {
    let (db, walfill) = built_v1("sv_tls", 100, "");
    let dir = std::env::temp_dir().join(format!("walfill-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let issued = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = issued.cert.pem();
    std::fs::write(dir.join("cert.pem"), &cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), issued.signing_key.serialize_pem()).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("other-key.pem"), other.signing_key.serialize_pem()).unwrap();
    let port = crate::support::service::free_port();
    let configure = |key: &str| {
        walfill.configure(
            &db,
            &format!(
                "{}listen = \"127.0.0.1:{port}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n{}",
                serve_section(""),
                dir.join("cert.pem").display(),
                dir.join(key).display(),
                orders_target("v1")
            ),
        )
    };

    configure("other-key.pem");
    let out = walfill.run(&["serve"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains("serve.tls_key") && log.contains("does not fit"),
        "{log}"
    );

    configure("key.pem");
    let mut service = Service::start(&walfill, false, &[]);
    let started = Instant::now();
    let response = loop {
        match https_get(port, "/health", &cert_pem) {
            Ok(r) => break r,
            Err(e) if started.elapsed() > Duration::from_secs(30) => {
                panic!("no HTTPS answer: {e}\n{}", service.log())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert!(
        response.starts_with("HTTP/1.1 200") && response.ends_with("ok\n"),
        "{response}"
    );
    let status = https_get(port, "/status", &cert_pem).unwrap();
    assert!(status.contains("\"orders_summary\""), "{status}");
    // Plain HTTP gets no answer from it.
    let plain = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{port}/health"))
        .send();
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    service.stop(Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).unwrap();
}
