//! Archives in other tools' layouts, filled with the test cluster's WAL by
//! those tools' own programs: `gzip`, `zstd`, `lz4`, `brotli` and
//! `xz --format=lzma` for a flat folder and WAL-G's `wal_005/`, and
//! `pgbackrest archive-push` for a pgBackRest repository.
//!
//! The test cluster archives every segment into walfill's layout
//! (`$WALFILL_TEST_ARCHIVE_URL`, `wal/`, plain). A [`Mirror`] stores each
//! segment from a given one on into the foreign archive as soon as the
//! cluster has archived it, as the other tool's `archive_command` would
//! have, until it is dropped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::cluster::archive_url;
use super::TestDb;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A foreign layout, and how segments are stored in it.
#[derive(Clone, Debug)]
pub enum Foreign {
    /// Segment files directly in a folder; compressed in turn with nothing,
    /// `gzip`, `zstd` and `lz4`.
    Flat,
    /// WAL-G's `wal_005/`; compressed in turn with `lz4`, `zstd`, `brotli`
    /// and `xz --format=lzma` (the formats WAL-G writes).
    WalG,
    /// A pgBackRest repository: `pgbackrest.conf` at `config` (stanza
    /// `main`), segments pushed with `archive-push`, compressed in turn
    /// with gz, lz4, zst and bz2.
    PgBackRest {
        /// The configuration file.
        config: PathBuf,
    },
}

/// A folder for a foreign archive, removed when dropped.
pub struct ForeignArchive {
    /// The layout.
    pub layout: Foreign,
    /// The folder.
    pub dir: PathBuf,
}

impl ForeignArchive {
    /// A new, empty archive of `layout` (for pgBackRest: a repository with
    /// stanza `main` for the test cluster, created with `stanza-create`,
    /// which needs the cluster running).
    pub fn new(kind: &str, db: &TestDb) -> ForeignArchive {
        let dir = std::env::temp_dir().join(format!(
            "walfill-foreign-{kind}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("archive folder");
        let layout = match kind {
            "flat" => Foreign::Flat,
            "wal-g" => Foreign::WalG,
            "pgbackrest" => Foreign::PgBackRest {
                config: pgbackrest_stanza(&dir, db),
            },
            other => panic!("no foreign layout {other}"),
        };
        ForeignArchive { layout, dir }
    }

    /// The URL walfill reads it at: the folder of segments, WAL-G's prefix,
    /// or the stanza's archive folder.
    pub fn url(&self) -> String {
        match self.layout {
            Foreign::PgBackRest { .. } => {
                format!("file://{}/repo/archive/main", self.dir.display())
            }
            _ => format!("file://{}", self.dir.display()),
        }
    }

    /// Stores the segment (or history file) at `path`, the `n`th stored.
    pub fn store(&self, path: &Path, n: usize) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("file name");
        match &self.layout {
            Foreign::Flat => {
                let tools: [&[&str]; 4] = [
                    &[],
                    &["gzip", "-c", "-1"],
                    &["zstd", "-q", "-c"],
                    &["lz4", "-q", "-c"],
                ];
                let ext = ["", ".gz", ".zst", ".lz4"];
                let i = n % 4;
                compress_into(tools[i], path, &self.dir, &format!("{name}{}", ext[i]));
            }
            Foreign::WalG => {
                let tools: [&[&str]; 4] = [
                    &["lz4", "-q", "-c"],
                    &["zstd", "-q", "-c"],
                    &["brotli", "-c", "-q", "3"],
                    &["xz", "--format=lzma", "-c", "-1"],
                ];
                let ext = [".lz4", ".zst", ".br", ".lzma"];
                let i = n % 4;
                let wal = self.dir.join("wal_005");
                std::fs::create_dir_all(&wal).expect("wal_005");
                compress_into(tools[i], path, &wal, &format!("{name}{}", ext[i]));
            }
            Foreign::PgBackRest { config } => {
                let compress = ["gz", "lz4", "zst", "bz2"][n % 4];
                pgbackrest(
                    config,
                    &[&format!("--compress-type={compress}"), "archive-push"],
                    Some(path),
                );
            }
        }
    }

    /// The files of the archive (paths below its folder), sorted.
    pub fn files(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.dir, &self.dir, &mut out);
        out.sort();
        out
    }
}

impl Drop for ForeignArchive {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.display().to_string());
        }
    }
}

/// Writes `src` through `tool` (reading the file, writing standard output;
/// a plain copy without one) into `dir/name`, by way of a temporary name
/// as a careful `archive_command` does.
fn compress_into(tool: &[&str], src: &Path, dir: &Path, name: &str) {
    let tmp = dir.join(format!("{name}.tmp"));
    match tool.split_first() {
        None => {
            std::fs::copy(src, &tmp).expect("copy segment");
        }
        Some((program, args)) => {
            let out = File::create(&tmp).expect("create archived file");
            let status = Command::new(program)
                .args(args)
                .arg(src)
                .stdout(out)
                .stderr(Stdio::inherit())
                .status()
                .unwrap_or_else(|e| panic!("running {program}: {e} (scripts/deps.sh installs it)"));
            assert!(
                status.success(),
                "{program} {args:?} {}: {status}",
                src.display()
            );
        }
    }
    std::fs::rename(&tmp, dir.join(name)).expect("rename archived file");
}

/// Runs `pgbackrest` with the configuration `config`, stanza `main`,
/// `args`, and a file argument.
fn pgbackrest(config: &Path, args: &[&str], file: Option<&Path>) {
    let mut cmd = Command::new("pgbackrest");
    cmd.arg(format!("--config={}", config.display()))
        .arg("--stanza=main")
        .args(args);
    if let Some(file) = file {
        cmd.arg(file);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running pgbackrest: {e} (scripts/deps.sh installs it)"));
    assert!(
        out.status.success(),
        "pgbackrest {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pgBackRest configuration in `dir` for the test cluster (found through
/// `db`'s server settings) with its repository in `dir/repo`, and the stanza
/// `main` created. Returns the configuration file.
fn pgbackrest_stanza(dir: &Path, db: &TestDb) -> PathBuf {
    let setting = |name: &str| {
        db.value(&format!("SELECT current_setting('{name}')"))
            .expect("a server setting")
    };
    let socket = setting("unix_socket_directories");
    let socket = socket.split(',').next().unwrap_or_default().trim();
    let config = dir.join("pgbackrest.conf");
    let text = format!(
        "[global]\nrepo1-path={dir}/repo\nlog-path={dir}/log\nlock-path={dir}/lock\n\
         spool-path={dir}/spool\nlog-level-console=warn\nlog-level-file=off\n\n\
         [main]\npg1-path={data}\npg1-port={port}\npg1-socket-path={socket}\npg1-user=postgres\n",
        dir = dir.display(),
        data = setting("data_directory"),
        port = setting("port"),
    );
    std::fs::write(&config, text).expect("write pgbackrest.conf");
    pgbackrest(&config, &["stanza-create"], None);
    config
}

/// Stores the test cluster's archived segments (and history files) from
/// segment `first` on into a foreign archive, in a thread, until dropped.
pub struct Mirror {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<usize>>,
}

impl Mirror {
    /// Starts mirroring into `archive` from the segment named `first`.
    pub fn start(archive: Arc<ForeignArchive>, first: &str) -> Mirror {
        let stop = Arc::new(AtomicBool::new(false));
        let source = cluster_archive();
        let first = first.to_string();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut stored = std::collections::BTreeSet::new();
            loop {
                // One last pass after the stop, for what was archived meanwhile.
                let last = flag.load(Ordering::SeqCst);
                for name in archived_since(&source, &first) {
                    if stored.insert(name.clone()) {
                        archive.store(&source.join(&name), stored.len() - 1);
                    }
                }
                if last {
                    return stored.len();
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Mirror {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops, after storing what the cluster archived so far; returns how
    /// many files were stored.
    pub fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("the mirror thread panicked")
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The folder the test cluster archives segments into.
fn cluster_archive() -> PathBuf {
    let url = archive_url();
    let path = url
        .strip_prefix("file://")
        .unwrap_or_else(|| panic!("the test cluster's archive is not local: {url}"));
    PathBuf::from(path).join("wal")
}

/// Segment files at or after `first` (same timeline: names compare in WAL
/// order) and timeline history files in `dir`, sorted.
fn archived_since(dir: &Path, first: &str) -> Vec<String> {
    let hex = |s: &str, len| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the cluster's archive")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            (hex(n, 24) && n.as_str() >= first)
                || n.strip_suffix(".history").is_some_and(|t| hex(t, 8))
        })
        .collect();
    names.sort();
    names
}
