//! `TRUNCATE`, which fires no trigger and gives each table it empties new
//! files, followed from the WAL alone: the decoder pairs the tables its
//! record names with the new heaps and TOAST tables created just before it,
//! past the indexes it rebuilds and the sequences it resets.

use super::Oracle;
use crate::support::TestDb;

/// Rows for every table, `n` telling them apart.
fn fill(db: &TestDb, n: u32) {
    db.exec(&format!(
        "INSERT INTO wide (t, p, tags, doc) VALUES
             ('w{n}', point({n}, 2), '{{x}}', '{{\"k\": {n}}}'),
             (repeat('long {n} ', 3000), point(3, {n}), '{{y,z}}', '{{}}');
         INSERT INTO narrow VALUES ({n}, {n}) ON CONFLICT DO NOTHING;
         INSERT INTO bare VALUES ({n});
         INSERT INTO parent VALUES ({n}) ON CONFLICT DO NOTHING;
         INSERT INTO child VALUES ({n}, {n}, repeat('note ', 2000)) ON CONFLICT DO NOTHING;
         INSERT INTO parted VALUES ({n}, 'low'), (100 + {n}, 'high');
         INSERT INTO scratch VALUES ({n}, 'unlogged') ON CONFLICT DO NOTHING;"
    ));
}

#[test]
fn truncates_of_every_shape_decode_like_the_slot() {
    let db = TestDb::new("oracle_truncates");
    db.exec(
        "CREATE TABLE wide (id serial PRIMARY KEY, t text, p point, tags text[], doc jsonb);
         CREATE INDEX ON wide USING hash (t);
         CREATE INDEX ON wide USING gist (p);
         CREATE INDEX ON wide USING gin (tags);
         CREATE INDEX ON wide USING brin (id);
         CREATE TABLE narrow (id int PRIMARY KEY, n int);
         CREATE TABLE bare (n int);
         CREATE TABLE parent (id int PRIMARY KEY);
         CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent, note text);
         CREATE TABLE parted (id int, v text) PARTITION BY RANGE (id);
         CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (100);
         CREATE TABLE parted_high PARTITION OF parted FOR VALUES FROM (100) TO (200);
         CREATE INDEX ON parted (v);
         CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY, v text);",
    );
    crate::journal::install(&db);
    let o = Oracle::on(db);
    let db = &o.db;
    fill(db, 1);
    // Several tables at once: indexes of every kind, TOAST tables or none,
    // no index at all, a sequence reset.
    db.exec("TRUNCATE narrow, wide, bare RESTART IDENTITY");
    fill(db, 2);
    // CASCADE, partitions, an unlogged table among logged ones.
    db.exec("TRUNCATE parent, scratch, parted CASCADE");
    fill(db, 3);
    // Truncated twice in one transaction (the second in place), written
    // after each.
    db.exec(
        "BEGIN;
         TRUNCATE wide, narrow;
         INSERT INTO wide (t) VALUES ('between');
         TRUNCATE wide;
         INSERT INTO wide (t) VALUES ('after both');
         INSERT INTO narrow VALUES (4, 4);
         COMMIT",
    );
    // A table created in the transaction (emptied in place) with an old one.
    db.exec(
        "BEGIN;
         CREATE TABLE fresh (id int PRIMARY KEY, v text);
         INSERT INTO fresh VALUES (1, 'a');
         TRUNCATE fresh, narrow;
         INSERT INTO fresh VALUES (2, 'b');
         INSERT INTO narrow VALUES (5, 5);
         COMMIT",
    );
    // Savepoints: tables the transaction already locked are truncated in a
    // subtransaction (whose first new file is logged without an xid), one
    // truncate is rolled back, one released.
    db.exec(
        "BEGIN;
         LOCK TABLE narrow, wide, bare;
         SAVEPOINT a;
         TRUNCATE narrow, wide;
         INSERT INTO narrow VALUES (6, 6);
         INSERT INTO wide (t) VALUES ('in a savepoint');
         RELEASE a;
         SAVEPOINT b;
         TRUNCATE bare;
         INSERT INTO bare VALUES (99);
         ROLLBACK TO b;
         INSERT INTO bare VALUES (6);
         SAVEPOINT c;
         TRUNCATE fresh;
         INSERT INTO fresh VALUES (3, 'c');
         COMMIT",
    );
    // A subtransaction's new files become its parent's when it is
    // released: truncated again there, the table is emptied in place, as
    // it is in a subtransaction nested under the one whose file it is.
    db.exec(
        "BEGIN;
         INSERT INTO narrow VALUES (10, 10);
         SAVEPOINT a;
         TRUNCATE wide;
         INSERT INTO wide (t) VALUES ('in a');
         SAVEPOINT b;
         TRUNCATE wide;
         INSERT INTO wide (t) VALUES ('in b');
         RELEASE b;
         TRUNCATE wide;
         INSERT INTO wide (t) VALUES ('in a, after b');
         RELEASE a;
         TRUNCATE wide;
         INSERT INTO wide (t) VALUES ('released twice');
         SAVEPOINT c;
         TRUNCATE wide;
         INSERT INTO wide (t) VALUES ('in c');
         COMMIT",
    );
    // Other statements of the transaction create files first: a table (its
    // key and TOAST table too), an index, a reindex.
    db.exec(
        "BEGIN;
         CREATE TABLE side (id int PRIMARY KEY, v text);
         CREATE INDEX ON narrow (n);
         REINDEX TABLE child;
         TRUNCATE narrow, child;
         INSERT INTO narrow VALUES (7, 7);
         INSERT INTO side VALUES (7, 'side');
         COMMIT",
    );
    fill(db, 8);
    db.exec("INSERT INTO fresh VALUES (8, 'h')");
    // Last, every table emptied once more: the live catalog describes none
    // of the files the range wrote.
    db.exec("TRUNCATE wide, narrow, bare, parent, parted, fresh, side CASCADE");
    let out = o.assert_same(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    let expected = o.expected();
    for line in [
        "t[text]:'in a savepoint'",
        "t[text]:'in c'",
        "table public.bare: INSERT: n[integer]:6",
        "table public.fresh: INSERT: id[integer]:3 v[text]:'c'",
        "table public.narrow: INSERT: id[integer]:7 n[integer]:7",
        "table public.side: INSERT: id[integer]:7 v[text]:'side'",
    ] {
        assert!(
            expected.text.contains(line),
            "the slot did not print {line}"
        );
    }
}
