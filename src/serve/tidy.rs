//! The leader's housekeeping, each round: no slot is left keeping WAL for
//! nothing.
//!
//! - Built versions that are not published (`ready`, `previous`) whose
//!   table was dropped (a `DROP SCHEMA ... CASCADE`) or whose slot is gone
//!   are marked lost, as the published one is ([`super::leader`]).
//! - Versions beyond `[serve] keep_versions`, and lost ones, are retired.
//! - A version a cancelled request had begun to build (a request queued
//!   again after a failed attempt, or failed for good, then cancelled) is
//!   retired, unless
//!   another open request wants it or a process works on it.
//! - A retirement that was cut short (the state says retired, but the
//!   slot or the table is still there: a `kill -9` in between, a takeover)
//!   is finished.
//! - A logical slot of this deployment that no version owns (its name
//!   carries the deployment's tag, or a retired version named it) is
//!   dropped once it has been seen unowned and unused for `[serve]
//!   slot_reap_after_minutes`. Temporary slots (a scoped refresh's, a
//!   verify's) and other deployments' slots are never touched. Each drop is
//!   recorded as a `slot_reaped` event, which `status` and
//!   `walfill_events_total` show. The time a slot was first seen unowned is
//!   kept by the leading process: a new leader starts counting again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::config::Config;
use crate::control::state::{self, Phase, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};

/// Slots seen unowned, by name, and when first.
pub(crate) type Orphans = Arc<Mutex<HashMap<String, Instant>>>;

/// One round of housekeeping; failures are logged and tried next round.
pub(super) async fn tidy(config: Arc<Config>, orphans: Orphans) {
    let mut dest = match db::connect(&config.destination, Role::Destination).await {
        Ok(dest) => dest,
        Err(_) => return,
    };
    let source = db::connect(&config.source, Role::Source).await;
    let slots = match &source {
        Ok(source) => match slots(source).await {
            Ok(slots) => Some(slots),
            Err(e) => {
                tracing::warn!(error = %e.describe(), "cannot read the source's slots");
                None
            }
        },
        Err(_) => None,
    };
    if let Some(slots) = &slots {
        if let Err(e) = find_lost(&mut dest, slots).await {
            tracing::warn!(error = %e.describe(), "cannot look for lost versions");
        }
    }
    retire_old(&config, &dest).await;
    if let Err(e) = retire_cancelled(&config, &dest).await {
        tracing::warn!(error = %e.describe(), "cannot retire the versions of cancelled requests");
    }
    if let Some(slots) = &slots {
        if let Err(e) = finish_retirements(&config, &dest, slots).await {
            tracing::warn!(error = %e.describe(), "cannot finish the retirements cut short");
        }
        if let Ok(source) = &source {
            if let Err(e) = reap(&config, &dest, source, slots, &orphans).await {
                tracing::warn!(error = %e.describe(), "cannot look for unowned slots");
            }
        }
    }
}

/// A logical slot of walfill's in the source database.
struct Slot {
    name: String,
    active: bool,
    retained: i64,
}

async fn slots(source: &Client) -> Result<Vec<Slot>> {
    let rows = source
        .query(
            "SELECT slot_name::text, active,
                    coalesce((pg_current_wal_lsn() - restart_lsn)::bigint, 0)
               FROM pg_replication_slots
              WHERE slot_type = 'logical' AND NOT temporary
                AND database = current_database() AND slot_name LIKE 'walfill\\_%'",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading the replication slots", e))?;
    Ok(rows
        .iter()
        .map(|r| Slot {
            name: r.get(0),
            active: r.get(1),
            retained: r.get(2),
        })
        .collect())
}

fn names(slots: &[Slot]) -> Vec<&str> {
    slots.iter().map(|s| s.name.as_str()).collect()
}

/// Marks lost the built, unpublished versions whose table or slot is gone.
async fn find_lost(dest: &mut Client, slots: &[Slot]) -> Result<()> {
    let rows = dest
        .query(
            "SELECT v.target, v.version,
                    to_regclass(format('%I.%I', v.dest_schema, v.table_name)) IS NULL,
                    v.slot_name
               FROM walfill.versions v
               LEFT JOIN walfill.targets t ON t.target = v.target
              WHERE v.phase = ANY($2) AND v.lost IS NULL
                AND v.version IS DISTINCT FROM t.active_version
                AND (to_regclass(format('%I.%I', v.dest_schema, v.table_name)) IS NULL
                     OR NOT v.slot_name = ANY($1))",
            &[
                &names(slots),
                &Phase::names(&[Phase::Ready, Phase::Previous]),
            ],
        )
        .await
        .map_err(|e| Error::destination("looking for lost versions", e))?;
    for row in rows {
        let (target, version): (String, String) = (row.get(0), row.get(1));
        let table_gone: bool = row.get(2);
        let slot: String = row.get(3);
        let Some(mut v) = VersionState::load(&*dest, &target, &version).await? else {
            continue;
        };
        let reason = if table_gone {
            format!("its table {} was dropped", v.staging_table())
        } else {
            format!("its replication slot {slot} is gone")
        };
        tracing::warn!(%target, %version, %reason, "a version kept for rollback was lost; it is retired");
        v.mark_lost(dest, &reason).await?;
    }
    Ok(())
}

/// Retires the versions beyond `[serve] keep_versions` of every target,
/// and the lost ones.
async fn retire_old(config: &Config, dest: &Client) {
    for target in &config.targets {
        let old =
            match super::leader::to_retire(dest, &target.name, config.serve.keep_versions).await {
                Ok(old) => old,
                Err(e) => {
                    tracing::warn!(error = %e.describe(), "cannot read the versions to retire");
                    return;
                }
            };
        for version in old {
            match crate::control::retire::retire_version(config, &target.name, &version).await {
                Ok(done) => tracing::info!(target = %target.name, %version, "{done}"),
                Err(e) => tracing::warn!(
                    target = %target.name,
                    %version,
                    error = %e.describe(),
                    "cannot retire an old version yet"
                ),
            }
        }
    }
}

/// Finishes the retirements whose slot or table is still there.
async fn finish_retirements(config: &Config, dest: &Client, slots: &[Slot]) -> Result<()> {
    let rows = dest
        .query(
            "SELECT target, version FROM walfill.versions
              WHERE phase = $2
                AND (slot_name = ANY($1)
                     OR to_regclass(format('%I.%I', dest_schema, table_name)) IS NOT NULL)
              ORDER BY target, version",
            &[&names(slots), &Phase::Retired.as_str()],
        )
        .await
        .map_err(|e| Error::destination("looking for retirements cut short", e))?;
    for row in rows {
        let (target, version): (String, String) = (row.get(0), row.get(1));
        match crate::control::retire::retire_version(config, &target, &version).await {
            Ok(done) => {
                tracing::info!(%target, %version, "a retirement cut short is finished: {done}")
            }
            Err(e) => tracing::warn!(
                %target,
                %version,
                error = %e.describe(),
                "cannot finish a retirement cut short yet"
            ),
        }
    }
    Ok(())
}

/// Drops the slots of this deployment no version owns, once they have
/// been unowned and unused for the grace period.
async fn reap(
    config: &Config,
    dest: &Client,
    source: &Client,
    slots: &[Slot],
    orphans: &Orphans,
) -> Result<()> {
    let rows = dest
        .query(
            "SELECT slot_name, phase <> $1, target, version FROM walfill.versions",
            &[&Phase::Retired.as_str()],
        )
        .await
        .map_err(|e| Error::destination("reading the versions' slots", e))?;
    // By slot name: whether a version not retired owns it, and the
    // (last) version that named it.
    let mut named: HashMap<String, (bool, String, String)> = HashMap::new();
    for row in rows {
        let owned: bool = row.get(1);
        let entry = named
            .entry(row.get(0))
            .or_insert_with(|| (false, row.get(2), row.get(3)));
        entry.0 |= owned;
    }
    let tag = format!("_{}", config.deployment_tag());
    let unowned: Vec<&Slot> = slots
        .iter()
        .filter(|s| match named.get(&s.name) {
            Some((owned, _, _)) => !owned,
            None => s.name.ends_with(&tag),
        })
        .collect();
    let grace = Duration::from_secs(u64::from(config.serve.slot_reap_after_minutes) * 60);
    let due: Vec<(String, i64)> = {
        let Ok(mut seen) = orphans.lock() else {
            return Ok(());
        };
        seen.retain(|name, _| unowned.iter().any(|s| &s.name == name));
        let now = Instant::now();
        unowned
            .iter()
            .filter(|s| !s.active)
            .filter(|s| now.duration_since(*seen.entry(s.name.clone()).or_insert(now)) >= grace)
            .map(|s| (s.name.clone(), s.retained))
            .collect()
    };
    for (name, retained) in due {
        let dropped = source
            .execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                  WHERE slot_name = $1 AND NOT active",
                &[&name],
            )
            .await;
        match dropped {
            Ok(1) => {
                tracing::warn!(
                    slot = %name,
                    retained = %crate::control::status::human_bytes(retained),
                    "dropped a replication slot no version owns"
                );
                if let Ok(mut seen) = orphans.lock() {
                    seen.remove(&name);
                }
                let (target, version) = match named.get(&name) {
                    Some((_, target, version)) => (target.as_str(), Some(version.as_str())),
                    None => ("*", None),
                };
                state::record_event(
                    dest,
                    target,
                    version,
                    "slot_reaped",
                    serde_json::json!({ "slot": name, "retained_bytes": retained }),
                )
                .await?;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                slot = %name,
                error = %walfill_core::sql::describe_pg_error(&e),
                "cannot drop a replication slot no version owns"
            ),
        }
    }
    Ok(())
}

/// Retires the versions cancelled requests had begun to build.
async fn retire_cancelled(config: &Config, dest: &Client) -> Result<()> {
    let rows = dest
        .query(
            "SELECT v.target, v.version FROM walfill.versions v
              WHERE v.phase = ANY($1)
                AND EXISTS (SELECT 1 FROM walfill.requests r
                             WHERE r.target = v.target AND r.version = v.version
                               AND r.state = 'cancelled')
                AND NOT EXISTS (SELECT 1 FROM walfill.requests r
                                 WHERE r.target = v.target AND r.version = v.version
                                   AND r.state IN ('queued', 'running'))
              ORDER BY v.target, v.version",
            &[&Phase::names(&Phase::BUILDING)],
        )
        .await
        .map_err(|e| Error::destination("looking for versions of cancelled requests", e))?;
    for row in rows {
        let (target, version): (String, String) = (row.get(0), row.get(1));
        let lock = format!("version:{target}:{version}");
        if crate::control::state::lock::holder_of(dest, &lock)
            .await?
            .is_some()
        {
            continue;
        }
        match crate::control::retire::retire_version(config, &target, &version).await {
            Ok(done) => tracing::info!(%target, %version, "its request was cancelled: {done}"),
            Err(e) => tracing::warn!(
                %target,
                %version,
                error = %e.describe(),
                "cannot retire the version of a cancelled request yet"
            ),
        }
    }
    Ok(())
}
