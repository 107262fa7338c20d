//! The randomized differential test that keeps walfill exact: seeded random
//! tables, workloads and schema changes; a transform drawn from a grammar
//! (collation-dependent text functions, settings-dependent values, NULL
//! comparisons, arrays, JSON, expressions that fail on some rows, filters
//! that guard them); databases of drawn locale providers, a column
//! collation, maybe a separate destination, and settings of the databases
//! and of walfill's role that walfill must pin; a version built by a
//! snapshot (the transform evaluated on the source or in the destination),
//! a replay from the table's creation or a replay from a base snapshot,
//! with `kill -9` (failpoints, and a kill at a random moment) in every
//! phase; more changes; then the view compared row by row with the
//! transform evaluated on the source table itself, whose failing rows are
//! the expected dead letters; `dead-letters --retry`; and `verify` on the
//! right version and on wrong ones.
//!
//! The short run is part of the suite. `scripts/torture.sh --runs N` runs
//! the long one (more runs, larger tables, a transaction of a million rows),
//! time-boxed. `WALFILL_TORTURE_SEED=S` replays the run with seed S; every
//! failure prints its seed.

mod oracle;
mod run;
mod settings;
mod transform;
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use run::{Kind, Scale};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `runs` seeded runs from `first_seed` within `budget`, then prints
/// the counts per path, per schema change, per kill phase, where copies
/// evaluated the transform, dead letters, and the collations and settings
/// drawn. Panics with every failing seed.
fn campaign(first_seed: u64, runs: u64, budget: Duration, scale: Scale) {
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut paths: BTreeMap<String, u32> = BTreeMap::new();
    let mut ddl: BTreeMap<String, u32> = BTreeMap::new();
    let mut kills: BTreeMap<String, u32> = BTreeMap::new();
    let mut collations: BTreeMap<String, u32> = BTreeMap::new();
    let mut settings: BTreeMap<String, u32> = BTreeMap::new();
    let mut in_destination: BTreeMap<String, u32> = BTreeMap::new();
    let (mut on_source, mut with_dead_letters, mut dead_letters) = (0, 0, 0);
    let mut obsolete = 0;
    let (mut may_fail, mut retried, mut verified) = (0, 0, 0);
    let (mut separate, mut role, mut filtered) = (0, 0, 0);
    let mut refused = 0;
    let mut done = 0;
    for seed in first_seed..first_seed + runs {
        if started.elapsed() > budget {
            eprintln!("torture: time is up after {done} runs");
            break;
        }
        let run_started = Instant::now();
        let draw = run::draw(seed, scale);
        let result = std::panic::catch_unwind(|| run::run(seed, scale));
        done += 1;
        // What was drawn counts for every run, failed ones too.
        for c in draw.collation_labels() {
            *collations.entry(c).or_default() += 1;
        }
        for s in &draw.settings {
            *settings.entry(s.label()).or_default() += 1;
        }
        may_fail += u32::from(draw.transform.may_fail);
        separate += u32::from(draw.destination.is_some());
        role += u32::from(draw.role);
        filtered += u32::from(draw.transform.filter.is_some());
        match result {
            Ok(Ok(outcome)) => {
                *paths.entry(outcome.path.clone()).or_default() += 1;
                if let Some(why) = &outcome.in_destination {
                    let kind = why.split(':').next().unwrap_or(why).trim().to_string();
                    *in_destination.entry(kind).or_default() += 1;
                }
                on_source += u32::from(outcome.on_source);
                with_dead_letters += u32::from(outcome.dead_letters > 0);
                dead_letters += outcome.dead_letters;
                obsolete += outcome.obsolete;
                retried += u32::from(outcome.retried);
                verified += u32::from(outcome.verified);
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
                    "torture: seed {seed} ok in {:.1} s (path {}, {} kills, transform {}, {} \
                     dead letters{}{})",
                    run_started.elapsed().as_secs_f64(),
                    outcome.path,
                    outcome.kills.len() + outcome.external.len(),
                    match (&outcome.on_source, &outcome.in_destination) {
                        (true, _) => "on the source".to_string(),
                        (false, Some(why)) => format!("in the destination: {why}"),
                        (false, None) => "in the destination".to_string(),
                    },
                    outcome.dead_letters,
                    if outcome.retried { ", retried" } else { "" },
                    if outcome.verified {
                        format!(
                            ", verified in {:.1} s: {}",
                            outcome.verify_secs, outcome.verify_said
                        )
                    } else {
                        String::new()
                    },
                );
            }
            Ok(Err(problem)) => {
                eprintln!("torture: seed {seed} FAILED: {problem}");
                eprintln!("torture: seed {seed} drew: {}", draw.describe());
                failures.push(format!(
                    "seed {seed}: {problem}\n  drew: {}",
                    draw.describe()
                ));
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                eprintln!("torture: seed {seed} PANICKED: {text}");
                eprintln!("torture: seed {seed} drew: {}", draw.describe());
                failures.push(format!(
                    "seed {seed}: panicked: {text}\n  drew: {}",
                    draw.describe()
                ));
            }
        }
    }
    eprintln!(
        "torture: {done} runs, {} failed, replay refused (documented) in {refused}",
        failures.len()
    );
    let ok = done - failures.len() as u32;
    eprintln!("torture: runs per path: {paths:?}");
    eprintln!(
        "torture: transform evaluated on the source in {on_source} of the {ok} runs that \
         passed; snapshot copies evaluated it in the destination because:"
    );
    for (why, n) in &in_destination {
        eprintln!("torture:   {n:4}  {why}");
    }
    eprintln!(
        "torture: runs with dead letters: {with_dead_letters} ({dead_letters} rows); \
         dead-letters --retry in {retried}; verify checked in {verified} (of the {ok} runs that \
         passed)"
    );
    eprintln!(
        "torture: dead letters of rows gone with a TRUNCATE (obsolete, kept until \
         dead-letters --retry): {obsolete}"
    );
    eprintln!(
        "torture: drawn in the {done} runs: a transform that can fail in {may_fail}, a filter in \
         {filtered}, a separate destination in {separate}, a role of its own in {role}"
    );
    eprintln!("torture: collations drawn:");
    for (c, n) in &collations {
        eprintln!("torture:   {n:4}  {c}");
    }
    eprintln!("torture: settings drawn (where, name):");
    for (s, n) in &settings {
        eprintln!("torture:   {n:4}  {s}");
    }
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
        verify_every: false,
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
        verify_every: true,
    };
    campaign(
        env("WALFILL_TORTURE_FIRST_SEED").unwrap_or(1000),
        env("WALFILL_TORTURE_RUNS").unwrap_or(500),
        Duration::from_secs(60 * env("WALFILL_TORTURE_MINUTES").unwrap_or(240)),
        scale,
    );
}
