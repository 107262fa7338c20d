//! Which path a backfill takes, and why.
//!
//! Replay is preferred: it never reads the source table. It needs a *base*
//! (the table's creation, seen in the catalog journal, or a base snapshot in
//! the archive), contiguous archived WAL on one timeline from the base's
//! restart point on, a schema known throughout, and only supported types in
//! the columns the transform reads. Otherwise the backfill takes a
//! snapshot, and the planner says exactly why. A replay the archive can
//! serve is also weighed against a snapshot ([`cost`]): one estimated more
//! than `[backfill] replay_max_slowdown` times slower is a snapshot too.

mod cost;
mod creation;
mod identity;
mod replay;
mod scan;

pub use cost::{Estimates, Rates};

pub use identity::source_identity;
use replay::decide_replay;
pub use scan::{scan_journal, Scan};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;
use walfill_replay::archive::ArchiveError;

use crate::config::{ArchiveFound, Config};
use crate::control::state::Path;
use crate::error::{Error, Result};
use crate::pipeline::base::Manifest;
use crate::pipeline::version_sql::Plan;

/// The `--path` a backfill is asked to take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PathChoice {
    /// Replay when the archive covers the table and the replay is estimated
    /// at most `[backfill] replay_max_slowdown` times a snapshot's time; a
    /// snapshot otherwise.
    #[default]
    Auto,
    /// Replay, or fail saying why not.
    Replay,
    /// Snapshot.
    Snapshot,
}

/// Where a replay starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReplayStart {
    /// From the table's creation.
    Creation {
        /// Decode from this running-xacts record.
        restart: Lsn,
        /// The creating transaction's commit.
        from: Lsn,
    },
    /// From a base snapshot in the archive.
    Snapshot {
        /// The base's manifest.
        manifest: Box<Manifest>,
    },
}

impl ReplayStart {
    /// Where decoding starts.
    pub fn restart(&self) -> Lsn {
        match self {
            ReplayStart::Creation { restart, .. } => *restart,
            ReplayStart::Snapshot { manifest } => manifest.restart_lsn,
        }
    }

    /// Transactions committing from here on are replayed.
    pub fn from(&self) -> Lsn {
        match self {
            ReplayStart::Creation { from, .. } => *from,
            ReplayStart::Snapshot { manifest } => manifest.from_lsn,
        }
    }

    /// In words, for messages.
    pub fn describe(&self) -> String {
        match self {
            ReplayStart::Creation { from, .. } => {
                format!("the table's creation (committed at {from})")
            }
            ReplayStart::Snapshot { manifest } => format!(
                "the base snapshot of {} rows consistent at {}",
                manifest.rows, manifest.from_lsn
            ),
        }
    }
}

/// The planner's decision.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// How the version is to be filled.
    pub path: Path,
    /// Why.
    pub reason: String,
    /// Where a replay starts.
    pub start: Option<ReplayStart>,
    /// WAL between the replay's start and the source's current position.
    pub wal_bytes: u64,
    /// Of it, archived WAL whose segment summaries show nothing of the
    /// table's database a replay needs: taken from the summaries.
    pub summarized_bytes: u64,
    /// Rows of the table, estimated.
    pub estimated_rows: i64,
    /// The table was never analyzed: the estimate comes from its size.
    pub estimated_from_size: bool,
    /// The source's current WAL position (the handoff will be about here).
    pub source_lsn: Lsn,
    /// The configured archive and the layout it is read in.
    pub archive: Option<ArchiveFound>,
    /// Whether WAL the archive does not hold yet could turn this snapshot
    /// into a replay (the table is younger than the archived WAL).
    #[serde(skip)]
    pub wait_may_help: bool,
    /// Built versions of the target whose transform today's meaning would
    /// evaluate otherwise, each with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier_meaning: Vec<String>,
    /// What the operator should do before replays of the table get dearer
    /// or impossible (a base the archive's retention is about to outrun).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Both paths' estimated times and the rule that weighed them, when the
    /// archive could serve a replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimates: Option<Estimates>,
}

impl Decision {
    fn snapshot(reason: impl Into<String>, rows: i64, source_lsn: Lsn) -> Decision {
        Decision {
            path: Path::Snapshot,
            reason: reason.into(),
            start: None,
            wal_bytes: 0,
            summarized_bytes: 0,
            estimated_rows: rows,
            estimated_from_size: false,
            source_lsn,
            archive: None,
            wait_may_help: false,
            earlier_meaning: Vec::new(),
            warnings: Vec::new(),
            estimates: None,
        }
    }

    /// This snapshot might be a replay once the archive holds the newest WAL.
    fn until_archived(mut self) -> Decision {
        self.wait_may_help = true;
        self
    }
}

/// Decides how the version of `plan` would be built now, from what the
/// archive holds. A replay the archive cannot serve (WAL of another cluster
/// or timeline, a gap, a loss) is a snapshot with the reason. A replay it
/// can serve is weighed against a snapshot at `rates` ([`cost`]); with
/// `PathChoice::Auto`, one more than `[backfill] replay_max_slowdown` times
/// dearer is a snapshot.
pub async fn decide(
    config: &Config,
    source: &Client,
    plan: &Plan,
    rates: &Rates,
    choice: PathChoice,
) -> Result<Decision> {
    let decision = match decide_replay(config, source, plan).await {
        Err(Error::History(gap)) => {
            let source_lsn = crate::upstream::current_wal_lsn(source).await?;
            Ok(Decision::snapshot(
                gap.to_string(),
                plan.source.estimated_rows.max(0),
                source_lsn,
            ))
        }
        other => other,
    }?;
    let decision = weigh(decision, plan, rates, config, choice);
    let mut warnings = match base_warnings(config, plan.source.oid, &plan.def.target).await {
        Ok(warnings) => warnings,
        Err(e) => vec![format!(
            "the base snapshots could not be looked at: {}",
            e.describe()
        )],
    };
    if config.archive.is_some() && config.archive_settings.base_snapshots {
        let described = crate::upstream::catalog::describe(source, plan.source.oid).await?;
        if let Some(why) = described
            .as_ref()
            .and_then(crate::pipeline::base::undecodable)
        {
            warnings.push(format!(
                "no base snapshot can be kept of {}: {why}; its replays start from its \
                 creation, and once the archive no longer holds that, it can only be copied",
                plan.source
            ));
        }
    }
    Ok(Decision {
        estimated_from_size: plan.source.estimated_from_size
            && decision.estimated_rows == plan.source.estimated_rows.max(0),
        archive: ArchiveFound::find(config).await,
        warnings,
        ..decision
    })
}

/// Adds both paths' estimates to a replay decision; with `choice` auto, a
/// replay dearer than the rule allows becomes a snapshot, with the rule as
/// its reason.
fn weigh(
    mut decision: Decision,
    plan: &Plan,
    rates: &Rates,
    config: &Config,
    choice: PathChoice,
) -> Decision {
    let Some(start) = &decision.start else {
        return decision;
    };
    let base_rows = match start {
        ReplayStart::Snapshot { manifest } => manifest.rows,
        ReplayStart::Creation { .. } => 0,
    };
    let summarized = decision.summarized_bytes.min(decision.wal_bytes);
    let mut estimates = Estimates::weigh(
        decision.wal_bytes - summarized,
        base_rows,
        plan.source.estimated_rows.max(0) as u64,
        rates.clone(),
        config.backfill.replay_max_slowdown,
    );
    estimates.replay_summarized_bytes = summarized;
    if choice == PathChoice::Auto && !estimates.replay_wins() {
        let mut snapshot = Decision::snapshot(
            estimates.rule.clone(),
            plan.source.estimated_rows.max(0),
            decision.source_lsn,
        );
        snapshot.estimates = Some(estimates);
        return snapshot;
    }
    decision.estimates = Some(estimates);
    decision
}

/// Warnings about table `relid`'s newest base snapshot against the
/// archive's retention: a base whose restart point the archive no longer
/// holds (unusable for replay), or one that needs segments among the
/// archive's oldest 10% (compact it before they expire).
pub async fn base_warnings(config: &Config, relid: u32, target: &str) -> Result<Vec<String>> {
    let (Some(url), Some(bases)) = (config.archive.as_deref(), config.open_bases()) else {
        return Ok(Vec::new());
    };
    let bases = crate::pipeline::base::find_bases_of(&bases?, relid).await?;
    let Some(newest) = bases.first() else {
        return Ok(Vec::new());
    };
    let list = match config.open_archive(url)?.segments(None).await {
        Ok(list) => list,
        Err(ArchiveError::NoSegments { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let size = u64::from(list.segment_size);
    let mut segnos: Vec<_> = list.segments.iter().map(|s| s.name.segno).collect();
    segnos.sort();
    segnos.dedup();
    let Some(&last) = segnos.last() else {
        return Ok(Vec::new());
    };
    let mut first = segnos.len() - 1;
    while first > 0 && segnos[first - 1].next() == segnos[first] {
        first -= 1;
    }
    let covered_from = segnos[first].start_lsn(size);
    let end = last.start_lsn(size).0 + size;
    let usable = bases.iter().find(|b| b.restart_lsn >= covered_from);
    let mut out = Vec::new();
    match usable {
        None => out.push(format!(
            "the newest base snapshot of {}.{} (at {}) needs WAL from {}, older than the \
             archive's oldest segment (its retention expired it): it can no longer be replayed \
             from; a snapshot backfill of target {target} leaves a new one",
            newest.relation.schema, newest.relation.name, newest.boundary, newest.restart_lsn
        )),
        Some(base) => {
            let span = end.saturating_sub(covered_from.0);
            let into = base.restart_lsn.0.saturating_sub(covered_from.0);
            if span > 0 && into * 10 < span {
                out.push(format!(
                    "the newest usable base snapshot of {}.{} (at {}) needs segments among the \
                     archive's oldest 10%: compact it (`walfill compact {target}`) before the \
                     archive's retention expires them",
                    base.relation.schema, base.relation.name, base.boundary
                ));
            }
        }
    }
    Ok(out)
}

/// Decides as [`decide`] does, after letting the archive catch up with the
/// source when that could change the answer: a table created minutes ago is
/// in the segment being written, so a snapshot chosen for want of its
/// creation in the archive is decided again once the source has switched
/// segments and the archiver has stored it (waiting at most 30 s). When the
/// source's user may not switch segments, walfill says why and does not
/// wait.
pub async fn decide_now(
    config: &Config,
    source: &Client,
    plan: &Plan,
    rates: &Rates,
    choice: PathChoice,
    cancel: &CancellationToken,
) -> Result<Decision> {
    let decision = decide(config, source, plan, rates, choice).await?;
    let Some(url) = &config.archive else {
        return Ok(decision);
    };
    if !decision.wait_may_help {
        return Ok(decision);
    }
    let wait = Duration::from_secs(config.archive_settings.wait_seconds.min(30));
    if !crate::upstream::can_switch_wal(source).await? {
        crate::upstream::explain_slow_archive(source, None).await;
        return Ok(decision);
    }
    let archive = config.open_archive(url)?;
    let now = crate::upstream::current_wal_lsn(source).await?;
    let last = Lsn(now.0.saturating_sub(1));
    tracing::info!(
        reason = %decision.reason,
        "waiting for the archive to store the newest WAL, then deciding again"
    );
    match crate::upstream::wait_for_archive(source, &archive, last, now, wait, cancel).await {
        Err(Error::History(reason)) => {
            tracing::info!(%reason, "the archive is behind the source; planning with what it holds");
        }
        other => other?,
    }
    decide(config, source, plan, rates, choice).await
}

/// Prints a decision for `walfill plan`.
pub fn print(target: &str, decision: &Decision, json: bool) -> Result<()> {
    if json {
        crate::say!(
            "{}",
            serde_json::to_string_pretty(decision).unwrap_or_else(|_| "{}".into())
        )?;
        return Ok(());
    }
    crate::say!("target {target}: {}", decision.path)?;
    crate::say!("  why: {}", decision.reason)?;
    for flagged in &decision.earlier_meaning {
        crate::say!("  {flagged}")?;
    }
    for warning in &decision.warnings {
        crate::say!("  warning: {warning}")?;
    }
    if let Some(archive) = &decision.archive {
        crate::say!("  archive: {}", archive.describe())?;
    }
    if let Some(start) = &decision.start {
        crate::say!("  base: {}", start.describe())?;
        crate::say!(
            "  WAL: from {} to about {} ({:.1} MiB to read)",
            start.restart(),
            decision.source_lsn,
            decision.wal_bytes as f64 / 1048576.0
        )?;
    }
    if let Some(e) = &decision.estimates {
        crate::say!(
            "  estimates: replay {:.1} s ({:.1} MiB of WAL read whole, {:.1} MiB from segment \
             summaries, {} rows from its base), snapshot {:.1} s ({} rows)",
            e.replay_seconds,
            e.replay_wal_bytes as f64 / 1048576.0,
            e.replay_summarized_bytes as f64 / 1048576.0,
            e.replay_base_rows,
            e.snapshot_seconds,
            e.snapshot_rows
        )?;
        crate::say!("  rates: {}", e.rates.describe())?;
        crate::say!("  rule: {}", e.rule)?;
    }
    if decision.estimated_from_size {
        crate::say!(
            "  rows: about {} (estimated from the table's size: it was never analyzed)",
            decision.estimated_rows
        )?;
    } else {
        crate::say!("  rows: about {}", decision.estimated_rows)?;
    }
    Ok(())
}

/// `walfill plan TARGET`: how the target's configured version would be
/// built now, and why: the same decision `walfill backfill TARGET` takes.
pub async fn plan(
    config: &Config,
    name: &str,
    json: bool,
    cancel: &CancellationToken,
) -> Result<()> {
    let target = config.target(name)?;
    let source = crate::db::connect(&config.source, crate::db::Role::Source).await?;
    let dest = crate::db::connect(&config.destination, crate::db::Role::Destination).await?;
    let def = crate::pipeline::version_sql::Definition::from_config(target);
    let table = crate::pipeline::version_sql::describe(&source, &def).await?;
    let plan = crate::pipeline::version_sql::build(&dest, &def, table).await?;
    crate::control::dependents::check(&dest, target, &plan).await?;
    let rates = Rates::measured(&dest).await?;
    let mut decision = decide_now(config, &source, &plan, &rates, PathChoice::Auto, cancel).await?;
    if crate::control::state::require(&dest).await.is_ok() {
        for v in crate::control::state::VersionState::list(&dest).await? {
            let Some(desc) = v.source_desc.as_ref().filter(|_| v.target == name) else {
                continue;
            };
            if !v.phase.is_live() {
                continue;
            }
            let read = crate::pipeline::version_sql::mentioned_columns(
                desc,
                &v.select_sql,
                v.filter_sql.as_deref(),
            );
            if let Some(why) = crate::pipeline::version_sql::earlier_meaning(
                &source, &dest, v.meaning, desc, &read,
            )
            .await?
            {
                decision
                    .earlier_meaning
                    .push(format!("version {}: {why}", v.version));
            }
        }
    }
    print(name, &decision, json)
}
