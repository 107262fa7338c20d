//! The view swap is atomic for readers: while versions are swapped back and
//! forth, no reader errors and no reader sees rows of two versions at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{TestDb, Walfill};

fn target(version: &str, select: &str) -> String {
    format!(
        "[[target]]\nname = \"summary\"\nsource = \"items\"\nselect = \"{select}\"\n\
         version = \"{version}\"\nschema = \"derived\"\n"
    )
}

#[test]
fn readers_never_error_nor_see_two_versions() {
    let db = TestDb::new("swap");
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, price int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 2000) g;",
    );
    // v2 changes a column's type and adds one, so the view must be recreated.
    let v1 = "id, price, 'v1' AS ver";
    let v2 = "id, price::text AS price, 'v2' AS ver, price * 2 AS double";
    let walfill = Walfill::new(&db, &target("v1", v1));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "summary"]);
    let reader = format!("{}_reader", db.name);
    db.exec(&format!(
        "CREATE ROLE {reader}; GRANT USAGE ON SCHEMA derived TO {reader};
         GRANT SELECT ON derived.summary TO {reader};"
    ));
    walfill.write_config(&format!(
        "[source]\nurl = \"{}\"\n\n{}",
        db.url(),
        target("v2", v2)
    ));
    walfill.ok(&["backfill", "summary", "--no-swap"]);

    let stop = Arc::new(AtomicBool::new(false));
    let queries = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let (stop, queries, url) = (stop.clone(), queries.clone(), db.url());
        readers.push(std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(Ordering::Relaxed) {
                let row = client
                    .query_one(
                        "SELECT array_agg(DISTINCT ver)::text, count(*) FROM derived.summary",
                        &[],
                    )
                    .unwrap_or_else(|e| panic!("a reader failed during the swaps: {e}"));
                let versions: String = row.get(0);
                let count: i64 = row.get(1);
                assert!(
                    versions == "{v1}" || versions == "{v2}",
                    "a reader saw {versions}"
                );
                assert_eq!(count, 2000, "a reader saw a partial version");
                seen.insert(versions);
                queries.fetch_add(1, Ordering::Relaxed);
            }
            seen
        }));
    }
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(150));
        walfill.ok(&["swap", "summary", "v2"]);
        std::thread::sleep(Duration::from_millis(150));
        walfill.ok(&["rollback", "summary"]);
    }
    walfill.ok(&["swap", "summary", "v2"]);
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::Relaxed);
    let mut seen = std::collections::BTreeSet::new();
    for reader in readers {
        seen.extend(reader.join().expect("a reader panicked"));
    }
    assert!(queries.load(Ordering::Relaxed) > 100, "readers barely ran");
    assert_eq!(
        seen.len(),
        2,
        "readers saw both versions over time: {seen:?}"
    );

    // The recreated view kept its grants, and shows v2's columns.
    let granted = db.value(&format!(
        "SELECT has_table_privilege('{reader}', 'derived.summary', 'SELECT')"
    ));
    assert_eq!(granted.as_deref(), Some("true"));
    assert_eq!(
        db.value("SELECT double::text FROM derived.summary WHERE id = 21")
            .as_deref(),
        Some("42")
    );
    assert_eq!(
        db.value("SELECT string_agg(kind, ',' ORDER BY id) FROM walfill.events WHERE kind IN ('swap', 'rollback')")
            .unwrap()
            .matches("rollback")
            .count(),
        5
    );
    db.exec(&format!("DROP OWNED BY {reader}; DROP ROLE {reader}"));
}

/// A rollback to a version that stopped following its source (a column it
/// reads was dropped) is refused: published, it would never catch up.
/// `--force` publishes it anyway and marks the view stale; a swap to a
/// version that follows clears the mark.
#[test]
fn rollback_refuses_a_version_that_cannot_follow_its_source() {
    let db = TestDb::new("swap_unfollow");
    db.exec(
        "CREATE TABLE policies (id int PRIMARY KEY, insured int, note text);
         INSERT INTO policies SELECT g, g * 10, 'n' || g FROM generate_series(1, 200) g;",
    );
    let target = |version: &str, select: &str| {
        format!(
            "[[target]]\nname = \"pol\"\nsource = \"policies\"\nselect = \"{select}\"\n\
             version = \"{version}\"\n"
        )
    };
    let walfill = Walfill::new(&db, &target("v1", "id, insured, note"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "pol"]);
    db.exec(
        "ALTER TABLE policies DROP COLUMN insured;
         INSERT INTO policies SELECT g, 'n' || g FROM generate_series(201, 206) g;
         UPDATE policies SET note = 'changed' WHERE id <= 3;",
    );
    let stopped = walfill.run(&["sync", "--once"]);
    assert!(
        !stopped.status.success(),
        "v1 cannot follow the dropped column"
    );
    walfill.configure(&db, &target("v2", "id, note"));
    walfill.ok(&["backfill", "pol"]);
    assert_eq!(db.value("SELECT count(*) FROM pol").as_deref(), Some("206"));

    let refused = walfill.run(&["rollback", "pol"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("cannot be published: it cannot follow its source")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        db.value("SELECT active_version FROM walfill.targets")
            .as_deref(),
        Some("v2"),
        "the view still shows v2"
    );

    walfill.ok(&["rollback", "pol", "--force"]);
    assert_eq!(
        db.value("SELECT active_version FROM walfill.targets")
            .as_deref(),
        Some("v1")
    );
    let status = walfill.ok(&["status", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&status).unwrap();
    let v1 = report["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["version"] == "v1")
        .unwrap()
        .clone();
    assert!(
        v1["stale"].as_str().is_some_and(|s| s.contains("--force")),
        "{v1}"
    );
    walfill.ok(&["swap", "pol", "v2"]);
    assert_eq!(
        db.value("SELECT stale IS NULL FROM walfill.targets")
            .as_deref(),
        Some("true")
    );
}

/// Declared indexes are built on every version's table before it is
/// published, and declared grants applied to the view and the version's
/// table at each swap: after the schema is lost and the target rebuilt,
/// readers keep their access.
#[test]
fn declared_indexes_and_grants_reach_every_version() {
    let db = TestDb::new("sw_declared");
    crate::support::workload::create_orders(&db, 500);
    let role = format!("wf_reader_{}", db.name);
    db.exec(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} NOLOGIN"
    ));
    let target = |version: &str, grants: &str| {
        crate::support::workload::orders_target(version).replace(
            "schema = \"derived\"\n",
            &format!(
                "schema = \"derived\"\nindexes = [\"(customer_id)\", \"(total) WHERE status = \
                 'OPEN'\"]\ngrants = [{grants}]\n"
            ),
        )
    };
    let good = format!("\"SELECT TO {role}\"");
    let walfill = Walfill::new(&db, &target("v1", &good));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    let indexed = |table: &str| {
        db.value(&format!(
            "SELECT string_agg(indexdef, ' | ' ORDER BY indexdef) FROM pg_indexes
              WHERE schemaname = 'derived' AND tablename = '{table}'"
        ))
        .unwrap_or_default()
    };
    let may_read = |object: &str| {
        db.value(&format!(
            "SELECT has_table_privilege('{role}', '{object}', 'SELECT')"
        ))
    };
    let v1 = indexed("orders_summary__v1");
    assert!(
        v1.contains("(customer_id)") && v1.contains("WHERE (status = 'OPEN'::text)"),
        "{v1}"
    );
    assert_eq!(may_read("derived.orders_summary").as_deref(), Some("true"));
    assert_eq!(
        may_read("derived.orders_summary__v1").as_deref(),
        Some("true")
    );

    // The schema is lost; the rebuilt version gets its indexes, and the
    // view its grants, again.
    db.exec("DROP SCHEMA derived CASCADE");
    walfill.configure(&db, &target("v2", &good));
    walfill.ok(&["backfill", "orders_summary"]);
    assert!(indexed("orders_summary__v2").contains("(customer_id)"));
    assert_eq!(may_read("derived.orders_summary").as_deref(), Some("true"));
    assert_eq!(
        may_read("derived.orders_summary__v2").as_deref(),
        Some("true")
    );

    // A grant that is not `PRIVILEGES TO ROLES` is refused with the form.
    walfill.configure(&db, &target("v2", &format!("\"SELECT {role}\"")));
    let out = walfill.run(&["status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("PRIVILEGES TO ROLES"), "{stderr}");
}

/// Objects readers built on the view (a view, a materialized view on it,
/// a `BEGIN ATOMIC` function): a version that changes the view's columns
/// is refused by `plan` and the backfill before building, naming them
/// (exit 2); with `dependent_views = "recreate"` the swap recreates them
/// with their grants, and one that no longer fits fails the swap, which
/// changes nothing.
#[test]
fn objects_on_the_view_are_named_or_recreated() {
    use crate::support::workload::{create_orders, orders_target, ORDERS_SELECT};
    let db = TestDb::new("sw_dependents");
    create_orders(&db, 300);
    let role = format!("wf_report_{}", db.name);
    db.exec(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} NOLOGIN"
    ));
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    db.exec(&format!(
        "CREATE SCHEMA reports;
         CREATE VIEW reports.open_orders AS
           SELECT id, status FROM derived.orders_summary WHERE status = 'OPEN';
         CREATE MATERIALIZED VIEW reports.open_count AS SELECT count(*) AS n FROM reports.open_orders;
         CREATE FUNCTION reports.order_count() RETURNS bigint LANGUAGE sql
           BEGIN ATOMIC SELECT count(*) FROM derived.orders_summary; END;
         GRANT SELECT ON reports.open_orders TO {role};"
    ));
    // v2 drops `total`: the view must be recreated.
    let v2_select = ORDERS_SELECT.replace(", total_cents / 100.0 AS total", "");
    let v2 = orders_target("v2").replace(ORDERS_SELECT, &v2_select);
    walfill.configure(&db, &v2);
    for args in [
        &["plan", "orders_summary"][..],
        &["backfill", "orders_summary"][..],
    ] {
        let out = walfill.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for name in [
            "reports.open_orders (view)",
            "reports.open_count (materialized view)",
            "reports.order_count() (function)",
            "dependent_views = \"recreate\"",
        ] {
            assert!(
                stderr.contains(name),
                "{args:?} does not name {name}: {stderr}"
            );
        }
    }
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.versions WHERE version = 'v2'")
            .as_deref(),
        Some("0"),
        "a refused version was built"
    );

    let recreate =
        |config: &str| config.replace("version = ", "dependent_views = \"recreate\"\nversion = ");
    walfill.configure(&db, &recreate(&v2));
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(
        db.value("SELECT version FROM walfill.versions WHERE phase = 'active'")
            .as_deref(),
        Some("v2")
    );
    let open: String = db
        .value("SELECT count(*) FROM derived.orders_summary WHERE status = 'OPEN'")
        .unwrap();
    assert_eq!(
        db.value("SELECT count(*) FROM reports.open_orders")
            .unwrap(),
        open
    );
    assert_eq!(db.value("SELECT n FROM reports.open_count").unwrap(), open);
    assert_eq!(
        db.value("SELECT reports.order_count()").unwrap(),
        db.value("SELECT count(*) FROM derived.orders_summary")
            .unwrap()
    );
    assert_eq!(
        db.value(&format!(
            "SELECT has_table_privilege('{role}', 'reports.open_orders', 'SELECT')"
        ))
        .as_deref(),
        Some("true")
    );

    // v3 drops `status`, which reports.open_orders reads: the swap fails
    // and v2 stays published, its dependents intact.
    let v3_select = v2_select.replace(", upper(status) AS status", "");
    walfill.configure(
        &db,
        &recreate(&orders_target("v3").replace(ORDERS_SELECT, &v3_select)),
    );
    let out = walfill.run(&["backfill", "orders_summary"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("reports.open_orders depends on the view and no longer fits"),
        "{stderr}"
    );
    assert_eq!(
        db.value("SELECT version FROM walfill.versions WHERE phase = 'active'")
            .as_deref(),
        Some("v2")
    );
    assert_eq!(
        db.value("SELECT count(*) FROM reports.open_orders")
            .unwrap(),
        open
    );
}

/// `rollback` with nothing published before the active version names the
/// built, ready versions and the `swap` that publishes one.
#[test]
fn rollback_without_a_previous_version_names_the_ready_ones() {
    use crate::support::workload::{create_orders, orders_target};
    let db = TestDb::new("sw_no_previous");
    create_orders(&db, 100);
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    walfill.configure(&db, &orders_target("v1_r1"));
    walfill.ok(&["backfill", "orders_summary", "--no-swap"]);
    let out = walfill.run(&["rollback", "orders_summary"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("built and ready: v1_r1")
            && stderr.contains("`walfill swap orders_summary v1_r1` publishes one"),
        "{stderr}"
    );
}
