//! A failover on clusters of a test's own: a primary (1 MiB segments,
//! `wal_level = logical`) archiving with `cp` into a flat folder, as
//! PostgreSQL's documentation shows, and a standby of it that is promoted
//! and archives timeline 2 (its history file, the old timeline's last
//! segment as `.partial`, then its own segments) into the same folder.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::cluster::connect;
use super::server::{as_server_owner, give_to_server, pg_bindir, server_command};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// One server of the pair.
struct Node {
    data: PathBuf,
    port: u16,
    running: bool,
}

/// The primary, the standby once made, and the folder both archive into.
pub struct Failover {
    dir: PathBuf,
    /// The flat archive folder.
    pub archive: PathBuf,
    primary: Node,
    standby: Option<Node>,
}

pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Creates a cluster of 1 MiB segments in `data`, superuser `postgres`
/// trusted, without a locale.
pub(super) fn initdb(data: &Path) {
    as_server_owner(
        &pg_bindir().join("initdb"),
        &[
            "-D",
            path_str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-locale",
            "-E",
            "UTF8",
            "--wal-segsize=1",
        ],
    );
}

pub(super) fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

impl Failover {
    /// Creates and starts the primary.
    pub fn start() -> Failover {
        let dir = std::env::temp_dir().join(format!(
            "walfill-failover-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let archive = dir.join("archive");
        std::fs::create_dir_all(&archive).expect("archive folder");
        give_to_server(&dir);
        let data = dir.join("primary");
        initdb(&data);
        let port = free_port();
        let arch = archive.display();
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{dir}'\n\
             wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n\
             wal_keep_size = '256MB'\nhot_standby = on\narchive_mode = on\n\
             archive_command = 'test ! -f {arch}/%f && cp %p {arch}/%f.tmp && mv {arch}/%f.tmp {arch}/%f'\n\
             fsync = off\nlc_messages = 'C'\ntimezone = 'UTC'\n",
            dir = dir.display(),
        );
        append(&data.join("postgresql.auto.conf"), &conf);
        let mut failover = Failover {
            dir,
            archive,
            primary: Node {
                data,
                port,
                running: false,
            },
            standby: None,
        };
        failover.pg_ctl_start(false);
        failover
    }

    /// The superuser URL of database `db` on the primary.
    pub fn primary_url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.primary.port)
    }

    /// The superuser URL of database `db` on the standby.
    pub fn standby_url(&self, db: &str) -> String {
        let port = self.standby.as_ref().expect("a standby").port;
        format!("postgresql://postgres@127.0.0.1:{port}/{db}")
    }

    /// The archive's URL.
    pub fn archive_url(&self) -> String {
        format!("file://{}", self.archive.display())
    }

    /// Makes a streaming standby from a base backup of the primary, starts
    /// it and waits until it has replayed all the primary's WAL.
    pub fn add_standby(&mut self) {
        let data = self.dir.join("standby");
        let primary_port = self.primary.port.to_string();
        as_server_owner(
            &pg_bindir().join("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary_port,
                "-U",
                "postgres",
                "-D",
                path_str(&data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        );
        let port = free_port();
        append(
            &data.join("postgresql.auto.conf"),
            &format!("port = {port}\n"),
        );
        self.standby = Some(Node {
            data,
            port,
            running: false,
        });
        self.pg_ctl_start(true);
        self.wait_caught_up();
    }

    /// Waits until the standby has replayed everything the primary wrote.
    pub fn wait_caught_up(&self) {
        let target: String = connect(&self.primary_url("postgres"))
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .expect("primary position")
            .get(0);
        let mut standby = connect(&self.standby_url("postgres"));
        let started = Instant::now();
        loop {
            let caught: bool = standby
                .query_one(
                    "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)",
                    &[&target],
                )
                .expect("standby position")
                .get(0);
            if caught {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the standby did not catch up to {target}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the primary (which archives what it completed and sends the
    /// standby everything), then promotes the standby to timeline 2.
    pub fn promote(&mut self) {
        self.wait_caught_up();
        let data = self.primary.data.clone();
        as_server_owner(
            &pg_bindir().join("pg_ctl"),
            &["-D", path_str(&data), "-m", "fast", "-w", "stop"],
        );
        self.primary.running = false;
        let standby = self.standby.as_ref().expect("a standby").data.clone();
        as_server_owner(
            &pg_bindir().join("pg_ctl"),
            &["-D", path_str(&standby), "-w", "promote"],
        );
    }

    fn pg_ctl_start(&mut self, standby: bool) {
        let node = if standby {
            self.standby.as_mut().expect("a standby")
        } else {
            &mut self.primary
        };
        let log = self.dir.join(if standby {
            "standby.log"
        } else {
            "primary.log"
        });
        as_server_owner(
            &pg_bindir().join("pg_ctl"),
            &[
                "-D",
                path_str(&node.data),
                "-l",
                path_str(&log),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        node.running = true;
    }
}

impl Drop for Failover {
    fn drop(&mut self) {
        for node in std::iter::once(&self.primary).chain(self.standby.as_ref()) {
            if node.running {
                let _ = server_command(&pg_bindir().join("pg_ctl"))
                    .args(["-D", path_str(&node.data), "-m", "immediate", "-w", "stop"])
                    .output();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Appends `text` to a server configuration file.
pub(super) fn append(path: &Path, text: &str) {
    let mut current = std::fs::read_to_string(path).unwrap_or_default();
    current.push_str(text);
    std::fs::write(path, current).expect("write server configuration");
}
