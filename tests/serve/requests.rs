//! Requests and what they build: cancelling, the CLI, poison rows, verify, scoped refreshes.

use super::*;

/// A request whose failure needs the operator (a transform that fails on
/// every row) fails for good, without being tried again; cancelled, the
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
            "[serve]\nlease_seconds = 3\npoll_seconds = 1\nretry_seconds = 1\n\n{}\n{broken}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let service = Service::start(&walfill, false, &[]);
    wait_for(
        &db,
        "SELECT EXISTS (SELECT 1 FROM walfill.requests r JOIN walfill.versions v
                          ON v.target = r.target AND v.version = r.version
                        WHERE r.target = 'broken' AND r.state = 'failed')",
        Duration::from_secs(60),
        "the broken target's request to fail for good",
        &[&service],
    );
    // Not tried again, though a retry would come after a second.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        db.value("SELECT state || ' ' || attempts FROM walfill.requests WHERE target = 'broken'")
            .as_deref(),
        Some("failed 1"),
        "{}",
        service.log()
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
    assert!(String::from_utf8_lossy(&again.stderr).contains("only a queued or failed request"));
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

/// A scoped refresh records its last stored key with each chunk: killed
/// mid-copy, the next attempt of the request goes on after that key rather
/// than copying the scope again, and the version ends equal to the
/// transform of the source.
#[test]
fn a_scoped_refresh_killed_mid_copy_resumes_after_its_last_stored_key() {
    let (db, walfill) = built_v1("sv_scope_resume", 4_000, "");
    walfill.configure(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 200\n\n{}\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    let staging = "derived.orders_summary__v1";
    db.exec(&format!(
        "UPDATE {staging} SET status = 'TAMPERED' WHERE id IN (51, 2501)"
    ));
    // The third chunk stored, the process dies.
    let mut first = Service::start(
        &walfill,
        false,
        &[("WALFILL_FAILPOINTS", "refresh.batch@3")],
    );
    let id = walfill
        .ok(&["request", "orders_summary", "--where", "id <= 3000"])
        .trim()
        .to_string();
    killed_at_failpoint(&mut first, "refresh.batch");
    let progress = |what: &str| {
        db.value(&format!(
            "SELECT {what} FROM walfill.requests WHERE id = {id}"
        ))
        .unwrap()
    };
    assert_eq!(progress("refreshed_rows"), "600", "three chunks of 200");
    assert_eq!(progress("refreshed_up_to"), "{600}");
    // Behind walfill's back, in the part already refreshed: an attempt
    // that started over would repair it, one that goes on leaves it.
    db.exec(&format!(
        "UPDATE {staging} SET status = 'AFTER' WHERE id = 61"
    ));

    let mut second = Service::start(&walfill, false, &[]);
    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(120),
        "the refresh to finish on its next attempt",
        &[&second],
    );
    let log = second.log();
    assert!(
        log.contains("resuming the refresh after the last key an earlier attempt stored"),
        "{log}"
    );
    let outcome: serde_json::Value = serde_json::from_str(&progress("outcome::text")).unwrap();
    assert_eq!(
        outcome["rows"], 3_000,
        "every row in scope, once: {outcome}"
    );
    let status_of = |id: i64| db.value(&format!("SELECT status FROM {VIEW} WHERE id = {id}"));
    assert_eq!(
        status_of(51).as_deref(),
        Some("OPEN"),
        "refreshed by the first attempt"
    );
    assert_eq!(
        status_of(2501).as_deref(),
        Some("OPEN"),
        "refreshed by the second"
    );
    assert_eq!(status_of(61).as_deref(), Some("AFTER"), "not copied again");
    db.exec(&format!(
        "UPDATE {staging} SET status = 'OPEN' WHERE id = 61"
    ));
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&second],
    );
    second.stop(Duration::from_secs(30));
}

/// The tombstones of the keys the source lost go through the apply loop
/// with the refresh's durable cursor too: killed after two of their
/// batches, the next attempt goes on after the last key made a tombstone.
#[test]
fn a_scoped_refresh_killed_mid_tombstones_goes_on_after_its_last_key() {
    let (db, walfill) = built_v1("sv_scope_lost", 1_000, "");
    walfill.configure(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 500\n\n{}\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    // Behind walfill's back: 2,500 rows the source never had (three
    // batches of lost keys, 1,000 to a batch).
    let staging = "derived.orders_summary__v1";
    db.exec(&format!(
        "CREATE TEMP TABLE stale AS
           SELECT s.* FROM (SELECT * FROM {staging} WHERE NOT _walfill_deleted LIMIT 1) s,
                           generate_series(1, 2500);
         CREATE TEMP SEQUENCE n;
         UPDATE stale SET id = 1000000 + nextval('n');
         INSERT INTO {staging} SELECT * FROM stale;"
    ));
    let lost = format!("SELECT count(*) FROM {VIEW} WHERE id > 1000000");
    assert_eq!(db.value(&lost).as_deref(), Some("2500"));
    // The chunk (ids up to 500), then a batch or two of lost keys: the
    // process dies.
    let mut first = Service::start(
        &walfill,
        false,
        &[("WALFILL_FAILPOINTS", "refresh.batch@3")],
    );
    let id = walfill
        .ok(&["request", "orders_summary", "--where", "id <= 500"])
        .trim()
        .to_string();
    killed_at_failpoint(&mut first, "refresh.batch");
    let made: i64 = db
        .value(&format!(
            "SELECT tombstoned_keys FROM walfill.requests WHERE id = {id}"
        ))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        made == 1000 || made == 2000,
        "whole batches of lost keys: {made}"
    );
    assert_eq!(db.value(&lost), Some((2500 - made).to_string()));

    let mut second = Service::start(&walfill, false, &[]);
    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(120),
        "the refresh to finish on its next attempt",
        &[&second],
    );
    let log = second.log();
    assert!(
        log.contains("resuming the tombstones of lost keys after the last an earlier attempt made"),
        "{log}"
    );
    let outcome: serde_json::Value = serde_json::from_str(
        &db.value(&format!(
            "SELECT outcome::text FROM walfill.requests WHERE id = {id}"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        outcome["tombstoned"], 2_500,
        "each lost key once: {outcome}"
    );
    assert_eq!(db.value(&lost).as_deref(), Some("0"));
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&second],
    );
    second.stop(Duration::from_secs(30));
}

/// Waits (up to a minute) for `service` to reach failpoint `name`, then
/// kills it as `kill -9` would.
fn killed_at_failpoint(service: &mut Service, name: &str) {
    let reached = format!("failpoint {name} reached");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !service.log().contains(&reached) {
        assert!(std::time::Instant::now() < deadline, "{}", service.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    service.kill9();
}
