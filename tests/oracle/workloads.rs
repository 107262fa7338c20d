//! Workloads compared with test_decoding, change by change.

use std::io::Write;

use super::Oracle;
use crate::support::TestDb;

/// Single- and multi-statement transactions, savepoints rolled back,
/// aborted transactions, key changes, deletes with and without a key, and
/// REPLICA IDENTITY FULL against the default.
#[test]
fn transactions_savepoints_and_identities() {
    let o = Oracle::new(
        "oracle_basic",
        "CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric(12,2));
         CREATE TABLE full_id (id int PRIMARY KEY, a text, b int);
         ALTER TABLE full_id REPLICA IDENTITY FULL;
         CREATE TABLE nokey (a int, b text);
         CREATE TABLE \"Mixed Case\" (\"Id\" int PRIMARY KEY, \"user\" text, \"order\" int);",
    );
    o.db.exec(
        "INSERT INTO acct VALUES (1, 'ann', 10.50), (2, 'bob', NULL), (3, 'cy', -3);
         BEGIN; UPDATE acct SET balance = balance + 1 WHERE id = 1;
                SAVEPOINT a; DELETE FROM acct WHERE id = 2; ROLLBACK TO a;
                SAVEPOINT b; INSERT INTO acct VALUES (4, 'dee', 0); RELEASE b;
                UPDATE acct SET id = 30 WHERE id = 3; COMMIT;
         BEGIN; INSERT INTO acct VALUES (99, 'gone', 1); ROLLBACK;
         BEGIN; SAVEPOINT lone; INSERT INTO acct VALUES (98, 'gone', 1); ROLLBACK TO lone; COMMIT;
         INSERT INTO full_id VALUES (1, 'x', 1), (2, NULL, 2);
         UPDATE full_id SET a = 'y' WHERE id = 1;
         UPDATE full_id SET id = 3 WHERE id = 2;
         DELETE FROM full_id WHERE id = 1;
         INSERT INTO nokey VALUES (1, 'one'), (2, NULL);
         UPDATE nokey SET b = 'uno' WHERE a = 1;
         DELETE FROM nokey WHERE a = 2;
         INSERT INTO \"Mixed Case\" VALUES (1, 'u', 2);
         UPDATE \"Mixed Case\" SET \"Id\" = 2;
         DELETE FROM acct WHERE id = 4;",
    );
    o.assert_same(&[]);
}

/// Every supported type, with NULLs and edge values.
#[test]
fn every_supported_type() {
    let o = Oracle::new(
        "oracle_types",
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy ''quoted''');
         CREATE DOMAIN posint AS int CHECK (VALUE > 0);
         CREATE TABLE v (
             id int PRIMARY KEY, b bool, i2 int2, i4 int4, i8 int8, o oid, f4 float4, f8 float8,
             n numeric, n2 numeric(10,3), t text, vc varchar(5), bp char(4), nm name, c \"char\",
             ba bytea, d date, tm time, ttz timetz, ts timestamp, tstz timestamptz,
             iv interval, u uuid, js json, jb jsonb, ip inet, cd cidr, mac macaddr, m money,
             e mood, dom posint, ia int[], ta text[], na numeric[], ma int[][], ea mood[],
             tsa timestamptz[], ja jsonb[], lsn pg_lsn, lsna pg_lsn[]);",
    );
    o.db.exec(
        "INSERT INTO v (id) VALUES (1);
         INSERT INTO v VALUES (2, true, -32768, -2147483648, -9223372036854775808, 4294967295,
             'NaN', '-Infinity', 'NaN', 123.456, '', 'abc', 'ab', 'name', 'x', '\\x00ff',
             '4713-01-01 BC', '24:00:00', '23:59:59.999999+14:59', '294276-12-31 23:59:59.999999',
             '-infinity', '-178000000 years', '00000000-0000-0000-0000-000000000000',
             '{\"a\": [1, 2.50, \"x\"], \"b\": null}', '{\"b\": {\"c\": [true, false]}, \"a\": \"\\u00e9\\n\"}',
             '::ffff:1.2.3.4/128', '10.0.0.0/8', '08:00:2b:01:02:03', '-92233720368547758.08',
             'happy ''quoted''', 7, '{1,NULL,3}', '{\"\",NULL,\"a,b\",\"c\\\"d\",\"b\\\\s\",\" sp \",NULL,NULL}',
             '{NaN,-1.5,0}', '{{1,2},{3,4}}', '{sad,ok}', '{infinity,\"2000-01-01 00:00:00+00\"}',
             ARRAY['{\"k\": 1}'::jsonb, NULL], 'FFFFFFFF/FFFFFFFF', '{0/0,NULL,1a/b0c}');
         INSERT INTO v VALUES (3, false, 32767, 2147483647, 9223372036854775807, 0,
             3.4028235e38, 1.7976931348623157e308, '-0.000000000000000000001', -0.5, 'O''Brien \\ ü',
             'émoji', 'a', '', '\\001', '\\x', '2000-02-29', '00:00:00.000001', '00:00:00-12:00',
             '1999-12-31 23:59:59.5', 'infinity', '1 mon -2 days 03:04:05.000006',
             'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '[]', '{}', '2001:db8::/32', '::/0',
             'ff:ff:ff:ff:ff:ff', '12.34', 'sad', 1, '{}', '[0:1]={x,y}', NULL,
             '[2:3][1:2]={{1,2},{3,4}}', '{}', NULL, '{}', '0/16B3748', '{}');
         INSERT INTO v (id, f4, f8, n, ts, tstz, iv) VALUES
             (4, 1.0e-45, 5e-324, 1e1000, '2024-06-30 12:34:56.789', '2024-06-30 12:34:56.789+02',
              '-1 year -2 mons +3 days -04:05:06'),
             (5, -0.0, 0.1, 12345678901234567890.12345678901234567890, '1900-01-01', '1900-01-01 00:00:00+00', '0');
         UPDATE v SET t = 'new', jb = '{\"z\": 1e-7}', lsn = '1/0' WHERE id = 2;
         UPDATE v SET lsn = pg_current_wal_lsn(), lsna = ARRAY[pg_current_wal_lsn(), '0/1'] WHERE id = 4;
         DELETE FROM v WHERE id = 5;",
    );
    o.assert_same(&[]);
}

/// Values stored inline-compressed (pglz and lz4) and out of line, updates
/// that leave a TOASTed value unchanged, and old rows of REPLICA IDENTITY
/// FULL with TOASTed values.
#[test]
fn compressed_and_toasted_values() {
    let db = TestDb::new("oracle_toast");
    // Servers built without lz4 (the 16-18 the tests install) compress
    // that column with pglz too.
    let lz4 = if db.supports_lz4() { "lz4" } else { "pglz" };
    db.exec(&format!(
        "CREATE TABLE doc (id int PRIMARY KEY, p text, l text COMPRESSION {lz4}, j jsonb, x text, n int);
         CREATE TABLE doc_full (id int PRIMARY KEY, body text, n int);
         ALTER TABLE doc_full REPLICA IDENTITY FULL;"
    ));
    let o = Oracle::on(db);
    o.db.exec(
        "INSERT INTO doc
         SELECT g, repeat('compressible ' || g, 300), repeat('lz4 text ' || g, 400),
                (SELECT jsonb_object_agg('key' || i, repeat('v', 50)) FROM generate_series(1, 200) i),
                (SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 200) i), g
           FROM generate_series(1, 6) g;
         UPDATE doc SET n = n + 100 WHERE id <= 3;
         UPDATE doc SET x = x || 'changed' WHERE id = 4;
         UPDATE doc SET id = id + 10 WHERE id = 5;
         DELETE FROM doc WHERE id = 6;
         INSERT INTO doc_full SELECT g, (SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 300) i), g
           FROM generate_series(1, 3) g;
         UPDATE doc_full SET n = 0 WHERE id = 1;
         DELETE FROM doc_full WHERE id = 2;",
    );
    o.assert_same(&[]);
}

/// A transaction whose only trace in WAL is catalog invalidations (a
/// temporary table ON COMMIT DELETE ROWS, emptied at commit) changed the
/// catalog as far as decoding knows: it prints as BEGIN and COMMIT.
#[test]
fn a_transaction_that_only_invalidates_caches() {
    let o = Oracle::new("oracle_inval", "CREATE TABLE t (id int PRIMARY KEY);");
    let mut session = o.db.client();
    // Each transaction commits on its own and names its xid, so the check
    // below looks at these and not at what autovacuum's analyze of the
    // fresh database's catalogs prints the same way.
    let mut xid = |statements: &str| -> String {
        session
            .batch_execute(&format!("BEGIN; {statements}"))
            .unwrap();
        let id: String = session
            .query_one("SELECT pg_current_xact_id()::text", &[])
            .unwrap()
            .get(0);
        session.batch_execute("COMMIT").unwrap();
        id
    };
    let create =
        xid("CREATE TEMP TABLE scratch (id int PRIMARY KEY, v text) ON COMMIT DELETE ROWS");
    let only_temp = xid("INSERT INTO scratch VALUES (1, 'only the temporary table')");
    let plain = xid("INSERT INTO t VALUES (1)");
    let both = xid("INSERT INTO scratch VALUES (2, 'both'); INSERT INTO t VALUES (2)");
    let sub = xid("SAVEPOINT s; INSERT INTO scratch VALUES (3, 'in a subtransaction'); RELEASE s");
    let out = o.assert_same(&[]);
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    let body = |id: &str| -> Vec<&str> {
        let begin = lines
            .iter()
            .position(|l| *l == format!("BEGIN {id}"))
            .unwrap_or_else(|| panic!("no BEGIN {id} in\n{printed}"));
        let end = begin
            + lines[begin..]
                .iter()
                .position(|l| *l == format!("COMMIT {id}"))
                .unwrap_or_else(|| panic!("no COMMIT {id} in\n{printed}"));
        lines[begin + 1..end].to_vec()
    };
    // CREATE TEMP TABLE and the two transactions that wrote only `scratch`
    // print empty; the other two print their row of `t` and nothing of
    // `scratch`.
    for id in [&create, &only_temp, &sub] {
        assert!(body(id).is_empty(), "{id} is not empty in\n{printed}");
    }
    assert_eq!(body(&plain), ["table public.t: INSERT: id[integer]:1"]);
    assert_eq!(body(&both), ["table public.t: INSERT: id[integer]:2"]);
}

/// Two-phase commit: committed, rolled back, and interleaved with other work.
#[test]
fn two_phase_commit() {
    let o = Oracle::new("oracle_2pc", "CREATE TABLE t (id int PRIMARY KEY, v text);");
    let mut a = o.db.client();
    let mut b = o.db.client();
    a.batch_execute("BEGIN; INSERT INTO t VALUES (1, 'prepared'); SAVEPOINT s; INSERT INTO t VALUES (2, 'sub');")
        .unwrap();
    b.batch_execute("INSERT INTO t VALUES (3, 'plain')")
        .unwrap();
    a.batch_execute(&format!("PREPARE TRANSACTION '{}_a'", o.db.name))
        .unwrap();
    b.batch_execute(&format!(
        "BEGIN; INSERT INTO t VALUES (4, 'rolled back'); PREPARE TRANSACTION '{}_b'",
        o.db.name
    ))
    .unwrap();
    o.db.exec("INSERT INTO t VALUES (5, 'between')");
    o.db.exec(&format!("COMMIT PREPARED '{}_a'", o.db.name));
    o.db.exec(&format!("ROLLBACK PREPARED '{}_b'", o.db.name));
    o.assert_same(&[]);
}

/// COPY (multi-insert records), INSERT ... ON CONFLICT updating and doing
/// nothing (speculative insertion), and TRUNCATE with its flags.
#[test]
fn copy_upsert_and_truncate() {
    let o = Oracle::new(
        "oracle_copy",
        "CREATE TABLE c (id int PRIMARY KEY, v text, big text);
         CREATE TABLE parent (id int PRIMARY KEY);
         CREATE TABLE child (id serial PRIMARY KEY, p int REFERENCES parent);
         INSERT INTO parent SELECT generate_series(1, 3);
         INSERT INTO child (p) SELECT generate_series(1, 3);",
    );
    let mut client = o.db.client();
    let mut copy = client.copy_in("COPY c FROM STDIN").unwrap();
    for i in 0..2000 {
        let big = if i % 500 == 0 {
            "y".repeat(30_000)
        } else {
            String::new()
        };
        writeln!(copy, "{i}\trow {i}\t{big}").unwrap();
    }
    copy.finish().unwrap();
    o.db.exec(
        "INSERT INTO c VALUES (1, 'upserted', NULL) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
         INSERT INTO c VALUES (5000, 'fresh', NULL) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
         INSERT INTO c VALUES (2, 'ignored', NULL) ON CONFLICT DO NOTHING;
         INSERT INTO c VALUES (5001, 'new', repeat('z', 20000)) ON CONFLICT DO NOTHING;
         TRUNCATE parent, child RESTART IDENTITY CASCADE;
         INSERT INTO parent VALUES (10);",
    );
    o.assert_same(&[]);
}

/// Concurrent sessions interleaving their transactions and subtransactions.
#[test]
fn concurrent_sessions_interleave() {
    let o = Oracle::new(
        "oracle_concurrent",
        "CREATE TABLE t (session int, n int, v text, PRIMARY KEY (session, n));",
    );
    let url = o.db.url();
    let threads: Vec<_> = (0..4)
        .map(|s| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                for n in 0..60 {
                    let sql = match n % 6 {
                        0 => format!("INSERT INTO t VALUES ({s}, {n}, 'a')"),
                        1 => format!("BEGIN; INSERT INTO t VALUES ({s}, {n}, 'b'); SAVEPOINT x; UPDATE t SET v = 'c' WHERE session = {s} AND n = {}; ROLLBACK TO x; COMMIT", n - 1),
                        2 => format!("BEGIN; INSERT INTO t VALUES ({s}, {n}, 'd'); ROLLBACK"),
                        3 => format!("UPDATE t SET v = v || '+' WHERE session = {s}"),
                        4 => format!("BEGIN; SAVEPOINT y; INSERT INTO t VALUES ({s}, {n}, 'e'); RELEASE y; DELETE FROM t WHERE session = {s} AND n = {}; COMMIT", n - 4),
                        _ => format!("INSERT INTO t SELECT {s}, {n} + 1000 * g, 'f' FROM generate_series(1, 3) g"),
                    };
                    c.batch_execute(&sql).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    o.assert_same(&[]);
}

/// A transaction far larger than the memory bound spills to disk and still
/// comes out whole and in order.
#[test]
fn a_transaction_larger_than_the_memory_bound() {
    let o = Oracle::new(
        "oracle_large",
        "CREATE TABLE big (id int PRIMARY KEY, pad text);",
    );
    o.db.exec(
        "BEGIN;
         INSERT INTO big SELECT g, repeat('x', 60) || g FROM generate_series(1, 200000) g;
         UPDATE big SET pad = 'u' WHERE id % 1000 = 0;
         SAVEPOINT s; DELETE FROM big WHERE id % 7 = 0; ROLLBACK TO s;
         COMMIT;
         INSERT INTO big VALUES (0, 'after');",
    );
    let out = o.assert_same(&["--memory-limit", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("spilled=0"),
        "the large transaction should have spilled: {stderr}"
    );
}

/// Columns of types walfill cannot decode (an extension's type, hstore, and
/// a built-in type whose text needs catalog lookups, regclass): printed as a
/// marker, warned about once per column, every other change exact, and a
/// non-zero exit at the end.
#[test]
fn unsupported_type_is_reported_and_skipped() {
    let o = Oracle::new(
        "oracle_unsupported",
        "CREATE EXTENSION hstore;
         CREATE TABLE shapes (id int PRIMARY KEY, at hstore, rel regclass, label text);",
    );
    o.db.exec(
        "INSERT INTO shapes VALUES (1, 'a=>1', 'pg_class', 'a'), (2, NULL, NULL, 'b'),
                                  (3, 'b=>2', 'pg_type', 'c');
         UPDATE shapes SET label = 'z' WHERE id = 1;",
    );
    let expected = o.expected();
    let out = o.decode(&super::archive_url(), &expected.to, &[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for column in ["at has type hstore", "rel has type regclass"] {
        assert_eq!(
            stderr
                .matches(&format!("column public.shapes.{column}"))
                .count(),
            1,
            "{stderr}"
        );
    }
    let printed = String::from_utf8_lossy(&out.stdout);
    let mut masked = expected.text.clone();
    for (shown, column, ty) in [
        (r#"'"a"=>"1"'"#, "at", "hstore"),
        (r#"'"b"=>"2"'"#, "at", "hstore"),
        ("'pg_class'", "rel", "regclass"),
        ("'pg_type'", "rel", "regclass"),
    ] {
        let from = format!("{column}[{ty}]:{shown}");
        assert!(masked.contains(&from), "{from} not in {masked}");
        masked = masked.replace(&from, &format!("{column}[{ty}]:'<unsupported type {ty}>'"));
    }
    super::assert_same_text(&masked, printed.trim_end_matches('\n'));
}

/// TRUNCATE of partitioned tables: the record names the partitioned
/// parents too (they have no storage), as test_decoding prints them, both
/// for tables the source still has and for tables only the catalog
/// journal describes (created after the slot, dropped before decoding).
#[test]
fn truncate_names_partitioned_tables() {
    let db = crate::support::TestDb::new("oracle_parted_truncate");
    db.exec(
        "CREATE TABLE lp (k int, v text) PARTITION BY LIST (k);
         CREATE TABLE lp1 PARTITION OF lp FOR VALUES IN (1, 2) PARTITION BY LIST (k);
         CREATE TABLE lp11 PARTITION OF lp1 FOR VALUES IN (1);
         CREATE TABLE lp12 PARTITION OF lp1 FOR VALUES IN (2);
         CREATE TABLE lp3 PARTITION OF lp FOR VALUES IN (3);",
    );
    crate::journal::install(&db);
    let o = Oracle::on(db);
    o.db.exec(
        "INSERT INTO lp VALUES (1, 'a'), (2, 'b'), (3, 'c');
         TRUNCATE lp1;
         INSERT INTO lp VALUES (1, 'again');
         TRUNCATE lp;
         CREATE TABLE rp (k int PRIMARY KEY, v text) PARTITION BY RANGE (k);
         CREATE TABLE rp1 PARTITION OF rp FOR VALUES FROM (0) TO (10);
         CREATE TABLE ref (k int REFERENCES rp);
         INSERT INTO rp VALUES (1, 'x');
         INSERT INTO ref VALUES (1);
         TRUNCATE rp CASCADE;
         ALTER TABLE rp RENAME TO rp_renamed;
         TRUNCATE rp_renamed RESTART IDENTITY CASCADE;
         DROP TABLE ref, rp_renamed;",
    );
    o.assert_same(&[]);
    let expected = o.expected();
    assert!(
        expected.text.contains(
            "table public.lp, public.lp1, public.lp3, public.lp11, public.lp12: TRUNCATE"
        ),
        "{}",
        expected.text
    );
}

/// A savepoint released into another that is then rolled back: its rows
/// go too, though the rolled-back savepoint wrote nothing of its own.
#[test]
fn a_released_savepoint_inside_a_rolled_back_one() {
    let o = Oracle::new("oracle_nested_rollback", "CREATE TABLE f (a int)");
    o.db.exec(
        "BEGIN;
         INSERT INTO f VALUES (1);
         SAVEPOINT two;
         INSERT INTO f VALUES (10);
         RELEASE two;
         SAVEPOINT three;
         SAVEPOINT four;
         INSERT INTO f VALUES (2);
         RELEASE SAVEPOINT four;
         ROLLBACK TO SAVEPOINT three;
         RELEASE SAVEPOINT three;
         INSERT INTO f VALUES (3);
         COMMIT;",
    );
    o.assert_same(&[]);
}
