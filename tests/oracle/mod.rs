//! The decoder against PostgreSQL's own logical decoding: a `test_decoding`
//! slot is created before a workload, the workload runs, WAL is switched and
//! archived, and `walfill decode --format test_decoding` of the archived
//! segments must print exactly what the slot prints for the same range.

mod damage;
mod fixtures;
mod history;
mod schemas;
mod start;
mod truncates;
mod types;
mod versions;
mod workloads;

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::archiver::LocalArchive;
use crate::support::TestDb;

/// The archive the test cluster's `archive_command` fills.
pub fn archive_url() -> String {
    std::env::var("WALFILL_TEST_ARCHIVE_URL").unwrap_or_else(|_| {
        panic!("WALFILL_TEST_ARCHIVE_URL is not set: run the tests with scripts/test.sh")
    })
}

/// A database with a `test_decoding` slot created after `setup` ran.
pub struct Oracle {
    pub db: TestDb,
    slot: String,
    /// Where decoding must start (the slot's restart LSN).
    pub restart: String,
    /// The slot's consistent point: transactions committing from here on.
    pub from: String,
    /// The archive the database's cluster fills.
    pub archive: String,
}

/// What the slot printed and the range it covers.
pub struct Expected {
    /// The slot's lines, joined with newlines.
    pub text: String,
    /// The end of the workload's WAL.
    pub to: String,
}

impl Oracle {
    pub fn new(tag: &str, setup: &str) -> Oracle {
        let db = TestDb::new(tag);
        if !setup.is_empty() {
            db.exec(setup);
        }
        Oracle::on(db)
    }

    /// The oracle of a database prepared by the caller: its slot starts now.
    pub fn on(db: TestDb) -> Oracle {
        Oracle::on_archived(db, archive_url())
    }

    /// Like [`on`](Oracle::on), for a database of the cluster that archives
    /// into `archive`.
    pub fn on_archived(db: TestDb, archive: String) -> Oracle {
        let slot = format!("{}_oracle", db.name);
        db.exec(&format!(
            "SELECT pg_create_logical_replication_slot('{slot}', 'test_decoding')"
        ));
        let restart = db
            .value(&format!(
                "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
            ))
            .unwrap();
        let from = db
            .value(&format!(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
            ))
            .unwrap();
        Oracle {
            db,
            slot,
            restart,
            from,
            archive,
        }
    }

    /// Ends the workload: reads the slot's output, switches WAL and waits
    /// until the archive has every segment of the range.
    pub fn expected(&self) -> Expected {
        let to = self.db.value("SELECT pg_current_wal_lsn()").unwrap();
        let text = self
            .db
            .value(&format!(
                "SELECT coalesce(string_agg(data, E'\\n' ORDER BY n), '')
                   FROM pg_logical_slot_peek_changes('{}', '{to}', NULL) WITH ORDINALITY AS c(lsn, xid, data, n)",
                self.slot
            ))
            .unwrap();
        self.db.exec("SELECT pg_switch_wal()");
        let started = Instant::now();
        loop {
            let done = self.db.value(&format!(
                "SELECT coalesce(last_archived_wal >= pg_walfile_name('{to}'::pg_lsn - 1), false) FROM pg_stat_archiver"
            ));
            if done.as_deref() == Some("true") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "WAL up to {to} was not archived"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Expected { text, to }
    }

    /// `walfill decode` of the oracle's range in test_decoding format.
    pub fn decode(&self, archive: &str, to: &str, extra: &[&str]) -> Output {
        let mut args = vec![
            "decode",
            "--archive",
            archive,
            "--restart-from",
            &self.restart,
            "--from",
            &self.from,
            "--to",
            to,
            "--format",
            "test_decoding",
        ];
        let source = self.db.url();
        args.extend(["--source", &source]);
        args.extend(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_walfill"))
            .args(&args)
            .env("RUST_LOG", "walfill=info")
            .env_remove("WALFILL_CONFIG")
            .output()
            .expect("run walfill decode")
    }

    /// Decodes the range and insists on output identical to the slot's.
    pub fn assert_same(&self, extra: &[&str]) -> Output {
        let expected = self.expected();
        let out = self.decode(&self.archive, &expected.to, extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "walfill decode failed: {stderr}");
        let actual = String::from_utf8_lossy(&out.stdout);
        assert_same_text(&expected.text, actual.trim_end_matches('\n'));
        out
    }
}

/// Compares the two outputs, showing the first differing line.
pub fn assert_same_text(expected: &str, actual: &str) {
    if expected == actual {
        return;
    }
    let e: Vec<&str> = expected.split('\n').collect();
    let a: Vec<&str> = actual.split('\n').collect();
    let first = e
        .iter()
        .zip(&a)
        .position(|(x, y)| x != y)
        .unwrap_or(e.len().min(a.len()));
    let clip = |s: &str| s.chars().take(600).collect::<String>();
    panic!(
        "walfill decode differs from test_decoding at line {} ({} lines expected, {} printed)\n\
         expected: {}\n  actual: {}",
        first + 1,
        e.len(),
        a.len(),
        clip(e.get(first).unwrap_or(&"<end>")),
        clip(a.get(first).unwrap_or(&"<end>")),
    );
}

/// Copies the cluster's archived segments from the one holding `lsn` on.
pub fn copy_segments_from(o: &Oracle, to: &LocalArchive, lsn: &str) {
    let first =
        o.db.value(&format!("SELECT pg_walfile_name('{lsn}')"))
            .expect("a segment name");
    let dir = PathBuf::from(archive_url().trim_start_matches("file://")).join("wal");
    std::fs::create_dir_all(to.wal()).expect("archive dir");
    for entry in std::fs::read_dir(&dir).expect("the cluster's archive") {
        let name = entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.len() >= 24 && name[..8] == first[..8] && name[..24] >= first[..] {
            std::fs::copy(dir.join(&name), to.wal().join(&name)).expect("copy a segment");
        }
    }
}
