//! `walfill retire`: drop a version that readers no longer need: its slot
//! (so the source stops keeping WAL for it) and its staging table.

use walfill_snapshot::sql::quote_ident;
use walfill_snapshot::SnapshotError;

use crate::config::Config;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::state::{self, Phase, VersionState};

/// Retires `version` of `target`; the active version cannot be retired.
pub async fn retire(config: &Config, target: &str, version: &str) -> Result<()> {
    let source = db::connect(&config.source, Role::Source).await?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let lock = format!("version:{target}:{version}");
    if !state::try_lock(&dest, &lock).await? {
        return Err(Error::Busy(format!(
            "another walfill process is working on version {version} of {target}; stop it first"
        )));
    }
    let v = VersionState::load(&dest, target, version)
        .await?
        .ok_or_else(|| Error::State(format!("target {target} has no version {version}")))?;
    if v.phase == Phase::Active {
        return Err(Error::State(format!(
            "version {version} of {target} is active; swap another version in first"
        )));
    }
    if v.phase == Phase::Retired {
        println!("version {version} of {target} is already retired");
        return Ok(());
    }
    source
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
              WHERE slot_name = $1",
            &[&v.slot_name],
        )
        .await
        .map_err(|e| SnapshotError::query(format!("dropping slot {}", v.slot_name), e))?;
    let tx = dest
        .transaction()
        .await
        .map_err(|e| Error::destination("starting the retirement", e))?;
    let table = format!(
        "{}.{}",
        quote_ident(&v.dest_schema),
        quote_ident(&v.table_name)
    );
    tx.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
        .await
        .map_err(|e| Error::destination(format!("dropping {table}"), e))?;
    tx.execute(
        "UPDATE walfill.versions SET phase = 'retired', updated_at = now()
          WHERE target = $1 AND version = $2",
        &[&target, &version],
    )
    .await
    .map_err(|e| Error::destination("recording the retirement", e))?;
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
    println!(
        "retired version {version} of {target}: slot {} and table {table} dropped",
        v.slot_name
    );
    Ok(())
}
