//! `walfill retire`: drop a version that readers no longer need: its slot
//! (so the source stops keeping WAL for it) and its table.
//!
//! The version is recorded as retired first; a running `sync` sees that
//! within seconds and lets go of it, and only then are its slot and table
//! dropped. A retire interrupted in between finishes when run again.

use std::time::Duration;

use crate::config::Config;
use crate::control::state::{self, lock, Phase, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::upstream::{drop_slot_when_free, slot_exists};

/// How long retire waits for a running sync to let go of the version.
const LET_GO_WAIT: Duration = Duration::from_secs(60);

/// Retires `version` of `target` and says so; the active version cannot be
/// retired.
pub async fn retire(config: &Config, target: &str, version: &str) -> Result<()> {
    let done = retire_version(config, target, version).await?;
    crate::say!("{done}")?;
    Ok(())
}

/// Retires `version` of `target`; returns what was done.
pub async fn retire_version(config: &Config, target: &str, version: &str) -> Result<String> {
    let source = db::connect(&config.source, Role::Source).await?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let v = VersionState::load_existing(&dest, target, version).await?;
    let current = state::target_state(&dest, target).await?;
    if v.phase == Phase::Active || current.active.as_deref() == Some(version) {
        return Err(Error::refused(
            format!("version {version} of {target} is active"),
            "swap another version in first",
        ));
    }
    let already = v.phase == Phase::Retired;
    if !already {
        let tx = dest
            .transaction()
            .await
            .map_err(|e| Error::destination("starting the retirement", e))?;
        crate::control::state::retire_phase(&tx, target, version).await?;
        // Its dead letters go with it: nothing can retry them any more.
        tx.execute(
            "DELETE FROM walfill.dead_letters WHERE target = $1 AND version = $2",
            &[&target, &version],
        )
        .await
        .map_err(|e| Error::destination("removing the retired version's dead letters", e))?;
        tx.execute(
            "UPDATE walfill.targets SET previous_version = NULL
              WHERE target = $1 AND previous_version = $2",
            &[&target, &version],
        )
        .await
        .map_err(|e| Error::destination("recording the retirement", e))?;
        state::record_event(&tx, target, Some(version), "retire", serde_json::json!({})).await?;
        tx.commit()
            .await
            .map_err(|e| Error::destination("committing the retirement", e))?;
    }
    // A process still working on it (a sync) lets go once it sees it retired.
    let what = format!("version {version} of {target}");
    lock::acquire_when_let_go(
        &dest,
        &format!("version:{target}:{version}"),
        &what,
        LET_GO_WAIT,
    )
    .await?;
    let had_slot = slot_exists(&source, &v.slot_name).await?;
    drop_slot_when_free(&source, &v.slot_name, LET_GO_WAIT).await?;
    let table = v.staging_table();
    let mut drop = format!(
        "DROP TABLE IF EXISTS {table}; DELETE FROM walfill.chunk_snapshots WHERE version_table = {}",
        walfill_core::sql::quote_literal(&table)
    );
    if let Some(replaced) = &v.replaced_table {
        drop.push_str(&format!(
            "; DROP TABLE IF EXISTS {}",
            walfill_core::sql::quote_qualified(&v.dest_schema, replaced)
        ));
    }
    dest.batch_execute(&drop)
        .await
        .map_err(|e| Error::destination(format!("dropping {table}"), e))?;
    Ok(if already && !had_slot {
        format!("version {version} of {target} is retired (its table {table} is gone)")
    } else {
        format!(
            "retired version {version} of {target}: slot {} and table {table} dropped",
            v.slot_name
        )
    })
}
