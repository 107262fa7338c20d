//! What commands print, as scripts and people read it: a closed stdout ends
//! a command quietly, logs carry colour only on a terminal, JSON logs are
//! JSON on every line, and no Rust debug formatting leaks into messages.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::support::cluster::archive_url;
use crate::support::run::binary;
use crate::support::{TestDb, Walfill};

/// Runs walfill with stdout piped, reads `keep` bytes of it, closes it, and
/// returns the exit status and stderr.
fn read_then_close(
    args: &[&str],
    env: &[(&str, &str)],
    keep: usize,
) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "walfill=info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn walfill");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = vec![0u8; keep];
    let _ = stdout.read_exact(&mut first);
    drop(stdout);
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    (child.wait().expect("wait"), stderr)
}

/// `status --json | head` and `decode | head -1` (output far larger than a
/// pipe's buffer) end quietly, every time.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let db = TestDb::new("out_pipe");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 3000) g;",
    );
    let walfill = Walfill::new(
        &db,
        "[[target]]\nname = \"tv\"\nsource = \"t\"\nselect = \"id, v\"\nversion = \"v1\"\n",
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "tv"]);
    let from = db.value("SELECT pg_current_wal_lsn()").unwrap();
    db.exec("UPDATE t SET v = v || '!'");
    db.archive_wal();
    let archive = archive_url();
    let url = db.url();
    let config = walfill.config_path();
    let config = config.to_str().unwrap();
    // More than a pipe holds, so the writer meets the closed pipe mid-run.
    let whole = std::process::Command::new(crate::support::run::binary())
        .args([
            "decode",
            "--archive",
            &archive,
            "--from",
            &from,
            "--source",
            &url,
        ])
        .env_remove("WALFILL_CONFIG")
        .output()
        .expect("run walfill decode");
    assert!(whole.status.success());
    assert!(
        whole.stdout.len() > 64 * 1024,
        "decode printed only {} bytes",
        whole.stdout.len()
    );
    for round in 0..10 {
        let (status, err) =
            read_then_close(&["status", "--json"], &[("WALFILL_CONFIG", config)], 16);
        assert!(status.success(), "status round {round}: {status}\n{err}");
        assert!(!err.contains("panicked"), "{err}");
        let (status, err) = read_then_close(
            &[
                "decode",
                "--archive",
                &archive,
                "--from",
                &from,
                "--source",
                &url,
            ],
            &[],
            100,
        );
        assert!(status.success(), "decode round {round}: {status}\n{err}");
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{err}"
        );
    }
}

/// Logs written to a file or a pipe carry no colour codes, and no Rust
/// debug formatting (`Some(`, `Lsn(`, `Cancelled(`, quoted vectors) leaks
/// into them; in JSON mode every line on stderr, the final error included,
/// is a JSON object.
#[test]
fn logs_are_plain_text_or_json_on_every_line() {
    let db = TestDb::new("out_logs");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g;",
    );
    let walfill = Walfill::new(
        &db,
        "[backfill]\nchunk_rows = 300\n\n[[target]]\nname = \"tv\"\nsource = \"t\"\n\
         select = \"id, v\"\nversion = \"v1\"\n",
    );
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "tv"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a log file:\n{stderr}"
    );
    for leak in ["Some(", "None", "Lsn(", "Cancelled(", "Reached(", "[\""] {
        assert!(
            !stderr.contains(leak),
            "debug formatting {leak:?} in:\n{stderr}"
        );
    }
    let sync = walfill.run(&["sync", "--once"]);
    let stderr = String::from_utf8_lossy(&sync.stderr);
    for leak in ["Some(", "Lsn(", "Cancelled(", "Reached("] {
        assert!(
            !stderr.contains(leak),
            "debug formatting {leak:?} in:\n{stderr}"
        );
    }

    let failed = walfill.run(&["--log-format", "json", "swap", "tv", "v9"]);
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!stderr.trim().is_empty());
    for line in stderr.lines() {
        let parsed: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nin:\n{stderr}"));
        assert!(parsed.is_object(), "{line}");
    }
    assert!(stderr.contains("v9 of tv is not built yet"), "{stderr}");
}
