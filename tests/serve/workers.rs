//! Services sharing one state database: a killed worker's job finished by another, configuration changes on SIGHUP, the leader's tidying, a lost version table rebuilt.

use super::*;

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
        &[("RUST_LOG", "info,walfill::pipeline::apply=debug")],
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
    writer.wait_for_ops(50);
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
