//! The chunked snapshot copy: each chunk in a short transaction of its own,
//! reconciled with the stream by what each chunk's snapshot could see.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::failover::Failover;
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches, TestDb, Walfill};

const CHUNKED: &str = "[backfill]\nsnapshot = \"chunked\"\nchunk_rows = 1000\n";

/// Samples, every 100 ms until stopped, the age of the oldest open
/// transaction of any other client session of `db`; returns the largest.
struct OldestXact {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<f64>,
}

impl OldestXact {
    fn start(db: &TestDb) -> OldestXact {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let mut client = db.client();
        let handle = std::thread::spawn(move || {
            let mut oldest = 0f64;
            while !flag.load(Ordering::Relaxed) {
                let age: f64 = client
                    .query_one(
                        "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0)::float8
                           FROM pg_stat_activity
                          WHERE datname = current_database() AND backend_type = 'client backend'
                            AND pid <> pg_backend_pid() AND application_name LIKE 'walfill%'",
                        &[],
                    )
                    .expect("sampling transactions")
                    .get(0);
                oldest = oldest.max(age);
                std::thread::sleep(Duration::from_millis(100));
            }
            oldest
        });
        OldestXact { stop, handle }
    }

    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("sampler")
    }
}

/// The one number `sql` returns.
fn number(db: &TestDb, sql: &str) -> i64 {
    db.value(sql)
        .unwrap_or_else(|| panic!("{sql} returned NULL"))
        .parse()
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The view equals the transform of the source, row by row.
fn assert_orders_exact(db: &TestDb) {
    assert_view_matches(
        db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
}

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

/// Three workers copy key ranges cut from the key's histogram, with writes
/// going on; killed mid-copy, each range resumes after its own last stored
/// key, and the view is exact.
#[test]
fn parallel_key_ranges_under_writes_resume_each_range_and_are_exact() {
    let db = TestDb::new("chunked_parallel");
    create_orders(&db, 30_000);
    let walfill = Walfill::new(
        &db,
        &format!(
            "{CHUNKED}workers = 3\nmax_rows_per_second = 9000\n\n{}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let writer = Writer::start(&db, 30_000, 1_000_000, 31);
    let sampler = OldestXact::start(&db);

    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT count(*) = 3 AND bool_and(rows_copied >= 2000) FROM walfill.chunk_ranges",
        Duration::from_secs(60),
        "every range to store two chunks",
    );
    run.kill().expect("SIGKILL walfill");
    let _ = run.wait();
    let stored: i64 = number(&db, "SELECT rows_copied FROM walfill.versions");
    let ranges = db
        .value(
            "SELECT string_agg(coalesce(above, '-') || '..' || coalesce(up_to, '-'), ' ' ORDER BY range_no)
               FROM walfill.chunk_ranges",
        )
        .unwrap();
    let before: Vec<String> = db
        .client()
        .query(
            "SELECT cursor[1] FROM walfill.chunk_ranges ORDER BY range_no",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();

    walfill.ok(&["backfill", "orders_summary", "--no-swap"]);
    let oldest = sampler.stop();
    let ops = writer.stop();
    assert!(ops > 100, "the writer only managed {ops} statements");
    assert!(
        oldest < 1.0,
        "a walfill transaction stayed open {oldest:.2} s"
    );
    // The ranges are the same, each started at its own cursor and ended.
    let after = db
        .value(
            "SELECT string_agg(coalesce(above, '-') || '..' || coalesce(up_to, '-'), ' ' ORDER BY range_no)
               FROM walfill.chunk_ranges WHERE done",
        )
        .unwrap();
    assert_eq!(after, ranges, "ranges {ranges} are not all done: {after}");
    assert!(before.iter().all(|c| !c.is_empty()));
    let copied: i64 = number(&db, "SELECT rows_copied FROM walfill.versions");
    // Each range went on from its own cursor: ranges started over would
    // count the {stored} rows stored before the kill twice.
    assert!(
        (27_000..30_000 + stored).contains(&copied),
        "{copied} rows counted as copied for about 30000 ({ranges}), {stored} before the kill"
    );
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_summary", "v1"]);
    assert_orders_exact(&db);
}

/// An identity transform copied by two workers in key ranges, with writes
/// going on: chunks go straight into the version's table, each row
/// carrying its own chunk's version, side by side; the stream decides
/// against those versions, and the view is exact.
#[test]
fn an_identity_copy_in_parallel_ranges_goes_straight_in_and_is_exact() {
    let db = TestDb::new("chunked_identity");
    create_orders(&db, 20_000);
    let columns = "id, customer_id, status, total_cents, note";
    let target = format!(
        "[[target]]\nname = \"orders_all\"\nsource = \"public.orders\"\n\
         select = \"{columns}\"\nversion = \"v1\"\nschema = \"derived\"\n"
    );
    let walfill = Walfill::new(
        &db,
        &format!("{CHUNKED}workers = 2\nmax_rows_per_second = 10000\n\n{target}"),
    );
    walfill.ok(&["setup"]);
    let writer = Writer::start(&db, 20_000, 1_000_000, 37);
    let out = walfill.run(&["backfill", "orders_all", "--no-swap"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("copied straight in"), "{stderr}");
    assert!(
        stderr.contains("copying key ranges in parallel"),
        "{stderr}"
    );
    assert!(writer.stop() > 50);
    assert!(
        number(
            &db,
            "SELECT count(DISTINCT _walfill_seq) FROM derived.orders_all__v1 WHERE _walfill_seq < 0"
        ) > 10,
        "the chunks' rows do not carry their own chunks' versions"
    );
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_all", "v1"]);
    assert_view_matches(&db, "derived.orders_all", "orders", columns, None, "id");
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

fn wait_child(mut child: std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            panic!("walfill did not finish in {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` contains `text`.
fn wait_log(path: &Path, text: &str, timeout: Duration) -> String {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(text) {
            return log;
        }
        assert!(
            started.elapsed() < timeout,
            "no {text:?} in walfill's log after {timeout:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A session whose commit waits for a synchronous standby that never
/// answers: its commit record is in the WAL, yet it stays invisible to
/// new snapshots until it is cancelled.
struct Held {
    pid: i32,
    handle: JoinHandle<()>,
}

impl Held {
    /// Runs `sql` in a transaction and commits it, in a thread of its own;
    /// returns once the commit waits for the standby.
    fn start(db: &TestDb, sql: &str) -> Held {
        let mut client = db.client();
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        let sql = sql.to_string();
        let handle = std::thread::spawn(move || {
            // Returns once cancelled: committed locally, with a warning.
            client
                .batch_execute(&format!(
                    "SET synchronous_commit = on; BEGIN; {sql}; COMMIT"
                ))
                .expect("the held transaction");
        });
        db.wait_for(
            &format!("SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = {pid}"),
            Duration::from_secs(30),
            "a commit waiting for the synchronous standby",
        );
        Held { pid, handle }
    }

    /// Cancels the wait: the transaction becomes visible.
    fn release(self, db: &TestDb) {
        db.exec(&format!("SELECT pg_cancel_backend({})", self.pid));
        self.handle.join().expect("held session");
    }
}

/// An open transaction with an xid, and nothing written.
fn open_xact(db: &TestDb) -> postgres::Client {
    let mut client = db.client();
    client
        .batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .expect("an open transaction");
    client
}

/// The race between a commit's WAL record and its visibility, forced with
/// a synchronous standby that never answers (on a cluster of the test's
/// own), as a slot is made and as chunks are read:
/// - Y commits while the slot is being made, after the point the slot's
///   snapshot builder waits for (two open transactions, Z1 and Z2, hold it
///   at each of its two steps, which CHECKPOINTs move on). Y's commit
///   record is before the consistent point, so Y is not in the stream, and
///   Y stays invisible: the copy must wait for it (the fence).
/// - X commits after the fence: its commit record is before every chunk's
///   WAL position, and X stays invisible while every chunk is read. Its
///   change comes from the stream and must win over the chunks' rows.
///
/// Returns the keys whose row in the view differs from the source's.
fn race(lsn_rule: bool) -> Vec<i64> {
    let cluster = Failover::start();
    let admin = cluster.primary_url("postgres");
    let setup = TestDb::on(&admin, "race_setup");
    setup.exec("ALTER SYSTEM SET synchronous_commit = 'local'");
    setup.exec("ALTER SYSTEM SET synchronous_standby_names = 'never_answers'");
    setup.exec("SELECT pg_reload_conf()");
    let db = TestDb::on(&admin, "race");
    db.exec(
        "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL);
         INSERT INTO items SELECT g, g FROM generate_series(1, 3000) g;
         ANALYZE items;",
    );
    let walfill = Walfill::new(
        &db,
        "[backfill]\nsnapshot = \"chunked\"\nchunk_rows = 500\n\n\
         [[target]]\nname = \"items_x\"\nsource = \"public.items\"\nkey = [\"id\"]\n\
         select = \"id, v * 10 AS v10\"\nversion = \"v1\"\nschema = \"derived\"\n",
    );
    walfill.ok(&["setup"]);

    let dir =
        std::env::temp_dir().join(format!("walfill-race-{}-{}", std::process::id(), lsn_rule));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, release) = (dir.join("walfill.log"), dir.join("release"));
    let _ = std::fs::remove_file(&release);
    let points = if lsn_rule {
        "copy.fenced,apply.lsn_rule"
    } else {
        "copy.fenced"
    };
    let step = Duration::from_millis(700);
    let mut z1 = open_xact(&db);
    let run = walfill
        .command_env(
            &["backfill", "items_x"],
            &[
                ("WALFILL_FAILPOINTS", points),
                ("WALFILL_FAILPOINT_RELEASE", release.to_str().unwrap()),
            ],
        )
        .stderr(File::create(&log).unwrap())
        .spawn()
        .expect("spawn walfill");
    wait_log(&log, "creating the slot", Duration::from_secs(30));
    std::thread::sleep(step);
    let mut z2 = open_xact(&db);
    z1.batch_execute("COMMIT; CHECKPOINT").unwrap();
    std::thread::sleep(step);
    let y = Held::start(&db, "UPDATE items SET v = v + 1000 WHERE id IN (5, 1505)");
    z2.batch_execute("COMMIT; CHECKPOINT").unwrap();
    db.wait_for(
        "SELECT phase = 'copying' FROM walfill.versions",
        Duration::from_secs(30),
        "the slot to be made",
    );
    // The fence holds the copy while Y is invisible, and says why.
    let text = wait_log(&log, "waits for transactions", Duration::from_secs(15));
    assert!(
        text.contains(&format!("pid {}", y.pid)),
        "the wait does not name Y's session:\n{text}"
    );
    assert!(
        !text.contains("copy.fenced holding"),
        "the copy did not wait for Y"
    );
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.chunk_snapshots")
            .as_deref(),
        Some("0")
    );
    y.release(&db);
    wait_log(&log, "copy.fenced holding", Duration::from_secs(30));

    // X: committed in the WAL, invisible while every chunk is read.
    let x = Held::start(
        &db,
        "UPDATE items SET v = v + 5000 WHERE id IN (10, 1010, 2990)",
    );
    std::fs::write(&release, "").unwrap();
    db.wait_for(
        "SELECT phase <> 'copying' FROM walfill.versions",
        Duration::from_secs(60),
        "the copy to finish",
    );
    // No chunk saw X: the race happened.
    let seen = "SELECT count(*) FROM derived.items_x__v1 WHERE v10 >= 50000 AND _walfill_seq < 0";
    assert_eq!(db.value(seen).as_deref(), Some("0"), "a chunk saw X");
    x.release(&db);
    let status = wait_child(run, Duration::from_secs(120));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the backfill failed:\n{text}");
    let chunks: i64 = number(&db, "SELECT count(*) FROM walfill.chunk_snapshots");
    assert_eq!(chunks, 6, "3000 rows in chunks of 500");

    let rows = |sql: &str| -> Vec<(i64, String)> {
        db.client()
            .query(sql, &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    let expected = rows("SELECT id, (v * 10)::text FROM items ORDER BY id");
    let actual = rows("SELECT id, v10::text FROM derived.items_x ORDER BY id");
    assert_eq!(expected.len(), 3000);
    assert_eq!(actual.len(), 3000);
    assert_eq!(
        expected
            .iter()
            .filter(|(_, v)| v.parse::<i64>().unwrap() >= 50_000)
            .count(),
        3,
        "X is visible in the source at the end"
    );
    expected
        .iter()
        .zip(&actual)
        .filter(|(e, a)| e != a)
        .map(|(e, _)| e.0)
        .collect()
}

/// With each chunk's snapshot deciding, the view is exact after the race.
#[test]
fn a_commit_invisible_past_its_wal_record_is_decided_by_the_chunks_snapshots() {
    assert_eq!(race(false), Vec::<i64>::new());
}

/// With chunk rows versioned by an LSN read with their snapshot (a
/// watermark), X's change loses to the chunks' rows: the race is real.
#[test]
fn the_same_race_decided_by_a_watermark_lsn_loses_the_invisible_commit() {
    assert_eq!(race(true), vec![10, 1010, 2990]);
}

/// `walfill.chunk_sees` applies PostgreSQL's visibility rule to 32-bit
/// xids as the stream sends them, widened by the epoch nearest the chunk's
/// snapshot, including snapshots that straddle an epoch boundary.
#[test]
fn chunk_visibility_widens_stream_xids_across_an_epoch() {
    let db = TestDb::new("chunk_sees");
    let mut client = db.client();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (dest, connection) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        walfill::state::install(&dest).await.unwrap();
    });
    let epoch = 1i64 << 32;
    // (xmin, xmax, running) of three snapshots: in epoch 0, in epoch 5,
    // and one whose running xids straddle the step from epoch 5 to 6.
    let snapshots: [(i64, i64, &str); 3] = [
        (1000, 1010, "{1003,1007}"),
        (5 * epoch + 100, 5 * epoch + 120, "{}"),
        (
            6 * epoch - 10,
            6 * epoch + 5,
            &format!("{{{},{}}}", 6 * epoch - 3, 6 * epoch + 2),
        ),
    ];
    let mut ids = Vec::new();
    for (xmin, xmax, xip) in snapshots {
        let id: i32 = client
            .query_one(
                "INSERT INTO walfill.chunk_snapshots (version_table, lsn, snap_xmin, snap_xmax, snap_xip)
                 VALUES ('t', '0/1', $1, $2, $3::text::bigint[]) RETURNING id",
                &[&xmin, &xmax, &xip],
            )
            .unwrap()
            .get(0);
        ids.push(id);
    }
    let low = |full: i64| full & 0xffff_ffff;
    let cases: Vec<(usize, i64, bool)> = vec![
        (0, 999, true),                   // before xmin
        (0, 1003, false),                 // running
        (0, 1005, true),                  // committed between xmin and xmax
        (0, 1010, false),                 // at xmax: started after
        (0, 1500, false),                 // long after
        (1, low(5 * epoch + 99), true),   // the same low bits in epoch 5
        (1, low(5 * epoch + 120), false), // at xmax
        (2, low(6 * epoch - 11), true),   // before xmin, epoch 5
        (2, low(6 * epoch - 3), false),   // running, epoch 5
        (2, low(6 * epoch - 1), true),    // committed, epoch 5
        (2, low(6 * epoch + 1), true),    // committed, epoch 6 (low bits 1)
        (2, low(6 * epoch + 2), false),   // running, epoch 6
        (2, low(6 * epoch + 7), false),   // after xmax, epoch 6
    ];
    for (snapshot, xid, visible) in cases {
        let seen: bool = client
            .query_one("SELECT walfill.chunk_sees($1, $2)", &[&ids[snapshot], &xid])
            .unwrap()
            .get(0);
        assert_eq!(
            seen, visible,
            "snapshot {snapshot} {:?}, stream xid {xid}",
            snapshots[snapshot]
        );
    }
}
