//! `walfill status`: every target's versions (built, in flight, or only
//! configured), their progress and who works on them, and the replication
//! slots walfill keeps in the source.

pub mod follow;
pub mod schedules;
mod slots;

use serde::Serialize;
use tokio_postgres::Client;

use crate::config::{ArchiveFound, Config};
use crate::control::state::{self, lock, Path, Phase, Stage, VersionState};
use crate::db::{self, Role};
use crate::error::Result;
pub use slots::{human_bytes, unlimited_keep_warning, SlotStatus};

/// One version as `status` reports it.
#[derive(Debug, Serialize)]
pub struct VersionStatus {
    /// Target name.
    pub target: String,
    /// Version name.
    pub version: String,
    /// Phase (`unbuilt` for a configured version no backfill has started).
    pub phase: Stage,
    /// How it is (being) filled: `snapshot` or `replay`.
    pub path: Option<Path>,
    /// Whether readers see this version.
    pub active: bool,
    /// Rows stored by the fill (copied, or written by the replay).
    pub rows_copied: i64,
    /// The planner's estimate of the source's rows.
    pub rows_estimated: i64,
    /// A replay's WAL read so far, and its whole range.
    pub wal_read_bytes: Option<i64>,
    /// The replay's whole range of WAL.
    pub wal_total_bytes: Option<i64>,
    /// The archived segments a finished replay read.
    pub segments_read: Option<i64>,
    /// Recent rate of the fill while a process runs it: rows per second
    /// for a copy, bytes of WAL per second for a replay.
    pub rate: Option<f64>,
    /// Seconds left in the fill at that rate.
    pub eta_seconds: Option<u64>,
    /// The server process (in the destination) of the walfill session that
    /// works on the version now, if any.
    pub held_by_pid: Option<i32>,
    /// What the operator should know: an interrupted fill, a lost version,
    /// the last error.
    pub note: Option<String>,
    /// The version's slot.
    pub slot: String,
    /// Bytes of WAL the slot has not confirmed (None if the source is
    /// unreachable or the slot is gone).
    pub slot_lag_bytes: Option<i64>,
    /// End of the last applied source transaction.
    pub applied_lsn: Option<String>,
    /// Changes applied from the stream.
    pub changes_applied: i64,
    /// When it was last swapped in.
    pub swapped_at: Option<String>,
    /// When its state last changed.
    pub updated_at: Option<String>,
    /// The error that stopped its last run.
    pub last_error: Option<String>,
    /// Why the version lost changes for good (it must be rebuilt), if it did.
    pub lost: Option<String>,
    /// Why the throttle holds its fill now, if it does.
    pub throttled: Option<String>,
    /// Rows set aside because their transform failed (`walfill dead-letters`).
    pub dead_letters: i64,
    /// Seconds between a source commit and its apply, as of the last batch
    /// of the live stream applied.
    pub apply_lag_seconds: Option<f64>,
    /// Why the view shows this version although it does not follow its
    /// source (published with `--force`), if it does.
    pub stale: Option<String>,
    /// Why the version, built under an earlier meaning of its transform,
    /// may hold other rows than a version built now would.
    pub earlier_meaning: Option<String>,
    /// For a built version that should follow the live stream: whether a
    /// process follows it now (see [`follow`]).
    pub following: Option<bool>,
    /// Why such a version is not followed, when it should be.
    pub not_followed: Option<String>,
    /// Held back from publication by its request's gate (`--no-swap`,
    /// `--swap-at`): kept caught up, published by `walfill swap` or at
    /// `swap_at`.
    pub held: bool,
    /// When a held version is published (UTC), if planned.
    pub swap_at: Option<String>,
    /// Why its last planned swap failed (tried again a minute later).
    pub swap_error: Option<String>,
}

/// What `status --json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Every version, and every configured version not built yet.
    pub versions: Vec<VersionStatus>,
    /// walfill's slots in the source (empty if it is unreachable).
    pub slots: Vec<SlotStatus>,
    /// Warnings about the slots.
    pub warnings: Vec<String>,
    /// The configured archive and the layout it is read in.
    pub archive: Option<ArchiveFound>,
    /// Requests queued or running, and the most recent finished ones.
    pub requests: Vec<crate::control::state::requests::Request>,
    /// Targets whose backfills are paused (`*`: all).
    pub paused: Vec<String>,
    /// The `walfill serve` processes seen in the last minute.
    pub workers: Vec<Worker>,
    /// Built versions that should follow the live stream and do not, and
    /// why: empty when the deployment is ready (`GET /ready`).
    pub not_ready: Vec<String>,
    /// Slots no version owned that the service dropped in the last week,
    /// newest first.
    pub reaped: Vec<String>,
    /// Each scheduled target's next due time and last scheduled run.
    pub schedules: Vec<schedules::ScheduleStatus>,
}

/// A `walfill serve` process.
#[derive(Debug, Serialize)]
pub struct Worker {
    /// `host:pid:nonce`.
    pub id: String,
    /// Where its HTTP endpoints listen.
    pub listen: Option<String>,
    /// Whether it leads.
    pub leader: bool,
    /// When it last looked at the state.
    pub seen_at: String,
}

/// Requests finished that `status` shows besides the open ones.
const RECENT_REQUESTS: i64 = 10;

/// Prints the status of every target, as a table or as JSON.
pub async fn status(config: &Config, json: bool) -> Result<()> {
    let report = report(config).await?;
    if json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_else(|_| "{}".into());
        crate::say!("{text}")?;
        return Ok(());
    }
    print(&report)
}

/// The status of every target, its requests and the service's workers.
pub async fn report(config: &Config) -> Result<Report> {
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let mut versions = Vec::new();
    let mut legacy = Vec::new();
    // Every version ever made (retired ones included), by target.
    let mut made: Vec<(String, String, bool)> = Vec::new();
    // The source table of each target with a built version.
    let mut made_relids: Vec<(String, u32)> = Vec::new();
    for v in VersionState::list(&dest).await? {
        made.push((v.target.clone(), v.version.clone(), v.phase.is_live()));
        if let Some(relid) = v.source_relid.filter(|_| v.phase.is_live()) {
            made_relids.push((v.target.clone(), relid));
        }
        if v.phase.is_live() && v.meaning < crate::pipeline::version_sql::MEANING {
            if let Some(desc) = &v.source_desc {
                let read = crate::pipeline::version_sql::mentioned_columns(
                    desc,
                    &v.select_sql,
                    v.filter_sql.as_deref(),
                );
                legacy.push((
                    v.target.clone(),
                    v.version.clone(),
                    v.meaning,
                    desc.clone(),
                    read,
                ));
            }
        }
        if v.phase != Phase::Retired {
            let holder = lock::holder_of(&dest, &format!("version:{}:{}", v.target, v.version))
                .await?
                .map(|(pid, _)| pid);
            versions.push(describe(v, holder));
        }
    }
    for target in &config.targets {
        // Not built when no version of that name was ever made, and none
        // built in its place (a rebuild's `VERSION_rID`, a schedule's
        // `VERSION_s...`) is live.
        let derived = format!("{}_", target.version);
        let built = made.iter().any(|(t, v, live)| {
            *t == target.name && (*v == target.version || (*live && v.starts_with(&derived)))
        });
        if !built {
            versions.push(unbuilt(&target.name, &target.version));
        }
    }
    let (slots, mut warnings, near) = match db::connect(&config.source, Role::Source).await {
        Ok(source) => {
            for (target, version, meaning, desc, read) in &legacy {
                let why = crate::pipeline::version_sql::earlier_meaning(
                    &source, &dest, *meaning, desc, read,
                )
                .await?;
                if let Some(v) = versions
                    .iter_mut()
                    .find(|v| &v.target == target && &v.version == version)
                {
                    if let Some(why) = &why {
                        v.note = Some(match &v.note {
                            Some(note) => format!("{why}; {note}"),
                            None => why.clone(),
                        });
                    }
                    v.earlier_meaning = why;
                }
            }
            let (slots, warnings) = read_slots(config, &source, &mut versions).await;
            (
                slots,
                warnings,
                crate::upstream::current_wal_lsn(&source).await.ok(),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e.describe(), "cannot read the slots from the source");
            (Vec::new(), Vec::new(), None)
        }
    };
    // Bases the archive's retention is about to outrun, per table.
    let mut looked = Vec::new();
    for target in &config.targets {
        let relid = made_relids
            .iter()
            .find(|(t, _)| *t == target.name)
            .map(|(_, r)| *r);
        if let Some(relid) = relid.filter(|r| !looked.contains(r)) {
            looked.push(relid);
            match crate::control::route::base_warnings(config, relid, &target.name).await {
                Ok(found) => warnings.extend(found),
                Err(e) => tracing::debug!(error = %e.describe(), "cannot look at the bases"),
            }
        }
    }
    let mut archive = ArchiveFound::find(config).await;
    if let Some(found) = archive.as_mut() {
        found.read_last_segment(config, near).await;
    }
    let extra = dest
        .query(
            "SELECT v.target, v.version,
                    CASE WHEN v.phase = ANY($1) THEN v.throttled END,
                    (SELECT count(*) FROM walfill.dead_letters d
                      WHERE d.target = v.target AND d.version = v.version),
                    v.apply_lag_seconds,
                    (SELECT t.stale FROM walfill.targets t
                      WHERE t.target = v.target AND t.active_version = v.version),
                    extract(epoch FROM now() - v.updated_at)::float8,
                    v.held AND v.phase = $2,
                    to_char(v.swap_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"'),
                    v.swap_error
               FROM walfill.versions v",
            &[
                &Phase::names(&[Phase::Planned, Phase::Copying, Phase::Replaying]),
                &Phase::Ready.as_str(),
            ],
        )
        .await
        .map_err(|e| crate::error::Error::destination("reading the versions", e))?;
    for row in &extra {
        let (target, version): (String, String) = (row.get(0), row.get(1));
        if let Some(v) = versions
            .iter_mut()
            .find(|v| v.target == target && v.version == version)
        {
            v.throttled = row.get(2);
            v.dead_letters = row.get(3);
            v.held = row.get(7);
            if v.held {
                v.swap_at = row.get(8);
                v.swap_error = row.get(9);
                let plan = match &v.swap_at {
                    Some(at) => format!("HELD: published at {at}"),
                    None => format!(
                        "HELD: `walfill swap {} {}` publishes it",
                        v.target, v.version
                    ),
                };
                let failed = v
                    .swap_error
                    .as_deref()
                    .map(|e| format!(" (the planned swap failed, tried again: {e})"))
                    .unwrap_or_default();
                v.note = Some(format!(
                    "{plan}{failed}{}",
                    v.note
                        .as_deref()
                        .map(|n| format!("; {n}"))
                        .unwrap_or_default()
                ));
            }
            v.apply_lag_seconds = row.get(4);
            v.stale = row.get(5);
            if let Some(stale) = &v.stale {
                v.note = Some(format!(
                    "STALE view (it does not follow its source): {stale}{}",
                    v.note
                        .as_deref()
                        .map(|n| format!("; {n}"))
                        .unwrap_or_default()
                ));
            }
            follow::judge(v, row.get(6));
            if let Some(why) = &v.not_followed {
                v.note = Some(format!(
                    "NOT FOLLOWED: {why}{}",
                    v.note
                        .as_deref()
                        .filter(|n| !why.contains(*n))
                        .map(|n| format!("; {n}"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    let not_ready = follow::not_ready(&versions);
    let reaped = dest
        .query(
            "SELECT detail->>'slot', at::text, coalesce((detail->>'retained_bytes')::bigint, 0)
               FROM walfill.events
              WHERE kind = 'slot_reaped' AND at > now() - interval '7 days'
              ORDER BY at DESC LIMIT 10",
            &[],
        )
        .await
        .map_err(|e| crate::error::Error::destination("reading the events", e))?
        .iter()
        .map(|r| {
            format!(
                "slot {} dropped at {}: no version owned it, and it kept {}",
                r.get::<_, Option<String>>(0).unwrap_or_default(),
                r.get::<_, String>(1),
                human_bytes(r.get(2))
            )
        })
        .collect();
    let serving = dest
        .query_one("SELECT to_regclass('walfill.requests') IS NOT NULL", &[])
        .await
        .map_err(|e| crate::error::Error::destination("reading the state", e))?
        .get::<_, bool>(0);
    let (requests, paused, workers, schedules) = if serving {
        (
            crate::control::state::requests::recent(&dest, RECENT_REQUESTS).await?,
            crate::control::state::requests::paused(&dest).await?,
            workers(&dest).await?,
            schedules::read(config, &dest).await?,
        )
    } else {
        Default::default()
    };
    // A fill nobody works on because its target is paused waits for
    // `walfill resume`, not for a rerun.
    for v in versions.iter_mut().filter(|v| {
        paused.iter().any(|p| p == "*" || *p == v.target)
            && v.note
                .as_deref()
                .is_some_and(|n| n.starts_with("interrupted"))
    }) {
        v.note = Some(format!(
            "paused: `walfill resume {}` continues it where it stopped",
            v.target
        ));
    }
    Ok(Report {
        versions,
        slots,
        warnings,
        archive,
        requests,
        paused,
        workers,
        not_ready,
        reaped,
        schedules,
    })
}

async fn workers(dest: &Client) -> Result<Vec<Worker>> {
    let rows = dest
        .query(
            "SELECT w.id, w.listen, coalesce(l.worker = w.id AND l.lease_until > now(), false),
                    w.seen_at::text
               FROM walfill.workers w LEFT JOIN walfill.leader l ON true
              WHERE w.seen_at > now() - interval '1 minute'
              ORDER BY w.id",
            &[],
        )
        .await
        .map_err(|e| crate::error::Error::destination("reading the workers", e))?;
    Ok(rows
        .iter()
        .map(|r| Worker {
            id: r.get(0),
            listen: r.get(1),
            leader: r.get(2),
            seen_at: r.get(3),
        })
        .collect())
}

/// A version's row of the report; `holder` is the process working on it.
fn describe(v: VersionState, holder: Option<i32>) -> VersionStatus {
    let filling = v.phase.is_building();
    let running = holder.is_some();
    let (wal_read, wal_total) = match (v.path, v.restart_lsn, v.boundary_lsn) {
        (Path::Replay, Some(restart), Some(boundary)) => {
            let total = boundary.0.saturating_sub(restart.0) as i64;
            let read = match v.phase {
                Phase::Replaying => v
                    .replay_read_lsn
                    .map_or(0, |r| r.0.saturating_sub(restart.0) as i64)
                    .min(total),
                _ => v.wal_read_bytes.unwrap_or(total),
            };
            (Some(read), Some(total))
        }
        _ => (None, None),
    };
    let rate = (running && matches!(v.phase, Phase::Copying | Phase::Replaying))
        .then_some((v.copy_rate * 10.0).round() / 10.0)
        .filter(|r| *r > 0.0);
    let left = match v.phase {
        Phase::Copying => Some((v.rows_estimated - v.rows_copied).max(0) as f64),
        Phase::Replaying => wal_total.zip(wal_read).map(|(t, r)| (t - r).max(0) as f64),
        _ => None,
    };
    let eta_seconds = rate.zip(left).map(|(r, l)| (l / r) as u64);
    let note = if let Some(lost) = &v.lost {
        Some(format!("LOST (rebuild it with `walfill backfill`): {lost}"))
    } else if filling && !running {
        Some(format!(
            "interrupted: no process works on it; rerun `walfill backfill {}` to resume{}",
            v.target,
            v.last_error
                .as_deref()
                .map(|e| format!(" (last error: {e})"))
                .unwrap_or_default()
        ))
    } else {
        v.last_error.clone()
    };
    VersionStatus {
        active: v.phase == Phase::Active,
        phase: Stage::Recorded(v.phase),
        path: Some(v.path),
        rows_copied: v.rows_copied,
        rows_estimated: v.rows_estimated,
        wal_read_bytes: wal_read,
        wal_total_bytes: wal_total,
        segments_read: v.segments_read,
        rate,
        eta_seconds,
        held_by_pid: holder,
        note,
        slot_lag_bytes: None,
        applied_lsn: v.applied_lsn.map(|l| l.to_string()),
        changes_applied: v.changes_applied,
        swapped_at: v.swapped_at,
        updated_at: Some(v.updated_at),
        last_error: v.last_error,
        lost: v.lost,
        throttled: None,
        dead_letters: 0,
        apply_lag_seconds: None,
        stale: None,
        earlier_meaning: None,
        following: None,
        not_followed: None,
        held: false,
        swap_at: None,
        swap_error: None,
        slot: v.slot_name,
        target: v.target,
        version: v.version,
    }
}

/// A configured version no backfill has started.
fn unbuilt(target: &str, version: &str) -> VersionStatus {
    VersionStatus {
        target: target.into(),
        version: version.into(),
        phase: Stage::Unbuilt,
        path: None,
        active: false,
        rows_copied: 0,
        rows_estimated: 0,
        wal_read_bytes: None,
        wal_total_bytes: None,
        segments_read: None,
        rate: None,
        eta_seconds: None,
        held_by_pid: None,
        note: Some(format!(
            "configured, not built yet: `walfill backfill {target}` builds and publishes it \
             (`--no-swap` builds it only)"
        )),
        slot: String::new(),
        slot_lag_bytes: None,
        applied_lsn: None,
        changes_applied: 0,
        swapped_at: None,
        updated_at: None,
        last_error: None,
        lost: None,
        throttled: None,
        dead_letters: 0,
        apply_lag_seconds: None,
        stale: None,
        earlier_meaning: None,
        following: None,
        not_followed: None,
        held: false,
        swap_at: None,
        swap_error: None,
    }
}

/// Reads the slots, fills in each version's slot lag, and lists warnings.
async fn read_slots(
    config: &Config,
    source: &Client,
    versions: &mut [VersionStatus],
) -> (Vec<SlotStatus>, Vec<String>) {
    let lags = source
        .query(
            "SELECT slot_name::text,
                    (pg_current_wal_lsn() - coalesce(confirmed_flush_lsn, restart_lsn))::bigint
               FROM pg_replication_slots WHERE slot_name LIKE 'walfill\\_%'",
            &[],
        )
        .await;
    if let Ok(rows) = lags {
        for row in rows {
            let name: String = row.get(0);
            for v in versions.iter_mut().filter(|v| v.slot == name) {
                v.slot_lag_bytes = row.get(1);
            }
        }
    }
    match slots::read(config, source).await {
        Ok(slots) => {
            let mut warnings: Vec<String> =
                slots.iter().filter_map(|s| s.warning.clone()).collect();
            if let Ok(Some(unlimited)) = slots::unlimited_keep_warning(source).await {
                warnings.push(unlimited);
            }
            (slots, warnings)
        }
        Err(e) => {
            tracing::warn!(error = %e.describe(), "cannot read the slots from the source");
            (Vec::new(), Vec::new())
        }
    }
}

fn print(report: &Report) -> Result<()> {
    crate::say!(
        "{:<20} {:<10} {:<12} {:<34} {:>12} {:>8} {:>10} {:>10}  NOTE",
        "TARGET",
        "VERSION",
        "PHASE",
        "PROGRESS",
        "RATE",
        "ETA",
        "SLOT LAG",
        "WORKER"
    )?;
    for r in &report.versions {
        let marker = if r.active { "*" } else { "" };
        crate::say!(
            "{:<20} {:<10} {:<12} {:<34} {:>12} {:>8} {:>10} {:>10}  {}",
            r.target,
            format!("{}{marker}", r.version),
            r.phase,
            progress(r),
            match (r.rate, r.wal_total_bytes) {
                (Some(rate), Some(_)) => format!("{}/s", human_bytes(rate as i64)),
                (Some(rate), None) => format!("{rate:.0} rows/s"),
                (None, _) => "-".into(),
            },
            r.eta_seconds
                .map(|s| format!("{s} s"))
                .unwrap_or_else(|| "-".into()),
            match (r.phase, r.slot_lag_bytes) {
                (Stage::Unbuilt, _) => "-".into(),
                (_, Some(lag)) => human_bytes(lag),
                (_, None) => "?".into(),
            },
            r.held_by_pid
                .map(|p| format!("pid {p}"))
                .unwrap_or_else(|| "-".into()),
            match (&r.throttled, r.dead_letters) {
                (Some(why), _) if r.phase == Stage::Recorded(Phase::Planned) =>
                    format!("WAITING: {why}"),
                (Some(why), _) => format!("THROTTLED: {why}"),
                (None, n) if n > 0 => format!(
                    "{n} dead letter(s): `walfill dead-letters {}`{}",
                    r.target,
                    r.note
                        .as_deref()
                        .map(|n| format!("; {n}"))
                        .unwrap_or_default()
                ),
                _ => r.note.clone().unwrap_or_default(),
            }
        )?;
    }
    if !report.slots.is_empty() {
        crate::say!("")?;
        crate::say!(
            "{:<40} {:<9} {:<7} {:>12}  WAL STATUS",
            "SLOT",
            "KIND",
            "ACTIVE",
            "RETAINED"
        )?;
        for s in &report.slots {
            crate::say!(
                "{:<40} {:<9} {:<7} {:>12}  {}",
                s.name,
                s.kind,
                if s.active { "yes" } else { "no" },
                human_bytes(s.retained_bytes),
                s.wal_status.as_deref().unwrap_or("-")
            )?;
        }
    }
    if !report.requests.is_empty() {
        crate::say!("")?;
        crate::say!(
            "{:<8} {:<20} {:<10} {:<24} {:<10} {:>8}  ERROR",
            "REQUEST",
            "TARGET",
            "ORIGIN",
            "VERSION",
            "STATE",
            "ATTEMPTS"
        )?;
        for r in &report.requests {
            crate::say!(
                "{:<8} {:<20} {:<10} {:<24} {:<10} {:>8}  {}",
                r.id,
                r.target,
                r.origin,
                r.version.as_deref().unwrap_or("-"),
                r.state,
                r.attempts,
                r.last_error.as_deref().unwrap_or("")
            )?;
        }
    }
    if !report.paused.is_empty() {
        crate::say!("")?;
        crate::say!("paused: {}", report.paused.join(", "))?;
    }
    if let Some(archive) = &report.archive {
        crate::say!("")?;
        crate::say!("archive: {}", archive.describe())?;
    }
    for warning in &report.warnings {
        crate::say!("warning: {warning}")?;
    }
    for reaped in &report.reaped {
        crate::say!("reaped: {reaped}")?;
    }
    for schedule in &report.schedules {
        crate::say!("schedule: {}", schedule.describe())?;
    }
    for why in &report.not_ready {
        crate::say!("not ready: {why}")?;
    }
    Ok(())
}

/// "80000/300000 rows", "12.0 MiB/48.0 MiB WAL, 5300 rows", "300000 rows
/// copied" (a replay counts the rows it wrote, updates of one row
/// included).
fn progress(r: &VersionStatus) -> String {
    match (r.phase, r.wal_read_bytes, r.wal_total_bytes) {
        (Stage::Unbuilt, _, _) => "-".into(),
        (Stage::Recorded(Phase::Replaying), Some(read), Some(total)) => format!(
            "{}/{} WAL, {} rows",
            human_bytes(read),
            human_bytes(total),
            r.rows_copied
        ),
        (Stage::Recorded(Phase::Copying | Phase::Planned), _, _) => {
            format!("{}/{} rows", r.rows_copied, r.rows_estimated)
        }
        _ if r.path == Some(Path::Replay) => match (r.segments_read, r.wal_read_bytes) {
            (Some(segments), Some(read)) => format!(
                "{} rows written from {segments} segments ({} of WAL)",
                r.rows_copied,
                human_bytes(read)
            ),
            _ => format!("{} rows written", r.rows_copied),
        },
        _ => format!("{} rows copied", r.rows_copied),
    }
}
