//! The source's replication slots walfill owns (named `walfill_...`): what
//! each keeps, and a warning when one keeps more WAL than the limit.

use serde::Serialize;
use tokio_postgres::Client;

use crate::config::Config;
use crate::error::{Error, Result};

/// One slot as `status` reports it.
#[derive(Debug, Serialize)]
pub struct SlotStatus {
    /// The slot's name.
    pub name: String,
    /// `physical` (the archiver's) or `logical` (a version's stream).
    pub kind: String,
    /// Whether a process streams from it now.
    pub active: bool,
    /// WAL the source keeps for it (from its restart LSN to now).
    pub retained_bytes: i64,
    /// The server's verdict on that WAL (`reserved`, `extended`, `unreserved`,
    /// `lost`).
    pub wal_status: Option<String>,
    /// Why it deserves attention, when it does.
    pub warning: Option<String>,
}

/// A warning when the source lets slots keep WAL without limit
/// (`max_slot_wal_keep_size = -1`, PostgreSQL's default).
pub async fn unlimited_keep_warning(source: &Client) -> Result<Option<String>> {
    let keep: i64 = source
        .query_one(
            "SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading max_slot_wal_keep_size", e))?
        .get(0);
    Ok((keep < 0).then(|| {
        "max_slot_wal_keep_size is unset (-1) on the source: a replication slot nothing reads \
         keeps WAL until the source's disk fills; set a limit above the WAL a backfill's slot \
         holds while it copies, e.g. ALTER SYSTEM SET max_slot_wal_keep_size = '100GB'; SELECT \
         pg_reload_conf(); (a slot past it is invalidated, and its version rebuilt)"
            .to_string()
    }))
}

/// Reads every slot named `walfill_...`, each with a warning when it keeps
/// more WAL than the limit: `[backfill] slot_warning_mb`, or a quarter of
/// `max_slot_wal_keep_size`, or 1 GiB when that is unlimited.
pub(super) async fn read(config: &Config, source: &Client) -> Result<Vec<SlotStatus>> {
    let failed = |e| Error::source_query("reading the replication slots", e);
    let keep: i64 = source
        .query_one(
            "SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'",
            &[],
        )
        .await
        .map_err(failed)?
        .get(0);
    let limit = match config.backfill.slot_warning_mb {
        Some(mb) => mb as i64 * 1048576,
        None if keep >= 0 => keep * 1048576 / 4,
        None => 1 << 30,
    };
    let rows = source
        .query(
            "SELECT slot_name::text, slot_type::text, active,
                    coalesce((pg_current_wal_lsn() - restart_lsn)::bigint, 0), wal_status
               FROM pg_replication_slots
              WHERE slot_name LIKE 'walfill\\_%'
                AND (database IS NULL OR database = current_database())
              ORDER BY slot_name",
            &[],
        )
        .await
        .map_err(failed)?;
    Ok(rows
        .iter()
        .map(|r| {
            let name: String = r.get(0);
            let kind: String = r.get(1);
            let active: bool = r.get(2);
            let retained: i64 = r.get(3);
            let wal_status: Option<String> = r.get(4);
            let warning = warning(&name, &kind, active, retained, limit, wal_status.as_deref());
            SlotStatus {
                name,
                kind,
                active,
                retained_bytes: retained,
                wal_status,
                warning,
            }
        })
        .collect())
}

fn warning(
    name: &str,
    kind: &str,
    active: bool,
    retained: i64,
    limit: i64,
    wal_status: Option<&str>,
) -> Option<String> {
    if wal_status == Some("lost") {
        return Some("the server removed WAL this slot needed".into());
    }
    if retained <= limit {
        return None;
    }
    let who = match (kind, active) {
        ("physical", false) => {
            "no `walfill archive` streams from it: start it, or drop the slot with `walfill \
             archive --drop-slot`"
                .to_string()
        }
        ("physical", true) => "the archiver is behind".to_string(),
        (_, false) => "no `walfill sync` or backfill follows it: run `walfill sync`, or retire \
                       the version"
            .to_string(),
        _ => "its version is behind the source".to_string(),
    };
    Some(format!(
        "slot {name} keeps {} of WAL, more than {}; {who}",
        human_bytes(retained),
        human_bytes(limit)
    ))
}

/// 1536 → "1.5 KiB".
pub fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
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
