//! How a snapshot copy moves rows: binary COPY where the column types allow
//! it, text where they do not, both exact; a chunk streams through in
//! bounded memory, however wide its rows; and several writer sessions load
//! a fresh version without getting ahead of its cursor.

use std::time::Duration;

use crate::support::rss::wait_measuring_peak_rss;
use crate::support::{assert_view_matches, TestDb, Walfill};

/// Columns of (nearly) every built-in type, with the values that are hard
/// to move: NaN and infinities, negative zero, NULLs inside arrays,
/// multidimensional arrays, empty and unbounded ranges, control characters
/// and backslashes in text, a NUL byte in bytea, padded characters, an
/// enum and domains over built-in types.
const TYPES: &str = r#"
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN tags AS text[];
CREATE TABLE t (
    id bigint PRIMARY KEY,
    i2 smallint, i4 integer, f4 real, f8 double precision, n numeric, n2 numeric(12, 3),
    m money, b boolean, c char(5), vc varchar(20), tx text, nm name, ch "char",
    by bytea, d date, ts timestamp, tz timestamptz, tm time, ttz timetz, iv interval,
    u uuid, j json, jb jsonb, jp jsonpath, x xml, ip inet, cr cidr, mac macaddr, mac8 macaddr8,
    bt bit(4), vb varbit, pt point, ln line, ls lseg, bx box, pa path, pg polygon, ci circle,
    tv tsvector, tq tsquery, lsn pg_lsn, o oid, xi xid, r int4range, nr numrange, tr tstzrange,
    mr int4multirange, ai integer[], at text[], a2 integer[], an numeric[], ats timestamptz[],
    e mood, dp posint, dt tags
);
INSERT INTO t VALUES
 (1, -32768, 2147483647, 'NaN', '-Infinity', 'NaN', -0.5,
  '-12.34', true, 'ab', 'tab	x', E'back\\slash\nnew\tline ünï', 'a name', 'q',
  E'\\x00ff5c0a', '-infinity', '2024-02-29 23:59:59.999999', 'infinity', '24:00', '12:00+05:30', '-1 year 2 mons -3 days 04:05:06.789',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50]}', '{"b": null, "a": 1e3}', '$.a[*] ? (@ > 1)', '<r a="1">x</r>',
  '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05',
  B'1010', B'101', '(1.5,-2)', '{1,-1,0}', '[(0,0),(1,1)]', '(1,1),(0,0)', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(1,0))', '<(0,0),2>',
  'a fat:2 cat', 'fat & !rat', '16/B374D848', 4294967295, '123', 'empty', '(,5.5]', '[2024-01-01 00:00+00,)',
  '{[1,3), [5,7)}', '{1,NULL,3}', '{"a b",NULL,"","back\\slash","q\"uote"}', '{{1,2},{3,4}}', '{NaN,-0,1e-10}', '{infinity,2024-01-01 12:00+02}',
  'happy', 7, '{x,"y z"}');
INSERT INTO t (id, f4, f8, n, n2, b, c, vc, tx, by, d, ts, tz, tm, ttz, iv, j, jb, jp, ip, cr, bt, vb, tv,
               lsn, o, xi, r, nr, tr, mr, ai, at, an, e, dp, dt)
VALUES (2, '-0', 'Infinity', '123456789012345678901234567890.123456789', 1, false, NULL, '', '',
  '\\x', '2000-01-01', 'infinity', '-infinity', '00:00', '00:00-12', '0', 'null', '[]', '$',
  '::1', '::/0', B'0000', B'', '', '0/0', 0, '0', '[1,2)', 'empty', '(,)', '{}', '{}', '{}', '{}', 'sad', 1, '{}');
INSERT INTO t (id, i2, i4, f4, f8, n, n2, m, c, tx, nm, ch, by, tz, iv, j, jb)
VALUES (3, 1, 1, 1.5, 1e308, 0.000000000000000000001, 999999999.999, 0, 'abcde', repeat('long ', 3000), '', E'\t',
  decode(repeat('ab', 5000), 'hex'), '2024-06-30 12:00:00.5+14', '1 day', '"x"', '"x"');
INSERT INTO t (id, i4, tx, ai, e) SELECT g, g * 7, 'row ' || g, ARRAY[g, NULL], 'ok' FROM generate_series(4, 500) g;
"#;

/// A version of `select` over `t` built with `copy_format`: the format the
/// log names, and the view compared with the transform of the source.
fn copy_with(db: &TestDb, name: &str, select: &str, copy_format: &str) -> String {
    let target = format!(
        "[backfill]\nchunk_rows = 64\ncopy_format = \"{copy_format}\"\n\n[[target]]\n\
         name = \"{name}\"\nsource = \"public.t\"\nselect = \"{select}\"\nversion = \"v1\"\n"
    );
    let walfill = Walfill::new(db, &target);
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", name]);
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "backfill {name}: {log}");
    assert_view_matches(db, &format!("public.{name}"), "t", select, None, "id");
    log
}

/// Every built-in type travels in binary and arrives as the source has it,
/// through the work table and the transform, and straight into the version
/// table (an identity transform); and again in text.
#[test]
fn every_builtin_type_copies_exactly_in_binary_and_in_text() {
    let db = TestDb::new("fmt_types");
    db.exec(TYPES);
    let computed = "*, id + 1 AS next";
    for (name, select) in [("direct", "*"), ("computed", computed)] {
        let log = copy_with(&db, &format!("{name}_b"), select, "auto");
        assert!(log.contains("format=\"binary\""), "{name}: {log}");
        let log = copy_with(&db, &format!("{name}_t"), select, "text");
        assert!(
            log.contains("format=\"text\"") && log.contains("copy_format = \\\"text\\\""),
            "{name}: {log}"
        );
    }
}

/// A value whose binary form names a type by OID (an array of an enum, a
/// composite of the database's own): the copy goes in text, the log names
/// the column, and the view is exact.
#[test]
fn types_whose_binary_form_names_oids_are_copied_in_text() {
    let db = TestDb::new("fmt_oids");
    db.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok');
         CREATE TYPE pair AS (a int, b text);
         CREATE TABLE t (id int PRIMARY KEY, moods mood[], p pair, v text);
         INSERT INTO t SELECT g, ARRAY['ok', NULL, 'sad']::mood[], ROW(g, 'b' || g)::pair, 'v' || g
           FROM generate_series(1, 300) g;",
    );
    let log = copy_with(&db, "oids", "id, moods, p, upper(v) AS v", "auto");
    assert!(
        log.contains("format=\"text\"")
            && log.contains("moods (mood[])")
            && log.contains("p (pair)"),
        "{log}"
    );
}

/// A chunk of wide rows streams through: copying one chunk of 240 MiB
/// takes hardly more memory than copying one of 60 MiB (a chunk held whole
/// would take 180 MiB more); a few rows are in flight at a time.
#[test]
fn a_chunk_of_wide_rows_streams_in_bounded_memory() {
    let db = TestDb::new("fmt_wide");
    // Two MiB of text per row, stored out of line uncompressed: each row
    // is really that big on the wire.
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, body text);
         ALTER TABLE t ALTER body SET STORAGE EXTERNAL;",
    );
    let select = "id, length(body) AS n, md5(body) AS h";
    let mut peaks = Vec::new();
    for (version, rows) in [("v1", 30), ("v2", 120)] {
        db.exec(&format!(
            "TRUNCATE t; INSERT INTO t SELECT g, (SELECT string_agg(md5(g::text || i::text), '')
                                                   FROM generate_series(1, 65536) i)
               FROM generate_series(1, {rows}) g;"
        ));
        let target = format!(
            "[backfill]\nchunk_rows = 10000\n\n[[target]]\nname = \"wide\"\n\
             source = \"public.t\"\nselect = \"{select}\"\nversion = \"{version}\"\n"
        );
        let walfill = Walfill::new(&db, &target);
        walfill.ok(&["setup"]);
        let run = walfill.spawn(&["backfill", "wide"]);
        let measured = wait_measuring_peak_rss(run, Duration::from_secs(300));
        assert!(measured.status.success(), "{}", measured.stderr);
        assert_view_matches(&db, "public.wide", "t", select, None, "id");
        peaks.push(measured.peak_mib());
    }
    assert!(
        peaks[1] - peaks[0] < 60.0,
        "peak memory {:.0} MiB for a chunk of 60 MiB and {:.0} MiB for one of 240 MiB",
        peaks[0],
        peaks[1]
    );
}

/// A transform whose columns have the table's names and types in the
/// table's order, but are not its columns (swapped, or computed), is
/// applied: only a plain reference to each column in turn is the identity
/// whose rows may be copied straight into the version's table.
#[test]
fn a_transform_shaped_like_the_table_is_applied_not_copied_through() {
    let db = TestDb::new("fmt_shape");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, a text, b text);
         INSERT INTO t SELECT g, 'a' || g, 'b' || g FROM generate_series(1, 200) g;",
    );
    for (name, select) in [
        ("swapped", "id, b AS a, a AS b"),
        ("computed", "id, upper(a) AS a, b"),
        ("qualified", "t.id, t.a, t.b"),
    ] {
        let log = copy_with(&db, name, select, "auto");
        let straight = log.contains("copied straight in (identity transform)");
        assert_eq!(straight, name == "qualified", "{name}: {log}");
    }
}
