//! Checks the tuple decoder against tuples a live PostgreSQL wrote.
//!
//! For every tuple on every page of a few tables, `pageinspect` gives the raw
//! header fields and user data (`heap_page_items`), PostgreSQL's own split
//! into attributes (`heap_page_item_attrs`, raw and detoasted), and the
//! toast table's chunk rows. The test rebuilds the WAL fragment form of each
//! tuple, deforms it with the schema read from `pg_attribute`, and compares
//! every attribute, every decompressed value and every reassembled TOAST
//! value with what the server reports.
//!
//! Needs `WALFILL_TEST_PG_URL`: a superuser URL of a PostgreSQL 15+ server
//! with `pageinspect` available. The test creates and drops its own database.

#[path = "tuple_oracle/support.rs"]
mod support;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::{check_table, Coverage, TestDb};

/// Column types and, per row `i`, a value expression; NULL patterns are
/// added by `wide_rows`.
const WIDE_COLUMNS: &[(&str, &str, &str)] = &[
    ("b", "bool", "i % 2 = 0"),
    ("ch", "\"char\"", "chr(65 + i % 26)::\"char\""),
    ("nm", "name", "'name_' || i"),
    ("i2", "int2", "(i * 7)::int2"),
    ("i4", "int4", "i * 1000"),
    ("i8", "int8", "i::int8 * 1000000000000"),
    ("o", "oid", "i::oid"),
    ("f4", "float4", "i / 3.0"),
    ("f8", "float8", "i / 7.0"),
    ("m", "money", "(i * 1.25)::money"),
    ("n", "numeric", "(i * 123.456)::numeric ^ (i % 4)"),
    ("d", "date", "date '2024-01-01' + i"),
    ("t", "time", "time '12:00' + i * interval '1 minute'"),
    (
        "ttz",
        "timetz",
        "timetz '12:00+02' + i * interval '1 second'",
    ),
    (
        "ts",
        "timestamp",
        "timestamp '2024-01-01' + i * interval '1 hour'",
    ),
    (
        "tstz",
        "timestamptz",
        "timestamptz '2024-01-01 UTC' + i * interval '1 day'",
    ),
    ("iv", "interval", "i * interval '1 day 2 hours'"),
    ("u", "uuid", "md5(i::text)::uuid"),
    ("by", "bytea", "decode(repeat(md5(i::text), i % 6), 'hex')"),
    ("tx", "text", "repeat('t', i * 4 % 300)"),
    ("txp", "text", "repeat('p', i * 4 % 200)"),
    ("vc", "varchar(300)", "repeat('v', i * 5 % 200)"),
    ("bp", "char(5)", "left(md5(i::text), i % 6)"),
    (
        "js",
        "json",
        "json_build_object('k', i, 's', repeat('j', i % 40))",
    ),
    (
        "jb",
        "jsonb",
        "jsonb_build_object('k', i, 'a', jsonb_build_array(i, 'x'))",
    ),
    (
        "ine",
        "inet",
        "('10.0.' || i % 256 || '.1/' || 8 + i % 25)::inet",
    ),
    ("ci", "cidr", "('10.' || i % 256 || '.0.0/16')::cidr"),
    (
        "mac",
        "macaddr",
        "('08:00:2b:01:02:' || lpad(to_hex(i % 256), 2, '0'))::macaddr",
    ),
    ("bt", "bit(10)", "(i % 1024)::bit(10)"),
    ("vb", "varbit", "repeat('10', i % 50)::varbit"),
    ("ti", "tid", "('(' || i || ',' || i % 7 || ')')::tid"),
    ("lsn", "pg_lsn", "('0/' || to_hex(i * 4096))::pg_lsn"),
    ("x8", "xid8", "(i * 11)::text::xid8"),
    (
        "en",
        "mood",
        "(array['sad', 'ok', 'happy'])[1 + i % 3]::mood",
    ),
    ("ia", "int4[]", "array_fill(i, array[i % 5])"),
    ("fa", "float8[]", "array[i / 2.0, i / 3.0]"),
    ("cp", "pair", "row(i, repeat('c', i % 10))::pair"),
];

/// Rows `first..=last` of `wide`; `gone` also fills the two columns the
/// test drops later.
fn wide_insert(first: i32, last: i32, null_shift: usize, gone: bool) -> String {
    let mut values: Vec<String> = WIDE_COLUMNS
        .iter()
        .enumerate()
        .map(|(k, (_, _, expr))| {
            let k = k + null_shift;
            format!(
                "CASE WHEN i % {} = {} THEN NULL ELSE {expr} END",
                k % 7 + 2,
                k % 2
            )
        })
        .collect();
    let mut names: Vec<&str> = WIDE_COLUMNS.iter().map(|c| c.0).collect();
    if gone {
        names.extend(["gone_fixed", "gone_var"]);
        values.push("CASE WHEN i % 3 = 0 THEN NULL ELSE i * 3 END".into());
        values.push("repeat('g', i % 20)".into());
    }
    format!(
        "INSERT INTO wide (id, {}) SELECT i, {} FROM generate_series({first}, {last}) i",
        names.join(", "),
        values.join(", ")
    )
}

#[test]
fn deform_matches_postgres() {
    let mut db = TestDb::create();
    let cols: Vec<String> = WIDE_COLUMNS
        .iter()
        .map(|(n, t, _)| format!("{n} {t}"))
        .collect();
    db.execute(&format!(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TYPE pair AS (a int, b text);
         CREATE TABLE wide (id int, {}, gone_fixed int8, gone_var text);
         ALTER TABLE wide ALTER COLUMN txp SET STORAGE PLAIN;",
        cols.join(", ")
    ));
    db.execute(&wide_insert(1, 40, 0, true));
    db.execute(
        "ALTER TABLE wide DROP COLUMN gone_fixed, DROP COLUMN gone_var;
         ALTER TABLE wide ADD COLUMN added_i int4 DEFAULT 42,
                          ADD COLUMN added_t text DEFAULT 'hello',
                          ADD COLUMN added_null int8;",
    );
    db.execute(&wide_insert(41, 80, 3, false));
    db.execute("INSERT INTO wide (id) VALUES (0)");

    let lz4 = db.lz4_or_pglz();
    db.execute(&format!(
        "CREATE TABLE toasty (id int, p text, l text COMPRESSION {lz4}, e text, b bytea, j jsonb);
         ALTER TABLE toasty ALTER COLUMN e SET STORAGE EXTERNAL;
         CREATE FUNCTION noise(n int, seed int) RETURNS text LANGUAGE sql AS
           $$ SELECT string_agg(md5((g * 7919 + seed)::text), '') FROM generate_series(1, n) g $$;
         INSERT INTO toasty VALUES
           (1, repeat('abcdefghij', 300) || 'x', repeat('abcdefghij', 300) || 'y', 'small', '\\x00ff', '{{}}'),
           (2, noise(3000, 1), repeat(noise(200, 2), 20), repeat('e', 3000), decode(noise(200, 3), 'hex'), NULL),
           (3, NULL, 'short', noise(100, 4), decode(repeat('ab', 5000), 'hex'),
               (SELECT jsonb_agg(g) FROM generate_series(1, 2000) g)),
           (4, repeat(noise(20, 5), 40), repeat(noise(20, 6), 40), NULL, NULL, '[1]');"
    ));

    let mut cov = Coverage::default();
    check_table(&mut db, "wide", &mut cov);
    check_table(&mut db, "toasty", &mut cov);
    eprintln!("{cov:#?}");
    cov.require_all(lz4);
}

/// One generated value: its length, how repetitive it is (0: random, 1: a
/// short word repeated, 2: a block of 2000..5000 bytes repeated, which
/// compresses but stays too big to keep inline; the block starts with a
/// repeated word because pglz gives up when its first kilobyte has no
/// repeats) and a seed.
type GenValue = Option<(usize, u8, u32)>;

fn gen_value() -> impl Strategy<Value = GenValue> {
    prop_oneof![
        1 => Just(None),
        4 => (prop_oneof![0usize..200, 0usize..4000, 1000usize..40_000], 0u8..3, any::<u32>())
            .prop_map(Some),
    ]
}

fn text_of(v: GenValue) -> Option<String> {
    let (len, kind, seed) = v?;
    let period = match kind {
        0 => len,
        1 => 1 + seed as usize % 9,
        _ => 2000 + seed as usize % 3000,
    };
    let mut x = u64::from(seed) | 1;
    let word = if kind == 2 { 64 } else { 0 };
    let block: String = (0..period.max(1))
        .map(|i| {
            if i < word {
                return char::from(b'a' + (i % 3) as u8);
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b' ' + (x % 95) as u8)
        })
        .collect();
    Some(block.chars().cycle().take(len).collect())
}

#[test]
fn random_rows_match_postgres() {
    let mut db = TestDb::create();
    let lz4 = db.lz4_or_pglz();
    db.execute(&format!(
        "CREATE TABLE prop (id int, a text, b bytea, c int8, d text COMPRESSION {lz4}, e varchar, f bool)"
    ));
    let db = std::cell::RefCell::new(db);
    let cov = std::cell::RefCell::new(Coverage::default());
    let rows = prop::collection::vec(
        (
            gen_value(),
            gen_value(),
            prop::option::of(any::<i64>()),
            gen_value(),
            gen_value(),
            prop::option::of(any::<bool>()),
        ),
        1..6,
    );
    let mut runner = TestRunner::new(Config {
        cases: 40,
        ..Config::default()
    });
    let result = runner.run(&rows, |rows| {
        let mut db = db.borrow_mut();
        db.execute("TRUNCATE prop");
        for (id, (a, b, c, d, e, f)) in rows.into_iter().enumerate() {
            let b = text_of(b).map(String::into_bytes);
            db.client()
                .execute(
                    "INSERT INTO prop VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    &[
                        &(id as i32),
                        &text_of(a),
                        &b,
                        &c,
                        &text_of(d),
                        &text_of(e),
                        &f,
                    ],
                )
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        check_table(&mut db, "prop", &mut cov.borrow_mut());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!("{:#?}", cov.borrow());
}
