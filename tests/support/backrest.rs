//! A cluster of a test's own that archives with pgBackRest, as its
//! operators run it: `archive_command = 'pgbackrest ... archive-push %p'`
//! into a repository with `repo1-retention-full = 1`, full backups by
//! `pgbackrest backup`, and WAL expired by `pgbackrest expire`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use super::failover::{append, free_port, initdb, path_str};
use super::server::{as_server_owner, give_to_server, pg_bindir, server_command};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The cluster, its pgBackRest configuration and repository.
pub struct BackRestCluster {
    dir: PathBuf,
    data: PathBuf,
    port: u16,
    config: PathBuf,
}

impl BackRestCluster {
    /// Creates the cluster (1 MiB segments, `wal_level = logical`), its
    /// stanza `main`, and starts it archiving into the stanza.
    pub fn start() -> BackRestCluster {
        let dir = std::env::temp_dir().join(format!(
            "walfill-backrest-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster folder");
        let data = dir.join("data");
        let config = dir.join("pgbackrest.conf");
        let port = free_port();
        std::fs::write(
            &config,
            format!(
                "[global]\nrepo1-path={d}/repo\nrepo1-retention-full=1\nlog-path={d}/log\n\
                 lock-path={d}/lock\nspool-path={d}/spool\nlog-level-console=warn\n\
                 log-level-file=off\nstart-fast=y\narchive-timeout=120\n\n\
                 [main]\npg1-path={data}\npg1-port={port}\npg1-socket-path={d}\npg1-user=postgres\n",
                d = dir.display(),
                data = data.display(),
            ),
        )
        .expect("write pgbackrest.conf");
        give_to_server(&dir);
        initdb(&data);
        append(
            &data.join("postgresql.auto.conf"),
            &format!(
                "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{d}'\n\
                 wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n\
                 archive_mode = on\n\
                 archive_command = 'pgbackrest --config={c} --stanza=main archive-push %p'\n\
                 fsync = off\nlc_messages = 'C'\ntimezone = 'UTC'\n",
                d = dir.display(),
                c = config.display(),
            ),
        );
        let cluster = BackRestCluster {
            dir,
            data,
            port,
            config,
        };
        as_server_owner(
            &pg_bindir().join("pg_ctl"),
            &[
                "-D",
                path_str(&cluster.data),
                "-l",
                path_str(&cluster.dir.join("server.log")),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        cluster.pgbackrest(&["stanza-create"]);
        cluster
    }

    /// The superuser URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The stanza's archive, as walfill reads it.
    pub fn archive_url(&self) -> String {
        format!("file://{}/repo/archive/main", self.dir.display())
    }

    /// A folder beside the repository, for walfill's bases.
    pub fn bases_url(&self) -> String {
        format!("file://{}/walfill-bases", self.dir.display())
    }

    /// The segment files in the stanza's archive (names without their
    /// compression suffix), sorted.
    pub fn archived_segments(&self) -> Vec<String> {
        let mut out = Vec::new();
        let root = self.dir.join("repo/archive/main");
        for id in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for sub in std::fs::read_dir(id.path()).into_iter().flatten().flatten() {
                for file in std::fs::read_dir(sub.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let name = file.file_name().to_string_lossy().into_owned();
                    if name.len() > 24 && name.as_bytes()[24] == b'-' {
                        out.push(name[..24].to_string());
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// Runs `pgbackrest --stanza=main ARGS` as the server's owner.
    pub fn pgbackrest(&self, args: &[&str]) {
        let out = server_command(std::path::Path::new("pgbackrest"))
            .arg(format!("--config={}", self.config.display()))
            .arg("--stanza=main")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running pgbackrest: {e} (scripts/deps.sh installs it)"));
        assert!(
            out.status.success(),
            "pgbackrest {args:?} failed: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for BackRestCluster {
    fn drop(&mut self) {
        let _ = server_command(&pg_bindir().join("pg_ctl"))
            .args(["-D", path_str(&self.data), "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
