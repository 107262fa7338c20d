//! Bad input gets a clear error naming the cause and the fix, and nothing is
//! written: no state schema, no publication, no slot, no table.

use crate::support::cluster::{replica_admin_url, with_database};
use crate::support::{TestDb, Walfill};

const TARGET: &str =
    "[[target]]\nname = \"tv\"\nsource = \"t\"\nselect = \"id, v\"\nversion = \"v1\"\n";

/// Nothing walfill creates exists in `db`.
fn assert_nothing_written(db: &TestDb) {
    let found = db
        .value(
            "SELECT concat_ws(', ',
                 (SELECT 'schema walfill' FROM pg_namespace WHERE nspname = 'walfill'),
                 (SELECT 'publication' FROM pg_publication LIMIT 1),
                 (SELECT 'slot ' || slot_name FROM pg_replication_slots
                   WHERE database = current_database() LIMIT 1),
                 (SELECT 'view tv' FROM pg_class WHERE relname = 'tv'))",
        )
        .unwrap_or_default();
    assert_eq!(found, "", "walfill wrote something before failing");
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn table_without_key_or_identity() {
    let db = TestDb::new("nokey");
    db.exec("CREATE TABLE t (id int, v text); INSERT INTO t VALUES (1, 'a')");
    let walfill = Walfill::new(&db, TARGET);
    for args in [&["setup"][..], &["backfill", "tv"]] {
        let out = walfill.run(args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        if args[0] == "setup" {
            assert_eq!(out.status.code(), Some(3), "{err}");
            assert!(err.contains("public.t has no primary key"), "{err}");
            assert!(
                err.contains("ADD PRIMARY KEY") && err.contains("REPLICA IDENTITY USING INDEX"),
                "{err}"
            );
        } else {
            assert!(
                err.contains("walfill setup"),
                "backfill before setup names the fix: {err}"
            );
        }
    }
    // REPLICA IDENTITY NOTHING is refused too, with its fix.
    db.exec("ALTER TABLE t ADD PRIMARY KEY (id); ALTER TABLE t REPLICA IDENTITY NOTHING");
    let err = stderr(&walfill.run(&["setup"]));
    assert!(
        err.contains("REPLICA IDENTITY NOTHING") && err.contains("REPLICA IDENTITY DEFAULT"),
        "{err}"
    );
    assert_nothing_written(&db);
}

#[test]
fn wal_level_not_logical() {
    let db = TestDb::on(&replica_admin_url(), "replica");
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let walfill = Walfill::new(&db, TARGET);
    let out = walfill.run(&["setup"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("wal_level = replica"), "{err}");
    assert!(
        err.contains("ALTER SYSTEM SET wal_level = logical"),
        "{err}"
    );
    assert_nothing_written(&db);
}

#[test]
fn wrong_password() {
    let db = TestDb::new("password");
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let url = db.url();
    let (scheme_user, rest) = url.split_once('@').unwrap();
    let (user_part, _) = scheme_user.rsplit_once(':').unwrap();
    let bad = format!("{user_part}:not-the-password@{rest}");
    let walfill = Walfill::with_text(&format!("[source]\nurl = \"{bad}\"\n\n{TARGET}"));
    for args in [&["setup"][..], &["backfill", "tv"], &["status"]] {
        let out = walfill.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("password authentication failed"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains("check the password in source.url"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("not-the-password"),
            "the password leaked: {err}"
        );
    }
    assert_nothing_written(&db);
}

#[test]
fn transform_that_does_not_parse() {
    let db = TestDb::new("transform");
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let cases = [
        ("id, upper(v AS v2", "syntax error"),
        (
            "id, no_such_column",
            "column \\\"no_such_column\\\" does not exist",
        ),
        ("upper(v) AS v", "must include the key column \\\"id\\\""),
        (
            "id, v, v || 'x'",
            "output column 3 of the select has no name",
        ),
        ("id, v AS _walfill_x", "reserves"),
    ];
    for (select, needle) in cases {
        let target = TARGET.replace("select = \"id, v\"", &format!("select = \"{select}\""));
        let walfill = Walfill::new(&db, &target);
        let out = walfill.run(&["setup"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{select}: {err}");
        assert!(
            err.contains(&needle.replace("\\\"", "\"")),
            "{select}: {err}"
        );
        assert!(err.contains("target tv"), "{select}: {err}");
    }
    // The error points at the place in the select list...
    let target = TARGET.replace("select = \"id, v\"", "select = \"id, no_such_column\"");
    let err = stderr(&Walfill::new(&db, &target).run(&["setup"]));
    assert!(
        err.contains("    select = id, no_such_column\n                 ^"),
        "{err}"
    );
    // ...and in the filter.
    let walfill = Walfill::new(&db, &format!("{TARGET}where = \"v = 1 +\"\n"));
    let err = stderr(&walfill.run(&["setup"]));
    assert!(err.contains("syntax error"), "{err}");
    assert!(
        err.contains("    where = v = 1 +\n                   ^"),
        "{err}"
    );
    assert_nothing_written(&db);
}

#[test]
fn malformed_config_names_the_line() {
    let db = TestDb::new("config");
    let walfill = Walfill::new(&db, &format!("{TARGET}colour = \"blue\"\n"));
    let out = walfill.run(&["status"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("colour") && err.contains("line 9"), "{err}");

    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n\n{TARGET}",
        with_database(&db.url(), "").trim_end_matches('/')
    ));
    let err = stderr(&walfill.run(&["setup"]));
    assert!(
        err.contains("line 2") && err.contains("no database"),
        "{err}"
    );
    assert_nothing_written(&db);
}

/// A pgBackRest repository's root given as the archive is a configuration
/// error (exit 2, as the README's table says), with the URL to give.
#[test]
fn a_pgbackrest_repository_root_as_the_archive() {
    let db = TestDb::new("bad_repo_root");
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let root = std::env::temp_dir().join(format!("walfill-repo-root-{}", std::process::id()));
    for (dir, file) in [
        ("archive/main", "archive.info"),
        ("backup/main", "backup.info"),
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join(file), "x").unwrap();
    }
    let url = format!("file://{}", root.display());
    let walfill = Walfill::new(&db, &format!("[archive]\nurl = \"{url}\"\n\n{TARGET}"));
    for args in [&["decode", "--from", "0/1000000"][..], &["setup"]] {
        let out = walfill.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("root of a pgBackRest repository") && err.contains("/archive/<stanza>"),
            "{args:?}: {err}"
        );
    }
    assert_nothing_written(&db);
    std::fs::remove_dir_all(&root).unwrap();
}
