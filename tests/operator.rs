//! What an operator reads while walfill works: progress that tells the
//! truth (rate over wall-clock time, a worker or "interrupted"), versions
//! not built yet, row estimates of tables never analyzed, the archiver's
//! slot, and the terminal's progress bar.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::archiver::{LocalArchive, SlotGuard};
use crate::support::run::binary;
use crate::support::{TestDb, Walfill};

fn target(name: &str, version: &str) -> String {
    format!(
        "[[target]]\nname = \"{name}\"\nsource = \"t\"\nselect = \"id, v\"\nversion = \"{version}\"\n"
    )
}

fn status(walfill: &Walfill) -> Value {
    serde_json::from_str(&walfill.ok(&["status", "--json"])).expect("status --json is JSON")
}

fn version<'a>(report: &'a Value, target: &str, version: &str) -> &'a Value {
    report["versions"]
        .as_array()
        .expect("a list of versions")
        .iter()
        .find(|v| v["target"] == target && v["version"] == version)
        .unwrap_or_else(|| panic!("no {target} {version} in {report:#}"))
}

/// A copy capped at 2,000 rows/s reports about that rate (not the speed of
/// its chunks between pauses) and an ETA that fits; after a kill, status
/// says nobody works on it and how to resume. Configured versions not built
/// yet are listed, and swapping one says how to build it.
#[test]
fn status_tells_the_truth_about_a_capped_copy_and_a_killed_one() {
    let db = TestDb::new("op_status");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = false);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 16000) g;",
    );
    // Never analyzed: the plan estimates from the table's size, and says so.
    let settings = "[backfill]\nchunk_rows = 500\nmax_rows_per_second = 2000\n";
    let walfill = Walfill::new(
        &db,
        &format!(
            "{settings}\n{}\n{}",
            target("tv", "v1"),
            target("other", "v7")
        ),
    );
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "tv"]);
    let rows: i64 = plan
        .lines()
        .find_map(|l| l.trim().strip_prefix("rows: about "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no row estimate in {plan}"));
    assert!(
        (8_000..=32_000).contains(&rows),
        "estimated {rows} rows:\n{plan}"
    );
    assert!(plan.contains("never analyzed"), "{plan}");

    let report = status(&walfill);
    assert_eq!(version(&report, "other", "v7")["phase"], "unbuilt");
    let out = walfill.run(&["swap", "other", "v7"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not built yet") && err.contains("walfill backfill other --no-swap"),
        "{err}"
    );

    let mut run = walfill.spawn(&["backfill", "tv"]);
    db.wait_for(
        "SELECT coalesce((SELECT rows_copied >= 4000 FROM walfill.versions
                           WHERE version = 'v1'), false)",
        Duration::from_secs(60),
        "the copy to pass 4000 rows",
    );
    let report = status(&walfill);
    let v1 = version(&report, "tv", "v1");
    assert_eq!(v1["phase"], "copying", "{v1:#}");
    assert!(v1["held_by_pid"].is_i64(), "{v1:#}");
    let rate = v1["rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("no rate: {v1:#}"));
    assert!(
        (1_000.0..=3_000.0).contains(&rate),
        "a copy capped at 2000 rows/s reports {rate} rows/s"
    );
    let eta = v1["eta_seconds"].as_u64().expect("an ETA");
    // The estimate from the size is the total the copy knows of.
    let left = v1["rows_estimated"].as_i64().unwrap() - v1["rows_copied"].as_i64().unwrap();
    assert!(
        eta as i64 >= left / 3_000 && eta as i64 <= left / 1_000 + 1,
        "ETA {eta} s for {left} rows at 2000 rows/s"
    );

    run.kill().expect("kill the backfill");
    run.wait().expect("reap the backfill");
    let started = Instant::now();
    let v1 = loop {
        let report = status(&walfill);
        let v1 = version(&report, "tv", "v1").clone();
        if v1["held_by_pid"].is_null() {
            break v1;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the killed backfill still holds the version"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let note = v1["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("interrupted") && note.contains("rerun `walfill backfill tv`"),
        "{v1:#}"
    );
    assert!(v1["rate"].is_null(), "a stopped copy has no rate: {v1:#}");
    let text = walfill.ok(&["status"]);
    assert!(text.contains("interrupted"), "{text}");
    walfill.ok(&["backfill", "tv"]);
    let report = status(&walfill);
    assert_eq!(version(&report, "tv", "v1")["phase"], "active");
}

/// The archiver's slot after Ctrl-C: the stop message says it stays and how
/// to drop it; status lists it with the WAL it keeps and warns above the
/// limit; `walfill archive --drop-slot` removes it.
#[test]
fn the_archivers_slot_is_told_shown_and_dropped() {
    let db = TestDb::new("op_slot");
    let archive = LocalArchive::new("opslot");
    let slot = SlotGuard::named(&format!("walfill_op_{}", std::process::id()));
    let walfill = Walfill::new(
        &db,
        &format!("{}\n[backfill]\nslot_warning_mb = 0\n", archive.section()),
    );
    walfill.ok(&["setup"]);
    let child = Command::new(binary())
        .args(["archive", "--slot", &slot.name, "--flush-interval", "1"])
        .env("WALFILL_CONFIG", walfill.config_path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start walfill archive");
    let started = Instant::now();
    while archive.files().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "nothing archived"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    let out = child.wait_with_output().expect("walfill archive ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("physical slot {} stays", slot.name))
            && err.contains("walfill archive --drop-slot"),
        "{err}"
    );
    // WAL written after the archiver stopped is what the slot now holds.
    db.exec("CREATE TABLE written_later AS SELECT generate_series(1, 1000) AS n");

    let report = status(&walfill);
    let slots = report["slots"].as_array().expect("slots");
    let ours = slots
        .iter()
        .find(|s| s["name"] == slot.name.as_str())
        .unwrap_or_else(|| panic!("status does not show {}: {report:#}", slot.name));
    assert_eq!(ours["kind"], "physical");
    assert!(ours["retained_bytes"].as_i64().unwrap() > 0, "{ours:#}");
    let warning = ours["warning"].as_str().unwrap_or_default();
    assert!(warning.contains("--drop-slot"), "{ours:#}");
    let text = walfill.ok(&["status"]);
    assert!(
        text.contains(&slot.name) && text.contains("warning:"),
        "{text}"
    );

    let said = walfill.ok(&["archive", "--drop-slot", "--slot", &slot.name]);
    assert!(said.contains("dropped"), "{said}");
    assert_eq!(
        db.value(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{}'",
            slot.name
        ))
        .as_deref(),
        Some("0")
    );
}

/// On a terminal, a copy draws a bar with the rate over wall-clock time
/// and an ETA; the same run into a pipe logs progress lines instead.
#[test]
fn a_terminal_gets_a_progress_bar() {
    let db = TestDb::new("op_pty");
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text);
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 6000) g;",
    );
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nchunk_rows = 500\nmax_rows_per_second = 3000\n\n{}",
            target("tv", "v1")
        ),
    );
    walfill.ok(&["setup"]);
    // `script` gives the command a pseudo-terminal and copies what it
    // draws to stdout.
    let command = format!(
        "{} --config {} backfill tv",
        binary(),
        walfill.config_path().display()
    );
    let out = Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env("RUST_LOG", "walfill=info")
        .stdin(Stdio::null())
        .output()
        .expect("run under script");
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{drawn}");
    assert!(
        drawn.contains("rows/s, ETA")
            && (drawn.contains("/6,000 rows") || drawn.contains("/6000 rows")),
        "no progress bar on the terminal:\n{drawn}"
    );
    assert!(drawn.contains('\u{1b}'), "a terminal gets colour:\n{drawn}");
}

/// Two deployments in one cluster (state in different databases) with the
/// same target and version names: each one's status shows only its own
/// workers (advisory locks are per database).
#[test]
fn status_names_only_workers_of_its_own_database() {
    let settings = "[backfill]\nchunk_rows = 500\nmax_rows_per_second = 1000\n";
    let deployments: Vec<(TestDb, Walfill)> = ["op_own_a", "op_own_b"]
        .iter()
        .map(|tag| {
            let db = TestDb::new(tag);
            db.exec(
                "CREATE TABLE t (id int PRIMARY KEY, v text);
                 INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 8000) g;",
            );
            let walfill = Walfill::new(&db, &format!("{settings}\n{}", target("tv", "v1")));
            walfill.ok(&["setup"]);
            (db, walfill)
        })
        .collect();
    let (db_a, walfill_a) = &deployments[0];
    let (db_b, walfill_b) = &deployments[1];
    // B's version is recorded and idle; A's is being copied.
    let idle = walfill_b.spawn(&["backfill", "tv"]);
    db_b.wait_for(
        "SELECT coalesce((SELECT rows_copied > 0 FROM walfill.versions
                           WHERE version = 'v1'), false)",
        Duration::from_secs(60),
        "B's copy to start",
    );
    let mut idle = idle;
    idle.kill().expect("kill B's backfill");
    idle.wait().expect("reap B's backfill");
    let mut run = walfill_a.spawn(&["backfill", "tv"]);
    db_a.wait_for(
        "SELECT coalesce((SELECT rows_copied > 0 FROM walfill.versions
                           WHERE version = 'v1'), false)",
        Duration::from_secs(60),
        "A's copy to start",
    );
    assert!(
        version(&status(walfill_a), "tv", "v1")["held_by_pid"].is_i64(),
        "A's status shows its worker"
    );
    let b = status(walfill_b);
    let v1 = version(&b, "tv", "v1");
    assert!(
        v1["held_by_pid"].is_null(),
        "B's status shows A's worker: {v1:#}"
    );
    run.kill().expect("kill A's backfill");
    run.wait().expect("reap A's backfill");
}
