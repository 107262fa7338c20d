//! What one service does for all (the leader, holding a lease it renews):
//! queue the builds the configuration asks for, run schedules, notice
//! published versions that were lost and rebuild them, and retire old
//! versions. Every decision is a row written in the state database, in
//! one transaction with what it depends on, so a new leader after a crash
//! neither doubles nor drops one.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::Client;

use super::schedule::{self, Clock, Decision};
use crate::config::{Config, Target};
use crate::control::job;
use crate::control::state::requests::{self, Request};
use crate::control::state::{self, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::Definition;

/// Takes or renews the lead for `worker`; true when it holds it.
pub async fn hold(dest: &Client, worker: &str, lease: Duration) -> Result<bool> {
    let row = dest
        .query_opt(
            "INSERT INTO walfill.leader AS l (one, worker, lease_until)
             VALUES (true, $1, now() + make_interval(secs => $2))
             ON CONFLICT (one) DO UPDATE
                SET worker = excluded.worker, lease_until = excluded.lease_until
              WHERE l.worker = excluded.worker OR l.lease_until < now()
             RETURNING worker",
            &[&worker, &lease.as_secs_f64()],
        )
        .await
        .map_err(|e| Error::destination("taking the lead", e))?;
    Ok(row.is_some())
}

/// Gives the lead up (on a clean stop), so another service takes it at once.
pub async fn let_go(dest: &Client, worker: &str) {
    let _ = dest
        .execute("DELETE FROM walfill.leader WHERE worker = $1", &[&worker])
        .await;
}

/// One round of the leader's duties.
pub async fn duties(config: &Config, dest: &mut Client, clock: &Clock) -> Result<()> {
    publish_targets(config, dest).await?;
    let source = db::connect(&config.source, Role::Source).await;
    for target in &config.targets {
        if let Ok(source) = &source {
            recover(config, dest, source, target).await?;
        }
        build_configured(dest, target).await?;
        if let Some(s) = &target.schedule {
            run_schedule(config, dest, target, s, clock.now()).await?;
        }
    }
    Ok(())
}

/// Records the configured targets, for SQL requests to be checked against.
async fn publish_targets(config: &Config, dest: &Client) -> Result<()> {
    let names: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
    let versions: Vec<&str> = config.targets.iter().map(|t| t.version.as_str()).collect();
    let schedules: Vec<Option<&str>> = config
        .targets
        .iter()
        .map(|t| t.schedule.as_ref().map(|s| s.text.as_str()))
        .collect();
    dest.execute(
        "WITH c AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS c(t, v, s)),
              d AS (DELETE FROM walfill.configured WHERE target NOT IN (SELECT t FROM c))
         INSERT INTO walfill.configured (target, version, schedule, seen_at)
         SELECT t, v, s, now() FROM c
         ON CONFLICT (target) DO UPDATE
            SET version = excluded.version, schedule = excluded.schedule, seen_at = now()",
        &[&names, &versions, &schedules],
    )
    .await
    .map_err(|e| Error::destination("recording the configured targets", e))?;
    Ok(())
}

/// Whether `target` has a request queued or running.
async fn has_open_request(dest: &Client, target: &str, origin: Option<&str>) -> Result<bool> {
    let row = dest
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM walfill.requests
                             WHERE target = $1 AND state IN ('queued', 'running')
                               AND ($2::text IS NULL OR origin = $2))",
            &[&target, &origin],
        )
        .await
        .map_err(|e| Error::destination("reading the requests", e))?;
    Ok(row.get(0))
}

/// The version the configuration asks for: its `version`, or, when a
/// version of that name was built from another transform (the transform
/// was edited, the version not), `VERSION_dHASH` for the new transform.
pub async fn wanted_version(dest: &Client, target: &Target) -> Result<Target> {
    let recorded = VersionState::load(dest, &target.name, &target.version).await?;
    match recorded {
        Some(v) if !job::defines_same(&v, &Definition::from_config(target)) => {
            let text = format!(
                "{}|{}|{}|{:?}",
                target.select,
                target.filter.as_deref().unwrap_or(""),
                target.schema,
                target.key
            );
            let hash = walfill_core::name::fnv1a(text.as_bytes()) as u32;
            Ok(target.with_version(&format!("{}_d{hash:08x}", target.version)))
        }
        _ => Ok(target.clone()),
    }
}

/// The version request `request` of target `configured` builds: the one it
/// names; or, for a request without one, the configured version when it
/// is not built yet, else a new version of the same transform,
/// `VERSION_rID`, recorded on the request (so a takeover builds the same).
pub(super) async fn version_to_build(
    dest: &Client,
    configured: &Target,
    request: &Request,
) -> Result<Target> {
    if let Some(version) = &request.version {
        return Ok(configured.with_version(version));
    }
    let wanted = wanted_version(dest, configured).await?;
    let recorded = VersionState::load(dest, &wanted.name, &wanted.version).await?;
    let target = match recorded.is_none_or(|v| v.phase.is_building()) {
        true => wanted,
        false => wanted.with_version(&format!("{}_r{}", wanted.version, request.id)),
    };
    requests::set_version(dest, request.id, &target.version).await?;
    Ok(target)
}

/// Queues the build of the configured version when it has not been built
/// (a new target, a changed version or transform) and nothing is queued
/// for the target. A version whose build failed for good, or whose request
/// an operator cancelled, is not asked for again until the configuration
/// changes it.
async fn build_configured(dest: &Client, target: &Target) -> Result<()> {
    let wanted = wanted_version(dest, target).await?;
    let recorded = VersionState::load(dest, &wanted.name, &wanted.version).await?;
    let needed = recorded.as_ref().is_none_or(|v| v.phase.is_building());
    if !needed || has_open_request(dest, &wanted.name, None).await? {
        return Ok(());
    }
    let tried: bool = dest
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM walfill.requests
                             WHERE target = $1 AND version = $2
                               AND state IN ('failed', 'cancelled'))",
            &[&wanted.name, &wanted.version],
        )
        .await
        .map_err(|e| Error::destination("reading the requests", e))?
        .get(0);
    if tried {
        return Ok(());
    }
    let id = requests::enqueue(dest, &wanted.name, "config", Some(&wanted.version)).await?;
    tracing::info!(
        target = %wanted.name,
        version = %wanted.version,
        request = id,
        "the configuration asks for a version not built yet; building it"
    );
    Ok(())
}

/// Handles `target`'s schedule at `now`: each due time once.
async fn run_schedule(
    config: &Config,
    dest: &mut Client,
    target: &Target,
    schedule: &crate::config::Schedule,
    now: DateTime<Utc>,
) -> Result<()> {
    let tx = dest
        .transaction()
        .await
        .map_err(|e| Error::destination("reading the schedule", e))?;
    let row = tx
        .query_opt(
            "SELECT schedule, last_due_at FROM walfill.schedules WHERE target = $1 FOR UPDATE",
            &[&target.name],
        )
        .await
        .map_err(|e| Error::destination("reading the schedule", e))?;
    let last: Option<DateTime<Utc>> = row
        .filter(|r| r.get::<_, String>(0) == schedule.text)
        .map(|r| r.get(1));
    let due = match schedule::decide(schedule, config.serve.timezone, last, now) {
        Decision::Wait => return Ok(()),
        Decision::Start(due) => due,
        Decision::Run(due) => {
            let running: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM walfill.requests
                                     WHERE target = $1 AND origin = 'schedule'
                                       AND state IN ('queued', 'running'))",
                    &[&target.name],
                )
                .await
                .map_err(|e| Error::destination("reading the requests", e))?
                .get(0);
            if running {
                tracing::warn!(
                    target = %target.name,
                    due = %due,
                    "a scheduled run is due while the last one still runs; not starting another"
                );
                state::record_event(
                    &tx,
                    &target.name,
                    None,
                    "schedule_skipped",
                    serde_json::json!({ "due_at": due.to_rfc3339() }),
                )
                .await?;
            } else {
                let version = schedule::version_name(&target.version, due, config.serve.timezone);
                tx.execute(
                    "INSERT INTO walfill.requests (target, origin, version, due_at)
                     VALUES ($1, 'schedule', $2, $3) ON CONFLICT DO NOTHING",
                    &[&target.name, &version, &due],
                )
                .await
                .map_err(|e| Error::destination("queueing the scheduled run", e))?;
                requests::notify(&tx, "schedule").await;
                tracing::info!(target = %target.name, due = %due, %version, "scheduled run due");
            }
            due
        }
    };
    tx.execute(
        "INSERT INTO walfill.schedules (target, schedule, last_due_at) VALUES ($1, $2, $3)
         ON CONFLICT (target) DO UPDATE SET schedule = excluded.schedule,
                                            last_due_at = excluded.last_due_at",
        &[&target.name, &schedule.text, &due],
    )
    .await
    .map_err(|e| Error::destination("recording the schedule", e))?;
    tx.commit()
        .await
        .map_err(|e| Error::destination("recording the schedule", e))
}

/// Finds out whether `target`'s published version was lost (its table or
/// view dropped, its slot gone) and, when it was, rebuilds it (or only
/// reports it, with `auto_rebuild = false`).
async fn recover(
    config: &Config,
    dest: &mut Client,
    source: &Client,
    target: &Target,
) -> Result<()> {
    let current = state::target_state(&*dest, &target.name).await?;
    let Some(active) = current.active else {
        return Ok(());
    };
    let Some(mut version) = VersionState::load(&*dest, &target.name, &active).await? else {
        return Ok(());
    };
    if version.lost.is_none() {
        let view = walfill_core::sql::quote_qualified(&target.schema, &target.name);
        let present = dest
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
                &[&version.staging_table(), &view],
            )
            .await
            .map_err(|e| Error::destination("looking for the published version", e))?;
        let reason = if !present.get::<_, bool>(0) {
            Some(format!("its table {} was dropped", version.staging_table()))
        } else if !present.get::<_, bool>(1) {
            Some(format!("the view {view} was dropped"))
        } else if crate::upstream::slot_health(source, &version.slot_name).await?
            != crate::upstream::SlotHealth::Kept
        {
            Some(format!(
                "its replication slot {} is gone or invalidated",
                version.slot_name
            ))
        } else {
            None
        };
        let Some(reason) = reason else {
            return Ok(());
        };
        tracing::error!(
            target = %target.name,
            version = %version.version,
            %reason,
            "the published version was lost"
        );
        version.mark_lost(dest, &reason).await?;
    }
    if !target.auto_rebuild || has_open_request(dest, &target.name, None).await? {
        return Ok(());
    }
    let rebuilt: bool = dest
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM walfill.requests
                             WHERE target = $1 AND origin = 'recovery' AND created_at >= $2::text::timestamptz)",
            &[&target.name, &version.updated_at],
        )
        .await
        .map_err(|e| Error::destination("reading the requests", e))?
        .get(0);
    if rebuilt {
        return Ok(());
    }
    let id = requests::enqueue(&*dest, &target.name, "recovery", None).await?;
    state::record_event(
        &*dest,
        &target.name,
        Some(&version.version),
        "rebuild_requested",
        serde_json::json!({ "request": id, "reason": version.lost }),
    )
    .await?;
    tracing::warn!(
        target = %target.name,
        request = id,
        "rebuilding the lost version as a new version{}",
        if config.archive.is_some() { " (replay when the archive covers it)" } else { "" }
    );
    Ok(())
}

/// Versions of `target` to retire: those published before (or lost) beyond
/// the `keep` most recent, never the active one nor one never published.
pub async fn to_retire(dest: &Client, target: &str, keep: u32) -> Result<Vec<String>> {
    let rows = dest
        .query(
            "SELECT version FROM (
                 SELECT v.version,
                        row_number() OVER (ORDER BY (v.lost IS NULL) DESC,
                                                    v.swapped_at DESC NULLS LAST) AS n,
                        v.lost IS NOT NULL AS lost
                   FROM walfill.versions v
                   LEFT JOIN walfill.targets t ON t.target = v.target
                  WHERE v.target = $1 AND v.phase = ANY($3)
                    AND (v.swapped_at IS NOT NULL OR v.lost IS NOT NULL)
                    AND v.version IS DISTINCT FROM t.active_version) x
             WHERE lost OR n > $2
             ORDER BY version",
            &[
                &target,
                &i64::from(keep),
                &state::Phase::names(&[state::Phase::Ready, state::Phase::Previous]),
            ],
        )
        .await
        .map_err(|e| Error::destination("reading the versions", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
