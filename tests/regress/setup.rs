//! What `setup` and `backfill` must refuse: publications that leave changes
//! out (defect 5) and transforms that are not row by row (defect 15).

use super::{stderr, target, view_difference};
use crate::support::{TestDb, Walfill};

const T: &str = "CREATE TABLE t (id int PRIMARY KEY, v text, w int);
                 INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 10) g;";

/// Publications that do not send every change of `t` to walfill, with the
/// words the refusal must contain.
const PUBLICATIONS: [(&str, &str, &[&str]); 4] = [
    (
        "publish = 'insert, update'",
        "CREATE PUBLICATION walfill FOR TABLE t WITH (publish = 'insert, update')",
        &["delete", "publish"],
    ),
    (
        "publish without truncate",
        "CREATE PUBLICATION walfill FOR TABLE t WITH (publish = 'insert, update, delete')",
        &["truncate", "publish"],
    ),
    (
        "a row filter",
        "CREATE PUBLICATION walfill FOR TABLE t WHERE (id > 0)",
        &["row filter"],
    ),
    (
        "a column list",
        "CREATE PUBLICATION walfill FOR TABLE t (id, v)",
        &["column list"],
    ),
];

/// The same publications, made by altering the one `setup` created.
const ALTERATIONS: [(&str, &str, &[&str]); 4] = [
    (
        "publish = 'insert, update'",
        "ALTER PUBLICATION walfill SET (publish = 'insert, update')",
        &["delete", "publish"],
    ),
    (
        "publish without truncate",
        "ALTER PUBLICATION walfill SET (publish = 'insert, update, delete')",
        &["truncate", "publish"],
    ),
    (
        "a row filter",
        "ALTER PUBLICATION walfill SET TABLE t WHERE (id > 0)",
        &["row filter"],
    ),
    (
        "a column list",
        "ALTER PUBLICATION walfill SET TABLE t (id, v)",
        &["column list"],
    ),
];

/// Why `out` is not a refusal naming `needles`, if it is not.
fn refusal_problem(what: &str, out: &std::process::Output, needles: &[&str]) -> Option<String> {
    let err = stderr(out);
    if out.status.success() {
        return Some(format!("{what}: exited 0 (accepted)"));
    }
    let lower = err.to_lowercase();
    let missing: Vec<&&str> = needles.iter().filter(|n| !lower.contains(*n)).collect();
    if missing.is_empty() {
        None
    } else {
        Some(format!(
            "{what}: refused ({}) without naming {missing:?}: {}",
            out.status,
            err.trim()
        ))
    }
}

/// After walfill accepted the publication (exit 0): it must then deliver
/// every change. Builds the version if needed, writes a delete, an insert
/// outside the row filter, an update of a column outside the column list,
/// then a TRUNCATE, applying each with `sync --once`; returns what went
/// wrong, if anything.
fn accepted_but_exact(db: &TestDb, walfill: &Walfill, build: bool) -> Option<String> {
    if build {
        let out = walfill.run(&["backfill", "t_view"]);
        if !out.status.success() {
            return Some(format!(
                "backfill failed after setup accepted: {}",
                stderr(&out)
            ));
        }
    }
    for writes in [
        "DELETE FROM t WHERE id = 1;
         INSERT INTO t VALUES (-1, 'negative', -1);
         UPDATE t SET w = w + 100 WHERE id = 2;",
        "TRUNCATE t; INSERT INTO t VALUES (50, 'after truncate', 50);",
    ] {
        db.exec(writes);
        let out = walfill.run(&["sync", "--once"]);
        if !out.status.success() {
            return Some(format!("sync --once failed: {}", stderr(&out)));
        }
        if let Some(diff) = view_difference(db, db, "public.t_view", "t", "id, v, w", "id") {
            return Some(format!("after {writes:?}: {diff}"));
        }
    }
    None
}

/// Defect 5, at setup. An existing publication `walfill` that leaves out
/// deletes (or truncates), or has a row filter or a column list: `setup`
/// must refuse it, naming the problem (or, if it accepts it, fix it so
/// every change reaches the version); never exit 0 and then miss a DELETE.
#[test]
fn r05_setup_refuses_a_publication_that_leaves_changes_out() {
    let mut problems = Vec::new();
    for (what, publication, needles) in PUBLICATIONS {
        let db = TestDb::new("r05s");
        db.exec(T);
        db.exec(publication);
        let walfill = Walfill::new(&db, &target("t_view", "t", "id, v, w", None, "v1"));
        let out = walfill.run(&["setup"]);
        let what = format!("setup over {what}");
        if out.status.success() {
            if let Some(problem) = accepted_but_exact(&db, &walfill, true) {
                problems.push(format!("{what}: exited 0, then {problem}"));
            }
        } else {
            problems.extend(refusal_problem(&what, &out, needles));
        }
    }
    assert!(
        problems.is_empty(),
        "setup accepted publications that leave changes out:\n{}",
        problems.join("\n")
    );
}

/// Defect 5, at backfill. `setup` created the publication; it was then
/// changed to leave changes out: `backfill` must refuse in the same way
/// (or make every later change reach the version).
#[test]
fn r05_backfill_refuses_a_publication_changed_after_setup() {
    let mut problems = Vec::new();
    for (what, alteration, needles) in ALTERATIONS {
        let db = TestDb::new("r05b");
        db.exec(T);
        let walfill = Walfill::new(&db, &target("t_view", "t", "id, v, w", None, "v1"));
        walfill.ok(&["setup"]);
        db.exec(alteration);
        let out = walfill.run(&["backfill", "t_view"]);
        let what = format!("backfill over {what}");
        if out.status.success() {
            if let Some(problem) = accepted_but_exact(&db, &walfill, false) {
                problems.push(format!("{what}: exited 0, then {problem}"));
            }
        } else {
            problems.extend(refusal_problem(&what, &out, needles));
        }
    }
    assert!(
        problems.is_empty(),
        "backfill accepted publications that leave changes out:\n{}",
        problems.join("\n")
    );
}

/// Defect 15. Transforms that are not row by row must be refused by
/// `setup`, naming what is wrong: window functions (also wrapped, and
/// through a named WINDOW in the filter), aggregates (also through a GROUP
/// BY in the filter), set-returning functions (also wrapped), subqueries
/// reading the table (in the select list or the filter), system columns
/// (the work table's own, not the source row's). A volatile function
/// passes with a warning.
#[test]
fn r15_setup_refuses_transforms_that_are_not_row_by_row() {
    let db = TestDb::new("r15");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, n int, v text);
         INSERT INTO t SELECT g, g, 'v' || g FROM generate_series(1, 10) g;",
    );
    let cases: [(&str, Option<&str>, &str); 11] = [
        ("id, count(*) over () AS n", None, "window"),
        ("id, coalesce(sum(n) over (), 0) AS s", None, "window"),
        // A filter is one condition: clauses appended to it are refused.
        (
            "id, count(*) over w AS n",
            Some("true WINDOW w AS ()"),
            "not a condition",
        ),
        ("id, count(*) AS n", None, "aggregate"),
        (
            "id, count(*) AS n",
            Some("true GROUP BY id"),
            "not a condition",
        ),
        ("id, generate_series(1, 2) AS g", None, "set-returning"),
        (
            "id, upper(v) || generate_series(1, 2) AS g",
            None,
            "set-returning",
        ),
        ("id, (SELECT count(*) FROM t) AS n", None, "subquer"),
        ("id, v", Some("n > (SELECT avg(n) FROM t)"), "subquer"),
        ("id, ctid AS c", None, "system column"),
        ("id, v", Some("xmin::text <> ''"), "system column"),
    ];
    let mut problems = Vec::new();
    let mut refused = Vec::new();
    for (select, filter, needle) in cases {
        let walfill = Walfill::new(&db, &target("t_view", "t", select, filter, "v1"));
        let out = walfill.run(&["setup"]);
        let what = format!("select = {select:?}, where = {filter:?}");
        match refusal_problem(&what, &out, &[needle]) {
            Some(problem) => problems.push(problem),
            None => refused.push(what),
        }
    }
    let walfill = Walfill::new(&db, &target("t_view", "t", "id, random() AS r", None, "v1"));
    let out = walfill.run(&["setup"]);
    if !out.status.success() {
        problems.push(format!(
            "select = \"id, random() AS r\": refused ({}), must pass with a warning: {}",
            out.status,
            stderr(&out).trim()
        ));
    } else if !stderr(&out).to_lowercase().contains("volatile") {
        problems.push(
            "select = \"id, random() AS r\": passed without a warning naming `volatile`".into(),
        );
    }
    assert!(
        problems.is_empty(),
        "setup accepted transforms that are not row by row:\n{}\n(refused as wanted: {refused:#?})",
        problems.join("\n")
    );
}
