//! Roles holding exactly the privileges the README's table lists run every
//! command: a superuser only for the first `setup` (the catalog journal) and
//! for `teardown`; the daily source role has REPLICATION, SELECT on the
//! table and EXECUTE on pg_switch_wal(); the destination role has CREATE on
//! its database.

use std::process::Output;

use crate::archiver::LocalArchive;
use crate::support::cluster::{admin_url, archive_url, connect, drop_slots};
use crate::support::role::Role;
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches_in, TestDb, Walfill};

/// What a person reads carries its cause and no Rust debug formatting.
fn assert_readable(args: &[&str], out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    for leak in ["db error", "Some(", "Lsn(", "\u{1b}["] {
        assert!(
            !stderr.contains(leak),
            "walfill {args:?} printed {leak:?}:\n{stderr}"
        );
    }
}

fn ok(walfill: &Walfill, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = walfill.run_env(args, env);
    assert_readable(args, &out);
    assert!(
        out.status.success(),
        "walfill {args:?} failed with {}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(walfill: &Walfill, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = walfill.run_env(args, env);
    assert_readable(args, &out);
    assert!(!out.status.success(), "walfill {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn every_command_runs_with_the_documented_grants() {
    let daily = Role::create("priv_src", "REPLICATION");
    let owner = Role::create("priv_dst", "");
    let src = TestDb::new("priv_src");
    let dst = TestDb::new("priv_dst");
    create_orders(&src, 3_000);
    src.exec(&format!(
        "GRANT SELECT ON public.orders TO {daily};
         GRANT EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() TO {daily};",
        daily = daily.0
    ));
    dst.exec(&format!(
        "GRANT CREATE ON DATABASE {} TO {}",
        dst.name, owner.0
    ));

    let config = |version: &str, select: &str| {
        format!(
            "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n[archive]\nurl = \"{}\"\n\
             wait_seconds = 120\n{}",
            daily.url(&src),
            owner.url(&dst),
            archive_url(),
            orders_target(version).replace(ORDERS_SELECT, select)
        )
    };
    let walfill = Walfill::with_text(&config("v1", ORDERS_SELECT));
    let superuser = src.url();
    let as_superuser = [("WALFILL_SOURCE_URL", superuser.as_str())];

    // Without a superuser, the first setup names the one step that needs
    // one and how to run it, and writes nothing.
    let err = fails(&walfill, &["setup"], &[]);
    assert!(
        err.contains("needs a superuser") && err.contains("WALFILL_SOURCE_URL="),
        "{err}"
    );
    assert!(!err.contains("ALTER ROLE"), "{err}");
    assert_eq!(
        dst.value("SELECT count(*) FROM pg_namespace WHERE nspname = 'walfill'")
            .as_deref(),
        Some("0")
    );
    // The first setup with a superuser's source URL; a rerun as the daily
    // role finds everything in place and changes nothing.
    let first = ok(&walfill, &["setup"], &as_superuser);
    assert!(first.contains("catalog journal installed"), "{first}");
    let again = ok(&walfill, &["setup"], &[]);
    assert!(!again.contains("installed"), "{again}");

    // Without pg_switch_wal(), the plan says once why it cannot wait for
    // the newest WAL, and how to grant it.
    src.exec(&format!(
        "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() FROM {}",
        daily.0
    ));
    let out = walfill.run(&["plan", "orders_summary"]);
    assert_readable(&["plan"], &out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("may not call pg_switch_wal()").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("GRANT EXECUTE ON FUNCTION pg_catalog.pg_switch_wal()"),
        "{err}"
    );
    src.exec(&format!(
        "GRANT EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() TO {}",
        daily.0
    ));

    // v1 is copied (the table is older than the journal), which writes a
    // base snapshot; v2 is replayed from it while writes go on.
    let plan = ok(&walfill, &["plan", "orders_summary"], &[]);
    assert!(plan.contains(": snapshot"), "{plan}");
    ok(&walfill, &["backfill", "orders_summary"], &[]);
    let writer = Writer::start(&src, 3_000, 100_000, 11);
    writer.wait_for_ops(50);
    writer.stop();
    let v2_select = "id, customer_id, lower(status) AS status, total_cents, note";
    walfill.write_config(&config("v2", v2_select));
    let plan = ok(&walfill, &["plan", "orders_summary"], &[]);
    assert!(plan.contains(": replay"), "{plan}");
    ok(
        &walfill,
        &["backfill", "orders_summary", "--path", "replay"],
        &[],
    );
    let view = "derived.orders_summary";
    assert_view_matches_in(
        &src,
        &dst,
        view,
        "orders",
        v2_select,
        Some(ORDERS_WHERE),
        "id",
    );

    // Live changes, rollback and swap.
    src.exec("UPDATE orders SET note = 'changed' WHERE id <= 100; DELETE FROM orders WHERE id = 7");
    ok(&walfill, &["sync", "--once"], &[]);
    assert_view_matches_in(
        &src,
        &dst,
        view,
        "orders",
        v2_select,
        Some(ORDERS_WHERE),
        "id",
    );
    ok(&walfill, &["rollback", "orders_summary"], &[]);
    assert_view_matches_in(
        &src,
        &dst,
        view,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
    ok(&walfill, &["swap", "orders_summary", "v2"], &[]);
    assert_view_matches_in(
        &src,
        &dst,
        view,
        "orders",
        v2_select,
        Some(ORDERS_WHERE),
        "id",
    );
    let status = ok(&walfill, &["status"], &[]);
    assert!(status.contains("v2"), "{status}");
    // The replayed version reports what it stored and the WAL it read.
    let report: serde_json::Value =
        serde_json::from_str(&ok(&walfill, &["status", "--json"], &[])).expect("JSON");
    let v2 = report["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["version"] == "v2"))
        .expect("v2 in status");
    assert_eq!(v2["path"], "replay", "{v2:#}");
    assert!(v2["rows_copied"].as_i64().unwrap_or(0) > 0, "{v2:#}");
    assert!(v2["wal_total_bytes"].as_i64().unwrap_or(0) > 0, "{v2:#}");

    // Decoding the archive with the daily role's catalog.
    let from = src.value("SELECT pg_current_wal_lsn()").expect("an LSN");
    src.exec("INSERT INTO orders VALUES (999999, 1, 'open', 1, 'decoded')");
    src.archive_wal();
    let decoded = ok(
        &walfill,
        &[
            "decode",
            "--from",
            &from,
            "--table",
            "public.orders",
            "--format",
            "test_decoding",
        ],
        &[],
    );
    assert!(decoded.contains("note[text]:'decoded'"), "{decoded}");

    // The archiver streams through a physical slot of the daily role.
    let archive = LocalArchive::new("priv");
    let archiving = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n\n{}",
        daily.url(&src),
        archive.section()
    ));
    let until = src.value("SELECT pg_current_wal_lsn()").expect("an LSN");
    let slot = format!("{}_archive", daily.0);
    let archived = archiving.run_env(
        &["archive", "--slot", &slot, "--once-until-lsn", &until],
        &[],
    );
    drop_slots(&mut connect(&admin_url()), "slot_name", &slot);
    assert_readable(&["archive"], &archived);
    assert!(
        archived.status.success(),
        "{}",
        String::from_utf8_lossy(&archived.stderr)
    );
    assert!(!archive.files().is_empty());

    // Removing the journal needs a superuser again, and says so.
    let err = fails(&walfill, &["teardown"], &[]);
    assert!(err.contains("needs a superuser"), "{err}");
    ok(&walfill, &["teardown"], &as_superuser);
    assert_eq!(
        src.value("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'walfill%'")
            .as_deref(),
        Some("0")
    );
}

/// Every fix `setup` prints for roles with no privileges at all, run in
/// the order printed, in the database it names, makes the next `setup`
/// pass: each one is valid SQL, and together they are enough.
#[test]
fn setups_fixes_run_in_order_make_it_pass() {
    let daily = Role::create("priv_bare_src", "");
    let owner = Role::create("priv_bare_dst", "");
    let src = TestDb::new("fix_src");
    let dst = TestDb::new("fix_dst");
    create_orders(&src, 100);
    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n{}",
        daily.url(&src),
        owner.url(&dst),
        orders_target("v1")
    ));
    let err = fails(&walfill, &["setup"], &[]);
    assert!(
        err.contains("problems found (fix them in this order)"),
        "{err}"
    );
    let fixes: Vec<(Option<String>, String)> = err
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once("; fix (as ")?;
            let (whom, sql) = rest.split_once("): ")?;
            let database = whom
                .split_once(", in database ")
                .map(|(_, d)| d.to_string());
            Some((database, sql.to_string()))
        })
        .collect();
    assert!(fixes.len() >= 4, "{err}");
    let position = |what: &str| {
        fixes
            .iter()
            .position(|(_, sql)| sql.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} fix in:\n{err}"))
    };
    assert!(position("ALTER ROLE") < position("GRANT SELECT"), "{err}");
    assert!(
        position("GRANT SELECT") < position("CREATE PUBLICATION"),
        "{err}"
    );
    for (database, sql) in &fixes {
        let url = match database.as_deref() {
            Some(name) if name == dst.name => dst.url(),
            Some(name) => {
                assert_eq!(name, src.name, "a fix names an unknown database: {sql}");
                src.url()
            }
            None => src.url(),
        };
        connect(&url)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("the fix {sql} failed: {e}\n{err}"));
    }
    let done = ok(&walfill, &["setup"], &[]);
    assert!(done.contains("setup complete"), "{done}");
}
