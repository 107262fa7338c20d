//! When work runs: schedules, pause and resume, the throttle.

use super::*;

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
