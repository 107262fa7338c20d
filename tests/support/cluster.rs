//! Private databases on the cluster started by `scripts/test.sh`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

/// The superuser URL of the test cluster (its `postgres` database).
pub fn admin_url() -> String {
    std::env::var("WALFILL_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "WALFILL_TEST_PG_URL is not set: run the tests with scripts/test.sh, which starts \
             the private PostgreSQL cluster they need"
        )
    })
}

/// The superuser URL of the second test cluster, which has wal_level=replica.
pub fn replica_admin_url() -> String {
    std::env::var("WALFILL_TEST_PG_REPLICA_URL").unwrap_or_else(|_| {
        panic!("WALFILL_TEST_PG_REPLICA_URL is not set: run the tests with scripts/test.sh")
    })
}

/// A cluster of a newer major version started by `scripts/test-env.sh`.
pub struct NewerCluster {
    /// Its major version (16, 17, 18).
    pub major: u32,
    /// Its superuser URL (database `postgres`).
    pub admin: String,
    /// The archive its `archive_command` fills.
    pub archive: String,
}

/// The clusters of newer majors the test environment started (at least
/// one: a test over none would prove nothing).
pub fn newer_clusters() -> Vec<NewerCluster> {
    let env = |name: &str| {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run the tests with scripts/test.sh"))
    };
    let clusters: Vec<NewerCluster> = env("WALFILL_TEST_PG_MAJORS")
        .split_whitespace()
        .map(|m| {
            let major: u32 = m.parse().expect("a major version");
            NewerCluster {
                major,
                admin: env(&format!("WALFILL_TEST_PG{major}_URL")),
                archive: env(&format!("WALFILL_TEST_PG{major}_ARCHIVE_URL")),
            }
        })
        .collect();
    assert!(
        !clusters.is_empty(),
        "WALFILL_TEST_PG_MAJORS lists no version: no newer cluster to test on"
    );
    clusters
}

/// `url` with its database replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a URL with a database");
    format!("{base}/{database}")
}

/// Connects, panicking with the URL on failure.
pub fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// A database of its own for one test, dropped (with its slots) at the end.
pub struct TestDb {
    /// Database name.
    pub name: String,
    admin: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestDb {
    /// A fresh database on the main (logical) test cluster.
    pub fn new(tag: &str) -> TestDb {
        TestDb::on(&admin_url(), tag)
    }

    /// A fresh database on the cluster at `admin`.
    pub fn on(admin: &str, tag: &str) -> TestDb {
        TestDb::created(admin, tag, "")
    }

    /// A fresh database on the main test cluster, created with `options`
    /// (`CREATE DATABASE name options`: a locale, say).
    pub fn with_options(tag: &str, options: &str) -> TestDb {
        TestDb::created(&admin_url(), tag, options)
    }

    fn created(admin: &str, tag: &str, options: &str) -> TestDb {
        let name = format!(
            "wf_{tag}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut client = connect(admin);
        client
            .batch_execute(&format!("CREATE DATABASE {name} {options}"))
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        TestDb {
            name,
            admin: admin.to_string(),
        }
    }

    /// A handle on database `name`, which exists on the cluster at `admin`
    /// (dropped with the handle, like a new one).
    pub fn existing(admin: &str, name: &str) -> TestDb {
        TestDb {
            name: name.to_string(),
            admin: admin.to_string(),
        }
    }

    /// The superuser URL of this database.
    pub fn url(&self) -> String {
        with_database(&self.admin, &self.name)
    }

    /// A new connection to this database.
    pub fn client(&self) -> Client {
        connect(&self.url())
    }

    /// Runs SQL, panicking with the server's message and the statement on failure.
    pub fn exec(&self, sql: &str) {
        if let Err(e) = self.client().batch_execute(sql) {
            let message = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_string());
            panic!("{message}\nin: {sql}");
        }
    }

    /// Runs a CHECKPOINT and returns the name of a segment at or before its
    /// running-transactions record (where decoding can start): taken before
    /// the CHECKPOINT, so that however much WAL other tests write meanwhile,
    /// segments copied from it on hold that record.
    pub fn checkpoint_segment(&self) -> String {
        let first = self
            .value("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")
            .expect("a segment name");
        self.exec("CHECKPOINT");
        first
    }

    /// The server's major version (15, 16, ...).
    pub fn major(&self) -> u32 {
        self.value("SELECT current_setting('server_version_num')::int / 10000")
            .and_then(|v| v.parse().ok())
            .expect("the server's version")
    }

    /// Whether the server was built with lz4 (`COMPRESSION lz4`).
    pub fn supports_lz4(&self) -> bool {
        self.value(
            "SELECT 'lz4' = ANY (enumvals) FROM pg_settings
              WHERE name = 'default_toast_compression'",
        )
        .as_deref()
            == Some("true")
    }

    /// The single value `sql` returns, as text.
    pub fn value(&self, sql: &str) -> Option<String> {
        let wrapped = format!("SELECT x::text FROM ({sql}) AS q(x)");
        self.client()
            .query_one(&wrapped, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// Waits until `sql` returns true, or panics after `timeout` with `what`.
    pub fn wait_for(&self, sql: &str, timeout: Duration, what: &str) {
        let started = Instant::now();
        let mut client = self.client();
        loop {
            let ok: Option<bool> = client.query_one(sql, &[]).map(|r| r.get(0)).unwrap_or(None);
            if ok == Some(true) {
                return;
            }
            assert!(started.elapsed() < timeout, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if std::env::var_os("WALFILL_TEST_KEEP_DB").is_some() {
            eprintln!("keeping database {}", self.name);
            return;
        }
        let Ok(mut client) = Client::connect(&self.admin, NoTls) else {
            return;
        };
        // Slots of this database must go before the database can.
        drop_slots(&mut client, "database", &self.name);
        let _ = client.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Drops the replication slots whose `column` (`slot_name` or `database`)
/// is `value`, ending the sessions that use them; gives up after 5 s.
pub fn drop_slots(client: &mut Client, column: &str, value: &str) {
    for _ in 0..50 {
        let _ = client.execute(
            &format!(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
                  WHERE {column} = $1 AND active_pid IS NOT NULL"
            ),
            &[&value],
        );
        let _ = client.execute(
            &format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                  WHERE {column} = $1 AND NOT active"
            ),
            &[&value],
        );
        let left: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM pg_replication_slots WHERE {column} = $1"),
                &[&value],
            )
            .map(|r| r.get(0))
            .unwrap_or(0);
        if left == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The URL of the archive the main test cluster archives its WAL to.
pub fn archive_url() -> String {
    std::env::var("WALFILL_TEST_ARCHIVE_URL").unwrap_or_else(|_| {
        panic!("WALFILL_TEST_ARCHIVE_URL is not set: run the tests with scripts/test.sh")
    })
}

impl TestDb {
    /// Reads of `table` so far (sequential and index scans, tuples they
    /// read), as the statistics system counts them. A backend reports its
    /// counters when it exits, so this first waits until no other session
    /// is connected to the database (walfill's have ended).
    pub fn table_reads(&self, table: &str) -> (i64, i64, i64, i64) {
        self.wait_for(
            "SELECT count(*) = 0 FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
            Duration::from_secs(30),
            "the other sessions of the database to end",
        );
        let mut client = self.client();
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .expect("clear the stats snapshot");
        let row = client
            .query_one(
                "SELECT seq_scan, coalesce(idx_scan, 0), seq_tup_read,
                        coalesce(idx_tup_fetch, 0)
                   FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
                &[&table],
            )
            .unwrap_or_else(|e| panic!("reading the scans of {table}: {e}"));
        (row.get(0), row.get(1), row.get(2), row.get(3))
    }
}

impl TestDb {
    /// Completes the WAL segment being written and waits until the cluster
    /// has archived it, so the archive holds everything written so far.
    pub fn archive_wal(&self) {
        let segment = self
            .value("SELECT pg_walfile_name(pg_switch_wal())")
            .expect("a segment name");
        self.wait_for(
            &format!(
                "SELECT coalesce(last_archived_wal >= '{segment}', false) FROM pg_stat_archiver"
            ),
            Duration::from_secs(60),
            "the archiver",
        );
    }
}
