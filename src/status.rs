//! `walfill status`: every target's versions, phases, progress and lag.

use std::collections::HashMap;

use serde::Serialize;

use crate::config::Config;
use crate::db::{self, Role};
use crate::error::Result;
use crate::state::{self, Phase, VersionState};

/// One version as `status` reports it.
#[derive(Debug, Serialize)]
pub struct VersionStatus {
    /// Target name.
    pub target: String,
    /// Version name.
    pub version: String,
    /// Phase.
    pub phase: String,
    /// Whether readers see this version.
    pub active: bool,
    /// Rows copied from the snapshot.
    pub rows_copied: i64,
    /// The planner's estimate of the source's rows.
    pub rows_estimated: i64,
    /// Recent copy rate, rows per second.
    pub rows_per_second: f64,
    /// Seconds left in the copy at that rate.
    pub eta_seconds: Option<u64>,
    /// The version's slot.
    pub slot: String,
    /// Bytes of WAL the slot has not confirmed (None if the source is unreachable
    /// or the slot is gone).
    pub slot_lag_bytes: Option<i64>,
    /// End of the last applied source transaction.
    pub applied_lsn: Option<String>,
    /// Changes applied from the stream.
    pub changes_applied: i64,
    /// When it was last swapped in.
    pub swapped_at: Option<String>,
    /// When its state last changed.
    pub updated_at: String,
    /// The error that stopped its last run.
    pub last_error: Option<String>,
    /// Why the version lost changes for good (it must be rebuilt), if it did.
    pub lost: Option<String>,
}

/// Prints the status of every target, as a table or as JSON.
pub async fn status(config: &Config, json: bool) -> Result<()> {
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let versions = VersionState::list(&dest).await?;
    let lags = slot_lags(config).await;
    let report: Vec<VersionStatus> = versions
        .into_iter()
        .filter(|v| v.phase != Phase::Retired)
        .map(|v| {
            let remaining = (v.rows_estimated - v.rows_copied).max(0);
            let eta_seconds = (v.phase == Phase::Copying && v.copy_rate > 0.0)
                .then(|| (remaining as f64 / v.copy_rate) as u64);
            VersionStatus {
                active: v.phase == Phase::Active,
                phase: v.phase.to_string(),
                rows_copied: v.rows_copied,
                rows_estimated: v.rows_estimated,
                rows_per_second: (v.copy_rate * 10.0).round() / 10.0,
                eta_seconds,
                slot_lag_bytes: lags.as_ref().and_then(|l| l.get(&v.slot_name).copied()),
                applied_lsn: v.applied_lsn.map(|l| l.to_string()),
                changes_applied: v.changes_applied,
                swapped_at: v.swapped_at,
                updated_at: v.updated_at,
                last_error: v.last_error,
                lost: v.lost,
                slot: v.slot_name,
                target: v.target,
                version: v.version,
            }
        })
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_else(|_| "[]".into());
        crate::say!("{text}")?;
        return Ok(());
    }
    for target in &config.targets {
        if !report.iter().any(|r| r.target == target.name) {
            crate::say!(
                "{}: no versions yet (configured version {})",
                target.name,
                target.version
            )?;
        }
    }
    if report.is_empty() {
        return Ok(());
    }
    crate::say!(
        "{:<24} {:<10} {:<12} {:>23} {:>10} {:>8} {:>12}  LAST ERROR",
        "TARGET",
        "VERSION",
        "PHASE",
        "ROWS COPIED/ESTIMATED",
        "ROWS/S",
        "ETA",
        "SLOT LAG"
    )?;
    for r in &report {
        let marker = if r.active { "*" } else { "" };
        crate::say!(
            "{:<24} {:<10} {:<12} {:>23} {:>10} {:>8} {:>12}  {}",
            r.target,
            format!("{}{marker}", r.version),
            r.phase,
            format!("{}/{}", r.rows_copied, r.rows_estimated),
            if r.phase == "copying" {
                format!("{:.0}", r.rows_per_second)
            } else {
                "-".into()
            },
            r.eta_seconds
                .map(|s| format!("{s}s"))
                .unwrap_or_else(|| "-".into()),
            r.slot_lag_bytes
                .map(human_bytes)
                .unwrap_or_else(|| "?".into()),
            r.lost
                .as_deref()
                .map(|l| format!("LOST (rebuild it with `walfill backfill`): {l}"))
                .or_else(|| r.last_error.clone())
                .unwrap_or_default()
        )?;
    }
    Ok(())
}

/// Unconfirmed WAL of every walfill slot; `None` if the source is unreachable.
async fn slot_lags(config: &Config) -> Option<HashMap<String, i64>> {
    let source = match db::connect(&config.source, Role::Source).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e.describe(), "cannot read slot lag from the source");
            return None;
        }
    };
    let rows = source
        .query(
            "SELECT slot_name::text,
                    (pg_current_wal_lsn() - coalesce(confirmed_flush_lsn, restart_lsn))::bigint
               FROM pg_replication_slots WHERE slot_name LIKE 'walfill\\_%'",
            &[],
        )
        .await
        .ok()?;
    Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
