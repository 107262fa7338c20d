//! `walfill verify` is a sound oracle: it passes on a version that equals
//! the transform of its source and fails on one with a row changed, a row
//! added (anywhere, above the source's last key too) or a row removed;
//! rows the transform fails on are expected absent, and keys are compared
//! by key whatever order the destination's collation gives them.

use crate::support::service::verify_followed as verify;
use crate::support::{assert_view_matches, TestDb, Walfill};

fn target(name: &str, source: &str, select: &str) -> String {
    format!(
        "[[target]]\nname = \"{name}\"\nsource = \"{source}\"\nselect = \"{select}\"\n\
         version = \"v1\"\n"
    )
}

/// Asserts `verify` reports a difference (exit 3) mentioning `what`.
fn fails(walfill: &Walfill, target: &str, what: &str) {
    match verify(walfill, target) {
        Ok(out) => panic!("verify passed on a wrong version ({what}):\n{out}"),
        Err((code, stderr)) => {
            assert_eq!(code, Some(3), "{stderr}");
            assert!(stderr.contains(what), "expected {what:?} in:\n{stderr}");
        }
    }
}

#[test]
fn verify_fails_on_a_row_changed_added_or_removed_anywhere() {
    let db = TestDb::new("vf_sound");
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, price int);
         INSERT INTO items SELECT g * 2, g * 3 FROM generate_series(1, 500) g;",
    );
    let select = "id, price * 2 AS double";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 100\n\n{}",
            target("items2", "public.items", select)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items2"]);
    assert_view_matches(&db, "public.items2", "items", select, None, "id");
    let out = verify(&walfill, "items2").expect("verify passes on the right version");
    assert!(out.contains("500 rows in 5 ranges"), "{out}");

    let table = "items2__v1";
    db.exec(&format!("UPDATE {table} SET double = -1 WHERE id = 500"));
    fails(&walfill, "items2", "keys after 400 up to 600");
    db.exec(&format!("UPDATE {table} SET double = 1500 WHERE id = 500"));

    // Above the source's last key, below its first, between two.
    for stray in [2000, 0, 251] {
        db.exec(&format!(
            "INSERT INTO {table} (id, double, _walfill_lsn, _walfill_seq)
             VALUES ({stray}, 7, '0/1', 0)"
        ));
        fails(
            &walfill,
            "items2",
            &format!("whose keys the source does not have (keys {stray})"),
        );
        db.exec(&format!("DELETE FROM {table} WHERE id = {stray}"));
    }

    db.exec(&format!("DELETE FROM {table} WHERE id = 1000"));
    fails(
        &walfill,
        "items2",
        "up to 1000: the transform of the source has 100 rows, the version 99",
    );
    db.exec(&format!(
        "INSERT INTO {table} (id, double, _walfill_lsn, _walfill_seq) VALUES (1000, 3000, '0/1', 0)"
    ));
    verify(&walfill, "items2").expect("verify passes once the version is right again");

    // An empty source: every live row of the version is a stray.
    db.exec("DELETE FROM items");
    walfill.ok(&["sync", "--once"]);
    db.exec(&format!(
        "INSERT INTO {table} (id, double, _walfill_lsn, _walfill_seq) VALUES (9000, 1, '0/1', 0)"
    ));
    fails(&walfill, "items2", "(keys 9000)");
}

/// With dead letters allowed and verify before the swap, a backfill over
/// rows the transform fails on finishes: verify leaves their keys out and
/// reports them. A live row under such a key is a difference.
#[test]
fn verify_expects_the_rows_the_transform_fails_on_to_be_absent() {
    let db = TestDb::new("vf_dead");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 50 FROM generate_series(1, 400) g;",
    );
    let select = "id, 100 / qty AS per";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 100\nallow_dead_letters = true\nverify_before_swap = true\n\n{}",
            target("stock_per", "public.stock", select)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters")
            .as_deref(),
        Some("8")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    let out = verify(&walfill, "stock_per").expect("verify passes");
    assert!(
        out.contains("the transform fails on 8 source row(s)")
            && out.contains("0 of them have no dead letter"),
        "{out}"
    );
    db.exec(
        "INSERT INTO stock_per__v1 (id, per, _walfill_lsn, _walfill_seq, _walfill_deleted)
         VALUES (50, 1, '0/1', 0, false)
         ON CONFLICT (id) DO UPDATE SET per = 1, _walfill_deleted = false, _walfill_lsn = '0/1'",
    );
    fails(&walfill, "stock_per", "keys after the start up to 100");
}

/// An ICU source and a destination that orders text keys by code point:
/// ranges cut in the source's order hold other keys in the destination's,
/// so verify compares by key.
#[test]
fn verify_compares_by_key_whatever_order_the_destination_gives() {
    let src = TestDb::with_options(
        "vf_icu_src",
        "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und' LOCALE 'C'",
    );
    let dest = TestDb::with_options("vf_icu_dst", "TEMPLATE template0 LOCALE 'C.UTF-8'");
    src.exec(
        "CREATE TABLE words (k text PRIMARY KEY, n int);
         INSERT INTO words VALUES ('a', 1), ('B', 2), ('c', 3), ('D', 4), ('e', 5), ('F', 6),
                                  ('g', 7), ('H', 8), ('i', 9);",
    );
    let select = "k, n + 1 AS m";
    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n[backfill]\nchunk_rows = 4\n\n{}",
        src.url(),
        dest.url(),
        target("words_m", "public.words", select)
    ));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "words_m"]);
    let out = verify(&walfill, "words_m").expect("a right version passes");
    assert!(out.contains("9 rows in 3 ranges"), "{out}");
    dest.exec("UPDATE words_m__v1 SET m = 0 WHERE k = 'D'");
    fails(&walfill, "words_m", "keys after the start up to D");
}

/// Each difference comes with the `walfill request --where` that repairs
/// it, and running those (a changed range, a stray key) makes the version
/// equal to its source again.
#[test]
fn verify_prints_the_request_that_repairs_each_difference() {
    use crate::support::service::{wait_for, Service};
    use std::time::Duration;
    let db = TestDb::new("vf_fix");
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, price int);
         INSERT INTO items SELECT g * 2, g * 3 FROM generate_series(1, 500) g;",
    );
    let select = "id, price * 2 AS double";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 100\n[serve]\npoll_seconds = 1\narchiver = false\n\n{}",
            target("items2", "public.items", select)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items2"]);
    db.exec(
        "UPDATE items2__v1 SET double = -1 WHERE id = 500;
         INSERT INTO items2__v1 (id, double, _walfill_lsn, _walfill_seq) VALUES (251, 7, '0/1', 0);",
    );
    let (code, stderr) = verify(&walfill, "items2").expect_err("a wrong version");
    assert_eq!(code, Some(3), "{stderr}");
    let problems = stderr.split("error: ").nth(1).expect("the problems");
    let fixes: Vec<&str> = problems
        .split("fix: `")
        .skip(1)
        .map(|rest| rest.split('`').next().unwrap())
        .collect();
    assert_eq!(
        fixes,
        [
            "walfill request items2 --where \"id > '400' AND id <= '600'\"",
            "walfill request items2 --where \"id IN ('251')\""
        ],
        "{stderr}"
    );
    let service = Service::start(&walfill, false, &[]);
    for fix in fixes {
        let scope = fix
            .split("--where \"")
            .nth(1)
            .unwrap()
            .trim_end_matches('"');
        let id = walfill.ok(&["request", "items2", "--where", scope]);
        wait_for(
            &db,
            &format!(
                "SELECT state = 'done' FROM walfill.requests WHERE id = {}",
                id.trim()
            ),
            Duration::from_secs(60),
            "the repair",
            &[&service],
        );
    }
    drop(service);
    verify(&walfill, "items2").expect("verify passes after the printed repairs");
    assert_view_matches(&db, "public.items2", "items", select, None, "id");
}
