//! An update that leaves a TOASTed column unchanged while its row is not yet
//! copied: logical decoding does not resend the value, walfill must still
//! compute the transform with it.

use std::time::Duration;

use crate::support::{assert_view_matches, TestDb, Walfill};

const SELECT: &str = "id, status, md5(body) AS body_md5, length(body) AS body_len, \
                      left(body, 12) || status AS mixed";

/// `docs` with `rows` rows whose random (incompressible) 8 kB bodies are
/// stored out of line.
fn create_docs(db: &TestDb, rows: u32) {
    db.exec(&format!(
        "CREATE TABLE docs (id int PRIMARY KEY, status text, body text);
         INSERT INTO docs
         SELECT g, 'draft', (SELECT string_agg(md5(g::text || ':' || i), '')
                               FROM generate_series(1, 256) i)
           FROM generate_series(1, {rows}) g;"
    ));
}

#[test]
fn unchanged_toast_value_of_a_row_not_yet_copied() {
    let db = TestDb::new("toast");
    create_docs(&db, 3000);
    let stored_outside: String = db
        .value(
            "SELECT (pg_relation_size(reltoastrelid) > 0)::text FROM pg_class WHERE relname = 'docs'",
        )
        .unwrap();
    assert_eq!(stored_outside, "true", "bodies must be TOASTed out of line");
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 100\nmax_rows_per_second = 1000\n\n[[target]]\n\
             name = \"doc_digest\"\nsource = \"docs\"\nselect = \"{SELECT}\"\nversion = \"v1\"\n"
        ),
    );
    walfill.ok(&["setup"]);
    let backfill = walfill.spawn(&["backfill", "doc_digest"]);
    db.wait_for(
        "SELECT rows_copied > 0 AND phase = 'copying' FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to start",
    );
    // Rows 2001.. are copied a second or more from now: change them now,
    // leaving the TOASTed body alone (and once with a key change).
    db.exec(
        "UPDATE docs SET status = 'published' WHERE id BETWEEN 2001 AND 2100;
         UPDATE docs SET status = 'moved', id = id + 10000 WHERE id BETWEEN 2101 AND 2110;
         UPDATE docs SET status = 'twice' WHERE id BETWEEN 2001 AND 2005;",
    );
    let cursor: Option<String> = db.value("SELECT copy_cursor[1] FROM walfill.versions");
    let cursor: i64 = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
    assert!(
        cursor < 2001,
        "the updated rows must not be copied yet (cursor {cursor})"
    );
    walfill.wait_ok(backfill, Duration::from_secs(120));

    assert_view_matches(&db, "public.doc_digest", "docs", SELECT, None, "id");
    let published = db
        .value("SELECT count(*) FROM doc_digest WHERE status = 'published' AND body_len = 8192")
        .unwrap();
    assert_eq!(published, "95");

    // After the swap, the live stream meets the same kind of update.
    db.exec("UPDATE docs SET status = 'live' WHERE id % 10 = 0");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.doc_digest", "docs", SELECT, None, "id");
}

/// A filter that reads a TOASTed column: an update leaving that column
/// unchanged must be filtered on the stored value, not on a missing one.
#[test]
fn filter_reads_an_unchanged_toast_value() {
    let db = TestDb::new("toast_filter");
    create_docs(&db, 500);
    let filter = "length(body) > 1000 AND body NOT LIKE 'a%'";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[[target]]\nname = \"long_docs\"\nsource = \"docs\"\n\
             select = \"id, status\"\nwhere = \"{filter}\"\nversion = \"v1\"\n"
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "long_docs"]);
    db.exec("UPDATE docs SET status = 'published' WHERE id % 3 = 0");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(
        &db,
        "public.long_docs",
        "docs",
        "id, status",
        Some(filter),
        "id",
    );
    let published = db
        .value("SELECT count(*) FROM long_docs WHERE status = 'published'")
        .unwrap();
    assert_ne!(published, "0", "the updated rows left the view");
}

/// A replay whose fold spills to disk, and rows its filter rejects at the
/// boundary: a later update that passes the filter and leaves the TOASTed
/// body alone still computes the transform from the body the replay saw
/// (kept beside the tombstone of the rejected row), as does one after a
/// key change spread over the spilled runs.
#[test]
fn a_replay_keeps_the_toasted_values_of_rows_its_filter_rejects() {
    let db = TestDb::new("toast_replay");
    let archive = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n",
        crate::support::cluster::archive_url()
    );
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    create_docs(&db, 600);
    // Key changes and updates that leave the body alone, over many
    // transactions, so the tiny fold spills between them. Rows 5000..
    // have bodies of 20 and 21 bytes: too short to be stored out of line
    // (at most 20) and just long enough to need remembering.
    db.exec(
        "INSERT INTO docs SELECT g, 'draft', repeat('s', 20 + g % 2) FROM generate_series(5000, 5099) g;
         UPDATE docs SET status = 'hidden' WHERE id % 3 = 0;
         UPDATE docs SET id = id + 1000 WHERE id % 7 = 1;
         UPDATE docs SET status = 'moved' WHERE id > 1000 AND id < 5000;",
    );
    let filter = "status <> 'hidden'";
    walfill.configure(
        &db,
        &format!(
            "{archive}\n[backfill]\nchunk_rows = 50\nreplay_memory_mb = 0.05\n\n[[target]]\n\
             name = \"doc_digest\"\nsource = \"docs\"\nselect = \"{SELECT}\"\n\
             where = \"{filter}\"\nversion = \"v1\"\n"
        ),
    );
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "doc_digest", "--path", "replay"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spilled = db
        .value(
            "SELECT (detail->>'spilled_runs')::int > 2 FROM walfill.events WHERE kind = 'filled'",
        )
        .unwrap();
    assert_eq!(spilled, "true", "the fold spilled runs");
    assert_view_matches(&db, "public.doc_digest", "docs", SELECT, Some(filter), "id");
    // Rejected rows are kept as tombstones, with their bodies, only where
    // a body could have been stored out of line: not the 20-byte ones.
    let rejected = db
        .value("SELECT string_agg(DISTINCT length(body)::text, ',') FROM docs WHERE NOT (status <> 'hidden')")
        .unwrap();
    assert_eq!(rejected, "20,21,8192", "body lengths of rejected rows");
    let tombstones = db
        .value(
            "SELECT string_agg(DISTINCT length(_walfill_src_body)::text, ',')
               FROM doc_digest__v1 WHERE _walfill_deleted",
        )
        .unwrap();
    assert_eq!(tombstones, "21,8192", "body lengths of tombstones");
    // The rejected rows come back without their bodies being sent again
    // (the short ones are sent whole: they were never out of line).
    db.exec("UPDATE docs SET status = 'shown' WHERE status = 'hidden'");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.doc_digest", "docs", SELECT, Some(filter), "id");
    let short = db
        .value("SELECT count(*) FROM doc_digest WHERE status = 'shown' AND body_len = 20")
        .unwrap();
    assert_ne!(short, "0", "short rejected rows shown again");
    let shown = db
        .value("SELECT count(*) FROM doc_digest WHERE status = 'shown' AND body_len = 8192")
        .unwrap();
    let expected = db
        .value("SELECT count(*) FROM docs WHERE status = 'shown' AND length(body) = 8192")
        .unwrap();
    assert!(
        expected.parse::<i64>().unwrap() > 100,
        "{expected} rows shown"
    );
    assert_eq!(shown, expected);
}

/// The rule a replay's load relies on to leave out the tombstones of
/// rejected rows whose remembered values are short: the server moves out
/// of line only values larger than an aligned TOAST pointer (24 bytes,
/// header included), even where the table asks for it (storage EXTERNAL,
/// the smallest toast_tuple_target, rows over the 2 kB that start
/// toasting). walfill counts a 4-byte header, so its bound is 20 bytes of
/// data; stored rows carry 1-byte headers, so here 23 bytes still stay in
/// line and 24 do not: the bound is on the safe side of the server's.
#[test]
fn values_of_twenty_bytes_are_never_stored_out_of_line() {
    let db = TestDb::new("toast_floor");
    let columns: Vec<String> = (0..120).map(|i| format!("c{i}")).collect();
    db.exec(&format!(
        "CREATE TABLE floor (id int PRIMARY KEY, {}) WITH (toast_tuple_target = 128);
         {}",
        columns
            .iter()
            .map(|c| format!("{c} text"))
            .collect::<Vec<_>>()
            .join(", "),
        columns
            .iter()
            .map(|c| format!("ALTER TABLE floor ALTER {c} SET STORAGE EXTERNAL;"))
            .collect::<String>()
    ));
    let toast = db
        .value("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'floor'")
        .unwrap();
    let insert = |id: u32, len: u32| {
        let values = vec![format!("repeat('x', {len})"); columns.len()].join(", ");
        db.exec(&format!("INSERT INTO floor VALUES ({id}, {values})"));
        db.value(&format!("SELECT count(*) FROM {toast}")).unwrap()
    };
    assert_eq!(insert(1, 20), "0", "a 20-byte value went out of line");
    assert_eq!(insert(2, 23), "0", "a 23-byte value went out of line");
    assert_ne!(insert(3, 24), "0", "no 24-byte value went out of line");
}
