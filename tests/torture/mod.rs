//! The randomized differential test that keeps walfill exact: seeded random
//! tables, workloads and schema changes; a version built by a snapshot, a
//! replay from the table's creation or a replay from a base snapshot, with
//! `kill -9` (failpoints, and a kill at a random moment) in every phase;
//! more changes; then the view compared with the transform of the source,
//! row by row.
//!
//! The short run is part of the suite. `scripts/torture.sh --runs N` runs
//! the long one (more runs, larger tables, a transaction of a million rows),
//! time-boxed. `WALFILL_TORTURE_SEED=S` replays the run with seed S; every
//! failure prints its seed.

mod run;
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use run::{Kind, Scale};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `runs` seeded runs from `first_seed` within `budget`, then prints
/// the counts per path, per schema change and per kill phase. Panics with
/// every failing seed.
fn campaign(first_seed: u64, runs: u64, budget: Duration, scale: Scale) {
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut paths: BTreeMap<String, u32> = BTreeMap::new();
    let mut ddl: BTreeMap<String, u32> = BTreeMap::new();
    let mut kills: BTreeMap<String, u32> = BTreeMap::new();
    let mut refused = 0;
    let mut done = 0;
    for seed in first_seed..first_seed + runs {
        if started.elapsed() > budget {
            eprintln!("torture: time is up after {done} runs");
            break;
        }
        let run_started = Instant::now();
        let result = std::panic::catch_unwind(|| run::run(seed, scale));
        done += 1;
        match result {
            Ok(Ok(outcome)) => {
                *paths.entry(outcome.path.clone()).or_default() += 1;
                for d in &outcome.ddl {
                    *ddl.entry(format!("{d:?}")).or_default() += 1;
                }
                for (point, phase) in &outcome.kills {
                    *kills.entry(format!("{point} -> {phase}")).or_default() += 1;
                }
                for phase in &outcome.external {
                    *kills
                        .entry(format!("kill -9 at a random moment -> {phase}"))
                        .or_default() += 1;
                }
                refused += u32::from(outcome.refused.is_some());
                eprintln!(
                    "torture: seed {seed} ok in {:.1} s (path {}, {} kills)",
                    run_started.elapsed().as_secs_f64(),
                    outcome.path,
                    outcome.kills.len() + outcome.external.len()
                );
            }
            Ok(Err(problem)) => {
                eprintln!("torture: seed {seed} FAILED: {problem}");
                failures.push(format!("seed {seed}: {problem}"));
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                eprintln!("torture: seed {seed} PANICKED: {text}");
                failures.push(format!("seed {seed}: panicked: {text}"));
            }
        }
    }
    eprintln!(
        "torture: {done} runs, {} failed, replay refused (documented) in {refused}",
        failures.len()
    );
    eprintln!("torture: runs per path: {paths:?}");
    eprintln!("torture: schema changes: {ddl:?}");
    eprintln!("torture: kills by failpoint and phase recorded:");
    for (k, n) in &kills {
        eprintln!("torture:   {n:4}  {k}");
    }
    assert!(
        failures.is_empty(),
        "{} of {done} torture runs failed (rerun one with WALFILL_TORTURE_SEED=<seed>):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = Kind::Snapshot;
}

/// The suite's share: 20 small runs (or the one `WALFILL_TORTURE_SEED` names).
#[test]
fn short() {
    let scale = Scale {
        rows: 300,
        transactions: 25,
        large_transaction: 0,
    };
    match env("WALFILL_TORTURE_SEED") {
        Some(seed) => campaign(seed, 1, Duration::from_secs(600), scale),
        None => campaign(1, 20, Duration::from_secs(600), scale),
    }
}

/// `scripts/torture.sh`: many larger runs with a million-row transaction,
/// time-boxed (`WALFILL_TORTURE_RUNS`, `WALFILL_TORTURE_FIRST_SEED`,
/// `WALFILL_TORTURE_MINUTES`).
#[test]
#[ignore = "long: run by scripts/torture.sh"]
fn long() {
    let scale = Scale {
        rows: 3_000,
        transactions: 80,
        large_transaction: env("WALFILL_TORTURE_LARGE_ROWS").unwrap_or(1_000_000) as i64,
    };
    campaign(
        env("WALFILL_TORTURE_FIRST_SEED").unwrap_or(1000),
        env("WALFILL_TORTURE_RUNS").unwrap_or(500),
        Duration::from_secs(60 * env("WALFILL_TORTURE_MINUTES").unwrap_or(240)),
        scale,
    );
}
