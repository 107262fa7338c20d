//! Which commits a chunk sees: a commit invisible past its WAL record, the same race decided by LSN alone, stream xids across an epoch.

use super::*;

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
        walfill::control::state::install(&dest).await.unwrap();
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
