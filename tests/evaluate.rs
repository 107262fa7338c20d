//! Where a snapshot copy evaluates the transform: on the source when it
//! gives the same values there (its finished rows are then copied straight
//! into the version), in the destination otherwise. Either way the version
//! holds what the destination's own evaluation gives, row by row, its
//! tombstones and remembered columns included.

use crate::support::{assert_view_matches, cluster, TestDb, Walfill};

/// A transform of built-in immutable functions, `date_trunc` over a
/// `timestamptz` (which reads only the pinned `TimeZone`), and a filter.
const SELECT: &str = "id, upper(status) AS status, total_cents / 100.0 AS total, \
                      date_trunc('day', created_at) AS day, coalesce(note, '-') AS note";
const WHERE: &str = "status <> 'test'";

/// `events` with `rows` rows, and database defaults that would change
/// values if a session did not pin its own settings.
fn create_events(db: &TestDb, rows: i64) {
    db.exec(&format!(
        "CREATE TABLE events (
             id bigint PRIMARY KEY, status text NOT NULL, total_cents bigint,
             created_at timestamptz NOT NULL, note text);
         INSERT INTO events
         SELECT g, CASE WHEN g % 10 = 0 THEN 'test' ELSE 'open é' END, g * 7,
                timestamptz '2026-03-29 00:30:00+00' + g * interval '17 minutes',
                CASE WHEN g % 3 = 0 THEN NULL ELSE repeat('note ', g % 400) END
           FROM generate_series(1, {rows}) g;
         ANALYZE events;
         ALTER DATABASE {} SET TimeZone = 'Pacific/Chatham';
         ALTER DATABASE {} SET DateStyle = 'SQL, DMY';",
        db.name, db.name
    ));
}

fn target(version: &str, select: &str, filter: Option<&str>) -> String {
    format!(
        "[[target]]\nname = \"ev_{version}\"\nsource = \"public.events\"\nselect = \"{select}\"\n\
         {}version = \"{version}\"\nschema = \"derived\"\n",
        filter
            .map(|f| format!("where = \"{f}\"\n"))
            .unwrap_or_default()
    )
}

/// Backfills target `ev_VERSION` without swapping; returns walfill's log.
fn backfill(walfill: &Walfill, version: &str) -> String {
    let out = walfill.run(&["backfill", &format!("ev_{version}"), "--no-swap"]);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "backfill of {version} failed:\n{log}");
    log
}

/// Every row of version table `table` (derived rows, tombstones and the
/// columns walfill remembers), as text, in key order.
fn version_rows(db: &TestDb, table: &str) -> Vec<String> {
    let mut client = crate::support::compare::pinned_client(db);
    let columns: Vec<String> = client
        .query(
            "SELECT quote_ident(attname) FROM pg_attribute
              WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped
                AND attname NOT IN ('_walfill_lsn', '_walfill_seq') ORDER BY attnum",
            &[&table],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let sql = format!(
        "SELECT ROW({})::text FROM {table} ORDER BY id",
        columns.join(", ")
    );
    client
        .query(&sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The same version built by both ways, with the copy `mode`, holds the
/// same rows, and the way taken is the one logged.
fn same_rows_both_ways(mode: &str) {
    let db = TestDb::new("eval_same");
    create_events(&db, 6_000);
    let settings = format!("[backfill]\nsnapshot = \"{mode}\"\nchunk_rows = 700\n");
    let targets = format!(
        "{}\n{}",
        target("dest", SELECT, Some(WHERE)),
        target("src", SELECT, Some(WHERE))
    );
    let walfill = Walfill::new(&db, &format!("{settings}\n{targets}"));
    walfill.ok(&["setup"]);
    walfill.write_config(&format!(
        "[source]\nurl = \"{}\"\n{}transform_on = \"destination\"\n\n{targets}",
        db.url(),
        settings
    ));
    let log = backfill(&walfill, "dest");
    assert!(log.contains("through the transform"), "{log}");
    walfill.configure(&db, &format!("{settings}\n{targets}"));
    let log = backfill(&walfill, "src");
    assert!(
        log.contains("transformed on the source and copied straight in"),
        "{log}"
    );
    let (by_dest, by_src) = (
        version_rows(&db, "derived.ev_dest__dest"),
        version_rows(&db, "derived.ev_src__src"),
    );
    assert_eq!(by_dest.len(), 6_000, "a row or tombstone per key");
    assert!(by_dest == by_src, "the two ways stored different rows");
    walfill.ok(&["swap", "ev_src", "src"]);
    assert_view_matches(&db, "derived.ev_src", "events", SELECT, Some(WHERE), "id");
}

#[test]
fn an_exported_copy_transformed_on_the_source_stores_what_the_destination_would() {
    same_rows_both_ways("exported");
}

#[test]
fn a_chunked_copy_transformed_on_the_source_stores_what_the_destination_would() {
    same_rows_both_ways("chunked");
}

/// A row the transform fails on: the source's COPY stops there, the chunk
/// is read again as the table's rows, and from then on the destination
/// evaluates the transform, where that row becomes a dead letter.
fn failing_row_falls_back(mode: &str) {
    let db = TestDb::new("eval_fail");
    create_events(&db, 6_000);
    let select = "id, total_cents / (id - 3500) AS ratio, upper(status) AS status";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nsnapshot = \"{mode}\"\nchunk_rows = 1000\nallow_dead_letters = true\n\n{}",
            target("v1", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "ev_v1", "--no-swap"]);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        log.contains("transformed on the source and copied straight in")
            && log.contains("the transform failed on the source"),
        "{log}"
    );
    assert_eq!(
        db.value("SELECT string_agg(key[1], ',') FROM walfill.dead_letters")
            .as_deref(),
        Some("3500"),
        "{log}"
    );
    assert_eq!(
        db.value("SELECT count(*) FROM derived.ev_v1__v1 WHERE NOT _walfill_deleted")
            .as_deref(),
        Some("5999"),
        "every other row is stored once:\n{log}"
    );
    let mut client = crate::support::compare::pinned_client(&db);
    let expected = client
        .query(
            &format!(
                "SELECT t::text FROM (SELECT {select} FROM events WHERE id <> 3500) t ORDER BY id"
            ),
            &[],
        )
        .unwrap();
    let actual = client
        .query(
            "SELECT t::text FROM (SELECT id, ratio, status FROM derived.ev_v1__v1
               WHERE NOT _walfill_deleted) t ORDER BY id",
            &[],
        )
        .unwrap();
    let text =
        |rows: Vec<postgres::Row>| -> Vec<String> { rows.iter().map(|r| r.get(0)).collect() };
    assert!(
        text(expected) == text(actual),
        "the version differs from the transform"
    );
}

#[test]
fn an_exported_copy_falls_back_to_the_destination_at_a_row_the_source_fails_on() {
    failing_row_falls_back("exported");
}

#[test]
fn a_chunked_copy_falls_back_to_the_destination_at_a_row_the_source_fails_on() {
    failing_row_falls_back("chunked");
}

/// Transforms that could give another value on the source stay in the
/// destination, and the log says why.
#[test]
fn transforms_that_might_differ_on_the_source_run_in_the_destination() {
    let db = TestDb::new("eval_not");
    create_events(&db, 300);
    db.exec(
        "CREATE FUNCTION public.twice(bigint) RETURNS bigint LANGUAGE sql IMMUTABLE
           AS 'SELECT $1 * 2'",
    );
    let cases = [
        ("cast", "id, total_cents::text AS t", "a cast through text"),
        ("own", "id, public.twice(id) AS t", "it calls twice(bigint)"),
        (
            "zone",
            "id, timezone('Europe/Paris', created_at) AS t",
            "it calls timezone(text,timestamp with time zone)",
        ),
        (
            "stable",
            "id, to_char(created_at, 'YYYY') AS t",
            "it calls to_char",
        ),
    ];
    let targets: String = cases
        .iter()
        .map(|(version, select, _)| target(version, select, None))
        .collect::<Vec<_>>()
        .join("\n");
    let walfill = Walfill::new(&db, &targets);
    walfill.ok(&["setup"]);
    for (version, select, why) in cases {
        let log = backfill(&walfill, version);
        assert!(
            log.contains("where the transform runs") && log.contains(why),
            "{select}: no {why:?} in the log:\n{log}"
        );
        assert!(log.contains("through the transform"), "{select}:\n{log}");
    }
}

/// A source database whose character classification differs from the
/// destination's: `upper('é')` differs between them. The servers' defaults
/// differ, so the transform runs in the destination, over a work table
/// whose column carries the destination's collation that matches the
/// source's default: the version holds the source's `upper()`, the meaning
/// of the transform on the source table.
#[test]
fn another_collation_on_the_source_keeps_the_transform_in_the_destination() {
    let name = format!("wf_eval_utf8_{}", std::process::id());
    cluster::connect(&cluster::admin_url())
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8'"
        ))
        .expect("creating a C.UTF-8 database");
    let src = TestDb::existing(&cluster::admin_url(), &name);
    let dest = TestDb::new("eval_c");
    src.exec(
        "CREATE TABLE words (id int PRIMARY KEY, word text); INSERT INTO words VALUES (1, 'é');",
    );
    let upper = |db: &TestDb| db.value("SELECT upper('é')").unwrap();
    assert_ne!(
        upper(&src),
        upper(&dest),
        "the two databases classify alike"
    );
    let log = backfill_words_up(&src, &dest);
    assert!(
        log.contains("the servers differ") && log.contains("through the transform"),
        "{log}"
    );
    assert_eq!(
        dest.value("SELECT word FROM public.words_up WHERE id = 1"),
        Some(upper(&src)),
        "the version holds the source's upper()"
    );
}

/// A function of the same name in the source's `public` that matches the
/// transform's argument better than the built-in one the destination chose
/// (`upper(varchar)` against `upper(text)`): the source evaluates the
/// built-in one, as the destination does.
#[test]
fn a_shadowing_function_on_the_source_is_not_what_the_source_evaluates() {
    let src = TestDb::new("eval_shadow_src");
    let dest = TestDb::new("eval_shadow_dest");
    src.exec(
        "CREATE TABLE words (id int PRIMARY KEY, word varchar(20));
         INSERT INTO words SELECT g, 'word ' || g FROM generate_series(1, 2000) g;
         CREATE FUNCTION public.upper(varchar) RETURNS text LANGUAGE sql IMMUTABLE
           AS $$ SELECT 'shadow'::text $$;",
    );
    assert_eq!(
        src.value("SELECT upper(word) FROM words WHERE id = 1")
            .as_deref(),
        Some("shadow"),
        "the source's own sessions call the shadowing function"
    );
    let log = backfill_words_up(&src, &dest);
    assert!(
        log.contains("transformed on the source and copied straight in"),
        "{log}"
    );
    assert_eq!(
        dest.value("SELECT count(*) FROM public.words_up WHERE word = 'WORD ' || id")
            .as_deref(),
        Some("2000"),
        "every row holds the built-in upper()"
    );
}

/// Sets up and backfills `upper()` of `public.words` from `src` into
/// `dest`; returns walfill's log.
fn backfill_words_up(src: &TestDb, dest: &TestDb) -> String {
    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n\
         [[target]]\nname = \"words_up\"\nsource = \"public.words\"\n\
         select = \"id, upper(word) AS word\"\nversion = \"v1\"\n",
        src.url(),
        dest.url()
    ));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "words_up"]);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    log
}
