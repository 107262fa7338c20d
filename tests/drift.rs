//! Schema drift a version meets while it follows: enum labels added on the
//! source (`ALTER TYPE ... ADD VALUE`) that the destination's type lacks.

use std::time::Duration;

use crate::support::service::Background;
use crate::support::{assert_view_matches_in, TestDb, Walfill};

const SELECT: &str = "id, feeling";

/// A source and a destination database that both have type `mood`, a table
/// `people` of it in the source, and a published version of `feelings`.
fn published(tag: &str, sync_labels: bool) -> (TestDb, TestDb, Walfill) {
    let src = TestDb::new(&format!("{tag}_src"));
    let dest = TestDb::new(&format!("{tag}_dest"));
    src.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE people (id int PRIMARY KEY, feeling mood);
         INSERT INTO people SELECT g, (ARRAY['sad','ok','happy']::mood[])[1 + g % 3]
           FROM generate_series(1, 30) g;",
    );
    dest.exec("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');");
    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n\
         [[target]]\nname = \"feelings\"\nsource = \"public.people\"\nselect = \"{SELECT}\"\n\
         version = \"v1\"\nsync_enum_labels = {sync_labels}\n",
        src.url(),
        dest.url()
    ));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "feelings"]);
    (src, dest, walfill)
}

fn labels(db: &TestDb) -> String {
    db.value(
        "SELECT string_agg(enumlabel::text, ',' ORDER BY enumsortorder) FROM pg_enum
          WHERE enumtypid = 'mood'::regtype",
    )
    .unwrap_or_default()
}

/// A label added on the source stops the version with the DDL that fixes
/// it; a running `sync` waits, and goes on by itself once the label is
/// added in the destination (no signal, no restart).
#[test]
fn an_enum_label_added_on_the_source_names_its_ddl_and_following_resumes_once_added() {
    let (src, dest, walfill) = published("drift_enum", false);
    src.exec("ALTER TYPE mood ADD VALUE 'meh' AFTER 'sad'");
    src.exec("INSERT INTO people VALUES (100, 'meh'), (101, 'ok')");
    let out = walfill.run(&["sync", "--once"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{log}");
    assert!(
        log.contains("ALTER TYPE \"public\".\"mood\" ADD VALUE IF NOT EXISTS 'meh' AFTER 'sad';")
            && log.contains("sync_enum_labels = true"),
        "{log}"
    );
    // Nothing was stored: the version stays where it was.
    assert_eq!(
        dest.value("SELECT count(*) FROM feelings WHERE id >= 100"),
        Some("0".into())
    );

    let _sync = Background::start(&walfill, &["sync"]);
    dest.wait_for(
        "SELECT last_error LIKE '%ADD VALUE IF NOT EXISTS ''meh''%' FROM walfill.versions",
        Duration::from_secs(60),
        "the waiting follower to record the fix",
    );
    let status = walfill.ok(&["status"]);
    assert!(status.contains("'meh'"), "{status}");
    dest.exec("ALTER TYPE mood ADD VALUE 'meh' AFTER 'sad'");
    dest.wait_for(
        "SELECT count(*) = 2 FROM feelings WHERE id >= 100",
        Duration::from_secs(60),
        "the version to go on once the destination has the label",
    );
    src.exec("INSERT INTO people VALUES (102, 'happy')");
    dest.wait_for(
        "SELECT count(*) = 3 FROM feelings WHERE id >= 100",
        Duration::from_secs(60),
        "later changes to follow",
    );
    assert_view_matches_in(&src, &dest, "feelings", "people", SELECT, None, "id");
}

/// With `sync_enum_labels = true`, walfill adds the source's new labels in
/// the destination at the source's positions (before the first label,
/// between two, at the end), each committed on its own, and goes on.
#[test]
fn sync_enum_labels_adds_the_labels_at_the_sources_positions() {
    let (src, dest, walfill) = published("drift_enum_sync", true);
    // Each ADD VALUE commits before a row uses its label.
    src.exec("ALTER TYPE mood ADD VALUE 'meh' AFTER 'sad'");
    src.exec("ALTER TYPE mood ADD VALUE 'grim' BEFORE 'sad'");
    src.exec("ALTER TYPE mood ADD VALUE 'elated'");
    src.exec(
        "INSERT INTO people VALUES (100, 'meh'), (101, 'grim'), (102, 'elated');
         UPDATE people SET feeling = 'meh' WHERE id = 3;",
    );
    let out = walfill.run(&["sync", "--once"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("added an enum label the source has to the destination"),
        "{log}"
    );
    assert_eq!(labels(&dest), "grim,sad,meh,ok,happy,elated");
    assert_eq!(labels(&dest), labels(&src));
    assert_view_matches_in(&src, &dest, "feelings", "people", SELECT, None, "id");
    // The labels order the same on both sides.
    assert_eq!(
        dest.value("SELECT string_agg(id::text, ',' ORDER BY feeling, id) FROM feelings"),
        src.value("SELECT string_agg(id::text, ',' ORDER BY feeling, id) FROM people")
    );
}

/// A backfill that copies rows carrying a label the destination lacks
/// stops with the DDL; with `sync_enum_labels` it adds it and finishes.
#[test]
fn a_backfill_meets_a_new_label_in_the_copy() {
    let (src, dest, walfill) = published("drift_enum_copy", false);
    src.exec("ALTER TYPE mood ADD VALUE 'meh'");
    src.exec("UPDATE people SET feeling = 'meh' WHERE id % 5 = 0");
    let with_version = |version: &str, sync_labels: bool| {
        walfill.write_config(&format!(
            "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n\
             [[target]]\nname = \"feelings\"\nsource = \"public.people\"\n\
             select = \"{SELECT}\"\nversion = \"{version}\"\nsync_enum_labels = {sync_labels}\n",
            src.url(),
            dest.url()
        ))
    };
    with_version("v2", false);
    let out = walfill.run(&["backfill", "feelings"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{log}");
    assert!(
        log.contains("ADD VALUE IF NOT EXISTS 'meh' AFTER 'happy';"),
        "{log}"
    );
    with_version("v2", true);
    walfill.ok(&["backfill", "feelings"]);
    assert_eq!(labels(&dest), labels(&src));
    assert_view_matches_in(&src, &dest, "feelings", "people", SELECT, None, "id");
}

/// `setup` over a destination that lacks an enum type the table uses gives
/// the `CREATE TYPE` that makes it, with the source's labels in order; run
/// as given, it lets setup pass.
#[test]
fn setup_gives_the_ddl_of_an_enum_type_the_destination_lacks() {
    let src = TestDb::new("drift_enum_type_src");
    let dest = TestDb::new("drift_enum_type_dest");
    src.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE people (id int PRIMARY KEY, feeling mood);",
    );
    src.exec("ALTER TYPE mood ADD VALUE 'meh' AFTER 'sad'");
    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n\
         [[target]]\nname = \"feelings\"\nsource = \"public.people\"\nselect = \"{SELECT}\"\n\
         version = \"v1\"\n",
        src.url(),
        dest.url()
    ));
    let out = walfill.run(&["setup"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{log}");
    let ddl = "CREATE TYPE \"public\".\"mood\" AS ENUM ('sad', 'meh', 'ok', 'happy');";
    assert!(log.contains(ddl), "{log}");
    dest.exec(ddl);
    walfill.ok(&["setup"]);
    assert_eq!(labels(&dest), labels(&src));
}
