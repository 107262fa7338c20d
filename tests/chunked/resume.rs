//! Chunked copies under writes, killed, cut off mid-chunk and across renames: each resumes exactly.

use super::*;

/// A chunked copy with writes going on: walfill never holds a source
/// transaction much longer than a chunk, though the copy takes seconds,
/// and the view equals the transform of the source.
#[test]
fn a_chunked_copy_under_writes_holds_no_long_transaction_and_is_exact() {
    let db = TestDb::new("chunked");
    create_orders(&db, 30_000);
    let walfill = Walfill::new(
        &db,
        &format!(
            "{CHUNKED}max_rows_per_second = 8000\n\n{}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);

    let writer = Writer::start(&db, 30_000, 1_000_000, 23);
    let sampler = OldestXact::start(&db);
    let started = Instant::now();
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    db.wait_for(
        "SELECT phase <> 'copying' AND rows_copied > 0 FROM walfill.versions",
        Duration::from_secs(120),
        "the copy to finish",
    );
    let copy = started.elapsed();
    let oldest = sampler.stop();
    let ops = writer.stop();
    walfill.wait_ok(backfill, Duration::from_secs(120));

    assert!(ops > 100, "the writer only managed {ops} statements");
    assert!(
        copy > Duration::from_secs(3),
        "the copy took {copy:?}: too short to tell a long transaction from a chunk's"
    );
    assert!(
        oldest < 1.0,
        "a walfill transaction on the source stayed open {oldest:.2} s during a copy of {copy:?}"
    );
    let chunks: i64 = number(&db, "SELECT count(*) FROM walfill.chunk_snapshots");
    // The copy ends at the last key the first chunk saw: the writer's new
    // keys come from the stream, however fast they come.
    assert!(
        (25..=33).contains(&chunks),
        "{chunks} chunk snapshots recorded for about 30 chunks"
    );
    assert_orders_exact(&db);
}

/// Killed mid-copy, then, in the rerun, its source connection terminated
/// mid-chunk: the rerun resumes after the last stored chunk, the lost
/// connection costs a chunk read again (not the copy), no transaction is
/// long, and the view is exact.
#[test]
fn a_chunked_copy_killed_and_cut_off_mid_chunk_resumes_exactly() {
    let db = TestDb::new("chunked_resume");
    create_orders(&db, 30_000);
    let walfill = Walfill::new(
        &db,
        &format!(
            "{CHUNKED}max_rows_per_second = 5000\napply_batch_changes = 200\n\n{}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let writer = Writer::start(&db, 30_000, 1_000_000, 29);

    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT rows_copied >= 8000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 8000 rows",
    );
    run.kill().expect("SIGKILL walfill");
    let _ = run.wait();
    let stored: i64 = number(&db, "SELECT rows_copied FROM walfill.versions");

    let sampler = OldestXact::start(&db);
    let log = std::env::temp_dir().join(format!("walfill-chunked-{}.log", std::process::id()));
    let rerun = walfill
        .command_env(&["backfill", "orders_summary", "--no-swap"], &[])
        .stderr(File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn walfill");
    db.wait_for(
        &format!(
            "SELECT rows_copied >= {} FROM walfill.versions",
            stored + 4000
        ),
        Duration::from_secs(60),
        "the resumed copy to move on",
    );
    // Cut the source reader off in the middle of a chunk's transaction:
    // held at the chunk's lock by ours, then terminated.
    let mut blocker = db.client();
    blocker
        .batch_execute("BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    db.wait_for(
        "SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity
          WHERE datname = current_database() AND application_name LIKE 'walfill%'
            AND wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE%'",
        Duration::from_secs(30),
        "a chunk's transaction to cut off",
    );
    blocker.batch_execute("COMMIT").unwrap();
    let status = wait_child(rerun, Duration::from_secs(120));
    let oldest = sampler.stop();
    let ops = writer.stop();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the rerun failed:\n{text}");
    assert!(
        text.contains("reading it again"),
        "the lost connection was not retried:\n{text}"
    );
    assert!(ops > 100, "the writer only managed {ops} statements");
    assert!(
        oldest < 1.0,
        "a walfill transaction stayed open {oldest:.2} s"
    );
    // Resumed after its last stored chunk: the rows add up to the table's
    // (the rerun's bound includes keys the writer added meanwhile); a copy
    // started over would count the first run's {stored} rows twice.
    let copied: i64 = number(&db, "SELECT rows_copied FROM walfill.versions");
    assert!(
        (28_000..30_000 + stored).contains(&copied),
        "{copied} rows counted as copied for about 30000, {stored} of them before the kill"
    );
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_summary", "v1"]);
    assert_orders_exact(&db);
}

/// The source connection cut while a chunk's rows are on their way (the
/// destination held after the previous chunk's COPY, so the reader is
/// stuck in the middle of the next one): what arrived of the chunk is
/// rolled back, the chunk is read again on a new connection, and the
/// version is exact, every row counted once.
#[test]
fn a_chunk_cut_off_while_its_rows_stream_is_read_and_stored_again() {
    cut_off_mid_chunk("auto", "transformed on the source");
}

/// [`a_chunk_cut_off_while_its_rows_stream_is_read_and_stored_again`] with
/// the transform in the destination, over the rows in a work table.
#[test]
fn a_chunk_cut_off_mid_stream_into_the_work_table_is_stored_again() {
    cut_off_mid_chunk("destination", "through the transform");
}

/// A chunk's COPY on the source terminated while its rows stream, with the
/// transform evaluated `transform_on`; the log names the rows' way.
fn cut_off_mid_chunk(transform_on: &str, rows: &str) {
    let db = TestDb::new("chunked_cut");
    // 60 MB in chunks of 15 MB: far more than walfill keeps in flight.
    db.exec(
        "CREATE TABLE wide (id int PRIMARY KEY, body text);
         INSERT INTO wide SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 60000) g;",
    );
    let select = "id, length(body) AS n, left(body, 8) AS head";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nsnapshot = \"chunked\"\nchunk_rows = 15000\nwriters = 1\n\
             transform_on = \"{transform_on}\"\n\n\
             [[target]]\nname = \"cut\"\nsource = \"public.wide\"\nselect = \"{select}\"\n\
             version = \"v1\"\n"
        ),
    );
    walfill.ok(&["setup"]);
    let dir = std::env::temp_dir().join(format!("walfill-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, release) = (dir.join("walfill.log"), dir.join("release"));
    let _ = std::fs::remove_file(&release);
    let run = walfill
        .command_env(
            &["backfill", "cut", "--no-swap"],
            &[
                ("WALFILL_FAILPOINTS", "copy.chunk_copied"),
                ("WALFILL_FAILPOINT_RELEASE", release.to_str().unwrap()),
            ],
        )
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("spawn walfill");
    wait_log(
        &log,
        "failpoint copy.chunk_copied holding",
        Duration::from_secs(60),
    );
    // The next chunk's COPY on the source waits for walfill to take more.
    db.wait_for(
        "SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity
          WHERE datname = current_database() AND application_name LIKE 'walfill%'
            AND query LIKE 'COPY (SELECT%' AND wait_event = 'ClientWrite'",
        Duration::from_secs(30),
        "a chunk's COPY to cut off in the middle",
    );
    std::fs::write(&release, "").unwrap();
    let status = wait_child(run, Duration::from_secs(120));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the backfill failed:\n{text}");
    assert!(
        text.contains("reading it again") && text.contains("cut off; it is stored again"),
        "the chunk was not read and stored again:\n{text}"
    );
    assert!(text.contains(rows), "the rows did not go {rows:?}:\n{text}");
    assert_eq!(
        number(&db, "SELECT rows_copied FROM walfill.versions"),
        60_000,
        "every row counted once"
    );
    walfill.ok(&["swap", "cut", "v1"]);
    assert_view_matches(&db, "public.cut", "wide", select, None, "id");
}

/// The table and a column the transform reads are renamed between two
/// chunks, and the table is rewritten (VACUUM FULL), while a chunked
/// copy runs: each chunk locks the table by its name of the moment and
/// reads the columns by their attribute numbers; the view is exact.
#[test]
fn a_chunked_copy_reads_through_renames_and_a_rewrite_between_chunks() {
    let db = TestDb::new("chunked_rename");
    create_orders(&db, 12_000);
    let walfill = Walfill::new(
        &db,
        &format!(
            "{}max_rows_per_second = 4000\n\n{}",
            CHUNKED.replace("chunk_rows = 1000", "chunk_rows = 500"),
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let run = walfill.spawn(&["backfill", "orders_summary"]);
    db.wait_for(
        "SELECT rows_copied >= 3000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 3000 rows",
    );
    db.exec(
        "ALTER TABLE orders RENAME TO orders_renamed;
         ALTER TABLE orders_renamed RENAME COLUMN status TO state;
         UPDATE orders_renamed SET state = 'renamed', note = 'after' WHERE id % 50 = 0;",
    );
    db.wait_for(
        "SELECT rows_copied >= 6000 FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to pass 6000 rows",
    );
    // A rewrite: the table gets new files between two chunks.
    db.exec("VACUUM FULL orders_renamed");
    db.exec("INSERT INTO orders_renamed VALUES (500000, 1, 'late', 5, 'new')");
    walfill.wait_ok(run, Duration::from_secs(120));
    assert_view_matches(
        &db,
        "derived.orders_summary",
        "orders_renamed",
        &ORDERS_SELECT.replace("upper(status)", "upper(state)"),
        Some(&ORDERS_WHERE.replace("status", "state")),
        "id",
    );
}
