//! The source's replication slots: whether one is usable, and dropping one.

use tokio_postgres::Client;

use crate::error::{Error, Result};

/// What the source says of a replication slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotHealth {
    /// The slot exists and keeps its WAL.
    Kept,
    /// There is no slot of that name.
    Missing,
    /// The slot exists but the server removed WAL it needed
    /// (`max_slot_wal_keep_size`): it cannot stream the changes it lost.
    Invalidated,
}

/// Whether the source has a usable replication slot of this name.
pub async fn slot_health(source: &Client, slot: &str) -> Result<SlotHealth> {
    let row = source
        .query_opt(
            "SELECT wal_status::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| Error::source_query("looking up the replication slot", e))?;
    Ok(match row {
        None => SlotHealth::Missing,
        Some(r) if r.get::<_, Option<String>>(0).as_deref() == Some("lost") => {
            SlotHealth::Invalidated
        }
        Some(_) => SlotHealth::Kept,
    })
}

/// Whether the source has a replication slot of this name.
pub async fn slot_exists(source: &Client, slot: &str) -> Result<bool> {
    Ok(slot_health(source, slot).await? != SlotHealth::Missing)
}

/// Drops a replication slot of the source, waiting up to `wait` for a
/// process that still streams from it to let go.
pub async fn drop_slot_when_free(
    source: &Client,
    slot: &str,
    wait: std::time::Duration,
) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let active: Option<bool> = source
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| Error::source_query("looking up the replication slot", e))?
            .map(|r| r.get(0));
        match active {
            None => return Ok(()),
            Some(false) => return drop_slot(source, slot).await,
            Some(true) if started.elapsed() > wait => {
                return Err(Error::Busy {
                    work: format!("replication slot {slot}"),
                    holder: "another process".into(),
                    fix: "stop it and run this again".into(),
                })
            }
            Some(true) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
        }
    }
}

/// Drops a replication slot of the source (it must not be in use).
pub async fn drop_slot(source: &Client, slot: &str) -> Result<()> {
    source
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
              WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| Error::source_query(format!("dropping the replication slot {slot}"), e))?;
    Ok(())
}
