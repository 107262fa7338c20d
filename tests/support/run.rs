//! Running the walfill binary with a configuration file.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::TestDb;

/// A configuration file in a directory of its own, and the binary to run with it.
pub struct Walfill {
    dir: PathBuf,
}

impl Walfill {
    /// A configuration whose source (and destination) is `db`, followed by `rest`
    /// (targets and settings, TOML).
    pub fn new(db: &TestDb, rest: &str) -> Walfill {
        Walfill::with_text(&format!("[source]\nurl = \"{}\"\n\n{rest}", db.url()))
    }

    /// A configuration with exactly this text.
    pub fn with_text(text: &str) -> Walfill {
        let dir = std::env::temp_dir().join(format!(
            "walfill-test-{}-{:016x}",
            std::process::id(),
            rand_u64()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let walfill = Walfill { dir };
        walfill.write_config(text);
        walfill
    }

    /// Replaces the configuration with one whose source (and destination) is
    /// `db`, followed by `rest`.
    pub fn configure(&self, db: &TestDb, rest: &str) {
        self.write_config(&format!("[source]\nurl = \"{}\"\n\n{rest}", db.url()));
    }

    /// The configuration file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("walfill.toml")
    }

    /// Replaces the configuration file. A configuration that does not set
    /// `[backfill] replay_max_slowdown` gets a large one: the tests' tables
    /// are tiny against the shared test cluster's WAL, so the cost rule
    /// would take snapshots where these tests exercise replays (the tests of
    /// the rule itself set it).
    pub fn write_config(&self, text: &str) {
        std::fs::write(self.dir.join("walfill.toml"), replaying(text)).expect("write config");
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(binary());
        cmd.args(args)
            .current_dir(&self.dir)
            .env("WALFILL_CONFIG", self.dir.join("walfill.toml"))
            .env("RUST_LOG", "walfill=debug,warn")
            .env_remove("WALFILL_SOURCE_URL")
            .env_remove("WALFILL_DESTINATION_URL")
            .env_remove("PGPASSWORD");
        cmd
    }

    /// The command with extra environment variables, not started.
    pub fn command_env(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run walfill")
    }

    /// Runs to completion with extra environment variables.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run walfill")
    }

    /// Runs to completion and insists on success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "walfill {args:?} failed with {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts in the background, output discarded.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn walfill")
    }

    /// Waits for a spawned run with a timeout, insisting on success. Its
    /// stderr is drained while it runs, so a chatty run never blocks on a
    /// full pipe.
    pub fn wait_ok(&self, mut child: Child, timeout: Duration) {
        let reader = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = Vec::new();
                let _ = std::io::Read::read_to_end(&mut pipe, &mut text);
                String::from_utf8_lossy(&text).into_owned()
            })
        });
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if started.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = reader
            .map(|r| r.join().unwrap_or_default())
            .unwrap_or_default();
        match status {
            Some(status) => assert!(status.success(), "walfill failed with {status}:\n{stderr}"),
            None => panic!("walfill did not finish in {timeout:?}:\n{stderr}"),
        }
    }
}

/// `text` with `[backfill] replay_max_slowdown = 1000000` unless it sets
/// one; malformed text is left as it is, for the tests of what walfill
/// says about it.
fn replaying(text: &str) -> String {
    const LINE: &str = "replay_max_slowdown = 1000000";
    if text.contains("replay_max_slowdown") || toml::from_str::<toml::Table>(text).is_err() {
        return text.to_string();
    }
    match text.find("\n[backfill]\n") {
        Some(at) => {
            let after = at + "\n[backfill]\n".len();
            format!("{}{LINE}\n{}", &text[..after], &text[after..])
        }
        None if text.starts_with("[backfill]\n") => format!("[backfill]\n{LINE}\n{}", &text[11..]),
        None => format!("{text}\n[backfill]\n{LINE}\n"),
    }
}

/// The walfill binary the tests run: this build's, or another one named by
/// `WALFILL_TEST_BIN` (to see how an older build fares on the same tests).
pub fn binary() -> String {
    std::env::var("WALFILL_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_walfill").to_string())
}

impl Drop for Walfill {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}
