//! Every table of a database is decoded, walfill's own included (its state
//! schema and its version tables have `pg_lsn` columns), and
//! `--exclude-schema` leaves the tables of the schemas it names out.

use super::{archive_url, assert_same_text, Oracle};
use crate::support::{TestDb, Walfill};

/// A database walfill manages, after `setup`, a backfill and a sync: an
/// unfiltered decode prints the changes of `walfill.versions` and of the
/// version table exactly as the slot does and exits 0; `--exclude-schema
/// walfill` leaves out the state schema's changes and nothing else.
#[test]
fn a_database_walfill_manages_decodes_whole_or_without_its_state() {
    let db = TestDb::new("oracle_managed");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g;",
    );
    let walfill = Walfill::new(
        &db,
        "[[target]]\nname = \"tv\"\nsource = \"t\"\nselect = \"id, v\"\nversion = \"v1\"\n",
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "tv"]);

    // The slot starts after the backfill: the tables' files are final.
    let o = Oracle::on(db);
    o.db.exec(
        "INSERT INTO t VALUES (100, 'new');
         UPDATE t SET v = 'changed' WHERE id = 1;
         DELETE FROM t WHERE id = 2;",
    );
    walfill.ok(&["sync", "--once"]);
    let applied =
        o.db.value("SELECT applied_lsn FROM walfill.versions WHERE version = 'v1'")
            .expect("an applied position");
    let stored =
        o.db.value("SELECT _walfill_lsn FROM tv__v1 WHERE id = 100")
            .expect("the new row in the version table");
    let expected = o.expected();
    for wanted in [
        "table public.t: DELETE: id[integer]:2".to_string(),
        "table walfill.versions: UPDATE:".to_string(),
        format!("applied_lsn[pg_lsn]:'{applied}'"),
        "table public.tv__v1: INSERT: id[integer]:100 v[text]:'new'".to_string(),
        format!("_walfill_lsn[pg_lsn]:'{stored}'"),
    ] {
        assert!(
            expected.text.contains(&wanted),
            "the slot printed no {wanted:?}:\n{}",
            expected.text
        );
    }

    let all = o.decode(&archive_url(), &expected.to, &[]);
    let stderr = String::from_utf8_lossy(&all.stderr);
    assert_eq!(all.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("cannot decode"), "{stderr}");
    assert_same_text(
        &expected.text,
        String::from_utf8_lossy(&all.stdout).trim_end_matches('\n'),
    );

    let kept = without_schemas(&expected.text, &["walfill"]);
    assert!(!kept.contains("table walfill."), "{kept}");
    for wanted in ["table public.t: UPDATE:", "table public.tv__v1: UPDATE:"] {
        assert!(kept.contains(wanted), "no {wanted:?} left:\n{kept}");
    }
    let filtered = o.decode(
        &archive_url(),
        &expected.to,
        &["--exclude-schema", "walfill"],
    );
    let stderr = String::from_utf8_lossy(&filtered.stderr);
    assert_eq!(filtered.status.code(), Some(0), "{stderr}");
    assert_same_text(
        &kept,
        String::from_utf8_lossy(&filtered.stdout).trim_end_matches('\n'),
    );
}

/// `--exclude-schema` is repeatable, folds unquoted names to lower case and
/// keeps quoted ones as written; a TRUNCATE keeps the tables of other
/// schemas, and a transaction left without changes prints as BEGIN and
/// COMMIT. It cannot go with `--table`, and a dotted name is refused.
#[test]
fn excluded_schemas_leave_their_tables_out() {
    let o = Oracle::new(
        "oracle_exclude",
        "CREATE SCHEMA audit;
         CREATE TABLE audit.marks (id int PRIMARY KEY, at pg_lsn, seen pg_lsn[], note text);
         CREATE SCHEMA \"Audit Log\";
         CREATE TABLE \"Audit Log\".entries (id int PRIMARY KEY, at pg_lsn NOT NULL);
         CREATE TABLE orders (id int PRIMARY KEY, v text, at pg_lsn NOT NULL);",
    );
    // One transaction per statement. The TRUNCATEs come first: they give
    // the tables new files, and the current catalog (no journal here) only
    // knows the files written after them.
    for txn in [
        "TRUNCATE audit.marks",
        "TRUNCATE audit.marks, orders, \"Audit Log\".entries",
        "INSERT INTO audit.marks VALUES (1, pg_current_wal_lsn(), ARRAY['0/0'::pg_lsn, NULL], 'audit only')",
        "INSERT INTO orders VALUES (1, 'public only', '0/16B3748')",
        "BEGIN;
         INSERT INTO orders VALUES (2, 'all', pg_current_wal_lsn());
         UPDATE audit.marks SET at = 'FFFFFFFF/FFFFFFFF', seen = '{1A/B0C}' WHERE id = 1;
         INSERT INTO \"Audit Log\".entries VALUES (1, '1/0');
         UPDATE orders SET v = 'after' WHERE id = 1;
         COMMIT",
        "DELETE FROM \"Audit Log\".entries",
        "INSERT INTO orders VALUES (3, 'last', '0/1')",
        "DELETE FROM audit.marks",
    ] {
        o.db.exec(txn);
    }
    let expected = o.expected();
    let archive = archive_url();
    let all = o.decode(&archive, &expected.to, &[]);
    assert_eq!(
        all.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    assert_same_text(
        &expected.text,
        String::from_utf8_lossy(&all.stdout).trim_end_matches('\n'),
    );

    let kept = without_schemas(&expected.text, &["audit", "\"Audit Log\""]);
    for wanted in [
        "table public.orders: TRUNCATE: (no-flags)",
        "table public.orders: UPDATE: id[integer]:1 v[text]:'after' at[pg_lsn]:'0/16B3748'",
    ] {
        assert!(kept.contains(wanted), "no {wanted:?} left:\n{kept}");
    }
    assert!(
        !kept.contains("audit.") && !kept.contains("Audit Log"),
        "{kept}"
    );
    // The first transaction truncated only audit.marks.
    let lines: Vec<&str> = kept.lines().take(2).collect();
    assert!(
        lines[0].starts_with("BEGIN ") && lines[1].starts_with("COMMIT "),
        "{kept}"
    );
    let filtered = o.decode(
        &archive,
        &expected.to,
        &[
            "--exclude-schema",
            "AUDIT",
            "--exclude-schema",
            "\"Audit Log\"",
        ],
    );
    let stderr = String::from_utf8_lossy(&filtered.stderr);
    assert_eq!(filtered.status.code(), Some(0), "{stderr}");
    assert_same_text(
        &kept,
        String::from_utf8_lossy(&filtered.stdout).trim_end_matches('\n'),
    );

    for extra in [
        &["--exclude-schema", "audit", "--table", "orders"][..],
        &["--exclude-schema", "a.b"][..],
    ] {
        let out = o.decode(&archive, &expected.to, extra);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty());
    }
}

/// test_decoding's output without the changes of tables in `schemas` (each
/// as printed, quoted if it needs quotes): their lines go, a TRUNCATE line
/// keeps its other tables, and BEGIN/COMMIT lines stay.
fn without_schemas(text: &str, schemas: &[&str]) -> String {
    let excluded = |table: &str| {
        schemas
            .iter()
            .any(|s| table.strip_prefix(s).is_some_and(|t| t.starts_with('.')))
    };
    let mut kept = Vec::new();
    for line in text.split('\n') {
        let Some((tables, rest)) = line.strip_prefix("table ").and_then(|l| l.split_once(": "))
        else {
            kept.push(line.to_string());
            continue;
        };
        if rest.starts_with("TRUNCATE:") {
            let left: Vec<&str> = tables.split(", ").filter(|t| !excluded(t)).collect();
            if !left.is_empty() {
                kept.push(format!("table {}: {rest}", left.join(", ")));
            }
        } else if !excluded(tables) {
            kept.push(line.to_string());
        }
    }
    kept.join("\n")
}
