//! The decoder on the WAL of PostgreSQL 16, 17 and 18: the same comparison
//! with test_decoding, on a cluster of each version started by
//! `scripts/test-env.sh` (server binaries from `scripts/pg-dist.sh`).

use super::Oracle;
use crate::support::cluster::newer_clusters;
use crate::support::TestDb;

/// Transactions of every kind (savepoints, rollbacks, two-phase commit,
/// key changes, TOASTed and compressed values, REPLICA IDENTITY FULL,
/// logical messages) and values whose text differs between versions (17's
/// infinite intervals), on each newer major. No catalog journal is
/// installed: tables are described by the live catalog.
#[test]
fn newer_majors_decode_like_their_test_decoding() {
    for cluster in newer_clusters() {
        let (major, admin) = (cluster.major, &cluster.admin);
        let db = TestDb::on(admin, &format!("oracle_pg{major}"));
        let version = db
            .value("SELECT current_setting('server_version_num')")
            .unwrap();
        assert_eq!(
            version.get(..2),
            Some(major.to_string().as_str()),
            "the cluster at {admin} is not PostgreSQL {major}"
        );
        db.exec(
            "CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric(12,2),
                                at timestamptz, span interval, tags text[], doc jsonb);
             CREATE TABLE full_id (id int PRIMARY KEY, a text);
             ALTER TABLE full_id REPLICA IDENTITY FULL;
             CREATE TABLE big (id int PRIMARY KEY, body text);
             CREATE TABLE gone (id int);",
        );
        let o = Oracle::on_archived(db, cluster.archive);
        let infinite = if major >= 17 {
            "INSERT INTO acct (id, span) VALUES (90, 'infinity'), (91, '-infinity');"
        } else {
            ""
        };
        o.db.exec(&format!(
            "INSERT INTO acct VALUES
                 (1, 'ann', 10.50, '2024-02-29 12:00+00', '1 year 2 mons -3 days 04:05:06.5',
                  ARRAY['a', 'b c', NULL], '{{\"k\": [1, 2.5, null]}}'),
                 (2, 'bob', NULL, NULL, NULL, NULL, NULL), (3, 'cy', -3, 'infinity', '0', '{{}}', '[]');
             {infinite}
             BEGIN; UPDATE acct SET balance = balance + 1 WHERE id = 1;
                    SAVEPOINT a; DELETE FROM acct WHERE id = 2; ROLLBACK TO a;
                    SAVEPOINT b; INSERT INTO acct (id) VALUES (4); RELEASE b;
                    UPDATE acct SET id = 30 WHERE id = 3; COMMIT;
             BEGIN; INSERT INTO acct (id) VALUES (99); ROLLBACK;
             BEGIN; INSERT INTO acct (id, owner) VALUES (50, 'prepared');
                    PREPARE TRANSACTION 'oracle_pg{major}';"
        ));
        o.db.exec(&format!("COMMIT PREPARED 'oracle_pg{major}'"));
        o.db.exec(
            "INSERT INTO full_id VALUES (1, 'x'), (2, NULL);
             UPDATE full_id SET a = 'y' WHERE id = 1;
             DELETE FROM full_id WHERE id = 2;
             INSERT INTO big SELECT g, repeat(md5(g::text), 400) FROM generate_series(1, 3) g;
             INSERT INTO big SELECT 10, string_agg(md5(g::text), '') FROM generate_series(1, 300) g;
             UPDATE big SET id = id + 100 WHERE id = 1;
             DELETE FROM big WHERE id = 2;
             BEGIN; SELECT pg_logical_emit_message(true, 'oracle', 'in a transaction');
                    INSERT INTO gone VALUES (1); COMMIT;
             SELECT pg_logical_emit_message(false, 'oracle', 'on its own');
             INSERT INTO full_id VALUES (7, 'last');",
        );
        let out = o.assert_same(&[]);
        assert!(out.status.success());
    }
}

/// The catalog journal on each newer major: tables created, altered (a
/// column added with a default, one dropped, one retyped by a rewrite),
/// truncated, renamed, created by `CREATE TABLE AS`, dropped, rewritten by
/// `VACUUM FULL` and `CLUSTER`, all decoded as that server's test_decoding
/// printed them.
#[test]
fn newer_majors_follow_ddl_through_the_journal() {
    for cluster in newer_clusters() {
        let db = TestDb::on(&cluster.admin, &format!("oracle_ddl_pg{}", cluster.major));
        crate::journal::install(&db);
        let o = Oracle::on_archived(db, cluster.archive);
        for statement in [
            "CREATE TYPE mood AS ENUM ('sad', 'ok')",
            "CREATE TABLE a (id int PRIMARY KEY, v text, m mood)",
            "INSERT INTO a VALUES (1, 'x', 'ok'), (2, 'y', 'sad')",
            "ALTER TABLE a ADD COLUMN w int DEFAULT 5",
            "INSERT INTO a VALUES (3, 'z', 'ok', 7)",
            "ALTER TABLE a DROP COLUMN v",
            "UPDATE a SET w = w + 1",
            "TRUNCATE a",
            "INSERT INTO a VALUES (4, 'ok', 9)",
            "ALTER TABLE a RENAME TO b",
            "INSERT INTO b VALUES (5, 'sad', 1)",
            "CREATE TABLE c AS SELECT g AS id, g::text AS t FROM generate_series(1, 3) g",
            "VACUUM FULL b",
            "INSERT INTO b VALUES (6, 'ok', 2)",
            "CLUSTER b USING a_pkey",
            "INSERT INTO b VALUES (7, 'ok', 3)",
            "DROP TABLE c",
            "ALTER TABLE b ALTER COLUMN w TYPE bigint",
            "INSERT INTO b VALUES (8, 'sad', 4)",
        ] {
            o.db.exec(statement);
        }
        o.assert_same(&[]);
    }
}
