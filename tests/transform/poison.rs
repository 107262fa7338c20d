//! Rows the transform fails on: dead letters, a stream that goes on, filters that guard the select list

use super::*;

/// A row the transform fails on under a key the version has never held
/// (the fresh-insert path) is a dead letter; the rows after it arrive and
/// the stream goes on.
#[test]
fn a_poison_row_under_a_new_key_never_stops_the_stream() {
    let db = TestDb::new("tx_poison");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g FROM generate_series(1, 50) g;",
    );
    let select = "id, 100 / qty AS per";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    db.exec("INSERT INTO stock VALUES (300, 0); INSERT INTO stock VALUES (301, 7);");
    walfill.ok(&["sync", "--once"]);
    assert_eq!(
        db.value("SELECT string_agg(key[1], ',') FROM walfill.dead_letters")
            .as_deref(),
        Some("300")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("id <> 300"),
        "id",
    );
    // Fixed at the source: the key arrives.
    db.exec("UPDATE stock SET qty = 4 WHERE id = 300; INSERT INTO stock VALUES (302, 5);");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, None, "id");
}

/// Poison rows in a source transaction larger than the apply's memory
/// bound: the transaction reaches the destination in pieces that share
/// one destination transaction, and a poison row in an early piece (a new
/// key and a stored one) is a dead letter there too; the transaction
/// arrives whole and the stream goes on.
#[test]
fn a_poison_row_in_a_transaction_larger_than_the_memory_bound() {
    let db = TestDb::new("tx_poison_big");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int, pad text);
         INSERT INTO stock SELECT g, g, 'p' FROM generate_series(1, 50) g;",
    );
    let select = "id, 100 / qty AS per, pad";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\napply_memory_mb = 1\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    // About 8 MiB of changes, the two poison rows first.
    db.exec(
        "BEGIN;
         INSERT INTO stock VALUES (300, 0, 'new key');
         UPDATE stock SET qty = 0 WHERE id = 7;
         INSERT INTO stock SELECT g, g, repeat('x', 200) FROM generate_series(1000, 40999) g;
         COMMIT;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_eq!(
        db.value("SELECT string_agg(key[1], ',' ORDER BY key[1]) FROM walfill.dead_letters")
            .as_deref(),
        Some("300,7")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    db.exec("UPDATE stock SET qty = 4 WHERE qty = 0; INSERT INTO stock VALUES (302, 5, '');");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, None, "id");
}

/// A scoped refresh that copies a row the transform fails on keeps its key
/// out of the version even where a row of the key is stored (drift): the
/// copied row is dropped and its key tombstoned at the refresh's version,
/// and a later fix at the source brings the key back.
#[test]
fn a_refresh_keeps_out_a_stored_key_whose_source_row_fails() {
    let db = TestDb::new("tx_poison_refresh");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 10 FROM generate_series(1, 40) g;",
    );
    let select = "id, 100 / qty AS per";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\n\n[serve]\nlease_seconds = 3\n\
             poll_seconds = 1\nretry_seconds = 1\narchiver = false\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    // Behind walfill's back, two failing keys get rows.
    db.exec(
        "INSERT INTO public.stock_per__v1 (id, per, _walfill_lsn, _walfill_seq, _walfill_deleted) \
         VALUES (10, 999, '0/1', 0, false), (20, 999, '0/1', 0, false)",
    );
    assert_eq!(
        db.value("SELECT count(*) FROM public.stock_per WHERE per = 999")
            .as_deref(),
        Some("2")
    );
    let service = Service::start(&walfill, false, &[]);
    let id = walfill
        .ok(&["request", "stock_per", "--where", "id <= 25"])
        .trim()
        .to_string();
    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(60),
        "the scoped refresh to finish",
        &[&service],
    );
    drop(service);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    db.exec("UPDATE stock SET qty = 3 WHERE id = 10");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    assert_eq!(
        db.value("SELECT per FROM public.stock_per WHERE id = 10")
            .as_deref(),
        Some("33")
    );
}

/// One row in seven failing: the failing rows are set aside in bulk, with
/// one log line per batch (not one per row), and the rest is exact. A
/// transform that fails on more than `max_dead_letter_percent` of the rows
/// read is broken, not its rows: the backfill stops and says so.
#[test]
fn failing_rows_at_density_are_set_aside_in_bulk_and_a_broken_transform_stops() {
    let db = TestDb::new("tx_density");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 7 FROM generate_series(1, 7000) g;",
    );
    let select = "id, 100 / qty AS per";
    let config = |select: &str, extra: &str| {
        format!(
            "[backfill]\nallow_dead_letters = true\ntransform_on = \"destination\"\n\
             chunk_rows = 2000\n{extra}\n{}",
            target("stock_per", "public.stock", select, None)
        )
    };
    let walfill = Walfill::new(&db, &config(select, ""));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "stock_per"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters")
            .as_deref(),
        Some("1000")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    let lines = log
        .lines()
        .filter(|l| l.contains("the transform fails on"))
        .count();
    assert!(
        (1..=4).contains(&lines),
        "{lines} log lines about failing rows, not one per batch:\n{log}"
    );

    // One row in three: past the default 20%.
    db.exec("UPDATE stock SET qty = id % 3");
    let broken = "id, 100 / qty AS per, 1 AS again";
    walfill.configure(
        &db,
        &config(broken, "").replace("version = \"v1\"", "version = \"v2\""),
    );
    let out = walfill.run(&["backfill", "stock_per"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("max_dead_letter_percent = 20") && stderr.contains("division by zero"),
        "{stderr}"
    );
    // A limit that allows it.
    walfill.configure(
        &db,
        &config(broken, "max_dead_letter_percent = 40")
            .replace("version = \"v1\"", "version = \"v2\""),
    );
    walfill.ok(&["backfill", "stock_per"]);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        broken,
        Some("qty <> 0"),
        "id",
    );
}

/// A filter that guards the select list (`qty <> 0` before `100 / qty`)
/// keeps the rows it rejects away from the select list: in the copy (on
/// either side) and in the stream, fresh keys and stored ones.
fn a_guarding_filter_comes_first(transform_on: &str) {
    let db = TestDb::new("tx_guard");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 5 FROM generate_series(1, 400) g;",
    );
    let (select, filter) = ("id, 100 / qty AS per", "qty <> 0");
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\ntransform_on = \"{transform_on}\"\nchunk_rows = 100\n\n{}",
            target("stock_per", "public.stock", select, Some(filter))
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, Some(filter), "id");
    db.exec(
        "INSERT INTO stock VALUES (1000, 0), (1001, 3);
         UPDATE stock SET qty = 0 WHERE id IN (1, 2);
         UPDATE stock SET qty = 2 WHERE id = 5;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, Some(filter), "id");
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters")
            .as_deref(),
        Some("0"),
        "a row the filter rejects is no dead letter"
    );
}

#[test]
fn a_guarding_filter_comes_first_when_the_source_evaluates() {
    a_guarding_filter_comes_first("auto");
}

#[test]
fn a_guarding_filter_comes_first_when_the_destination_evaluates() {
    a_guarding_filter_comes_first("destination");
}

/// `dead-letters --retry` goes through the apply loop a page at a time
/// with a durable cursor: killed after its first page, the next retry goes
/// on after the last letter settled (no letter is tried twice by one
/// retry), and once the cause is fixed every letter applies.
#[test]
fn a_dead_letter_retry_killed_part_way_goes_on_after_its_last_letter() {
    let db = TestDb::new("tx_retry");
    let per = |body: &str| {
        format!(
            "CREATE OR REPLACE FUNCTION public.per(id int, qty int) RETURNS int
             LANGUAGE sql IMMUTABLE AS $f$ SELECT {body} $f$"
        )
    };
    db.exec(&format!(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 7 FROM generate_series(1, 7000) g;
         {};",
        per("100 / qty")
    ));
    let select = "id, public.per(id, qty) AS per";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\ntransform_on = \"destination\"\n\
             chunk_rows = 2000\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    let letters = "SELECT count(*) FROM walfill.dead_letters";
    assert_eq!(db.value(letters).as_deref(), Some("1000"));

    // Half the cause fixed: the even keys apply, the odd fail again. The
    // retry dies after its first page (500 letters).
    db.exec(&per(
        "CASE WHEN qty = 0 AND id % 2 = 0 THEN -1 ELSE 100 / qty END",
    ));
    let killed = walfill.run_env(
        &["dead-letters", "stock_per", "--retry"],
        &[("WALFILL_FAILPOINTS", "letters.batch@1")],
    );
    let stderr = String::from_utf8_lossy(&killed.stderr);
    assert!(
        !killed.status.success() && stderr.contains("failpoint letters.batch reached"),
        "{stderr}"
    );
    let tried = "SELECT count(*) FILTER (WHERE attempts = 2) || '/' || count(*) \
                 FROM walfill.dead_letters";
    let after_first = db.value(tried).unwrap();
    let (twice, left) = after_first.split_once('/').unwrap();
    let (twice, left): (i64, i64) = (twice.parse().unwrap(), left.parse().unwrap());
    assert!(
        twice > 0 && left - twice > 0 && left > 500,
        "the first page settled, the rest untried: {after_first}"
    );

    let out = walfill.run(&["dead-letters", "stock_per", "--retry"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("resuming the retry after the last letter an earlier one settled"),
        "{stderr}"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    // Of the letters the first retry left, the odd keys' fail again.
    let untried = left - twice;
    let odd_untried = 500 - twice;
    assert!(
        said.contains(&format!(
            "{} dead letter(s) applied, {odd_untried} still failing",
            untried - odd_untried
        )),
        "only the {untried} letters the first retry left: {said}"
    );
    assert_eq!(
        db.value(
            "SELECT count(*) || '/' || min(attempts) || '/' || max(attempts) \
                  FROM walfill.dead_letters"
        )
        .as_deref(),
        Some("500/2/2"),
        "every odd key's letter tried again exactly once"
    );

    // The cause fixed: every letter applies, and the view is whole.
    db.exec(&per("CASE WHEN qty = 0 THEN -1 ELSE 100 / qty END"));
    let said = walfill.ok(&["dead-letters", "stock_per", "--retry"]);
    assert!(
        said.contains("500 dead letter(s) applied, 0 still failing"),
        "{said}"
    );
    assert_eq!(db.value(letters).as_deref(), Some("0"));
    assert_view_matches(&db, "public.stock_per", "stock", select, None, "id");
}
