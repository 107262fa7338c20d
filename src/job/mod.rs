//! Jobs: the backfill of a version (fill by replay or snapshot, catch up,
//! swap) and the live sync of built versions, as state machines over the
//! version's recorded phase.

mod archive_wait;
mod backfill;
mod base;
mod compact;
mod copy_rows;
mod fence;
mod fill_chunked;
mod fill_copy;
mod fill_replay;
mod follow;
mod key_index;
mod path;
mod ranges;
mod refresh;
mod slot_wait;
mod source;
mod sync;
mod throttle;
mod writers;

pub use archive_wait::{can_switch_wal, explain_slow_archive, wait_for_archive};
pub use backfill::{backfill, backfill_target, defines_same, verifies, BackfillOptions};
pub use compact::{compact, due as compaction_due, Compacted};
pub(crate) use follow::{catch_up, Follower};
pub use refresh::{refresh, Refreshed};
pub use source::{
    current_wal_lsn, publication_problems, require_publication, slot_exists, slot_health,
    SlotHealth,
};
pub use sync::{sync, SyncOptions};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::{Error, Result};

/// What every step of a job needs.
pub struct Context<'a> {
    /// The configuration.
    pub config: &'a Config,
    /// A session on the source.
    pub source: &'a Client,
    /// Stops the job at the next safe point.
    pub cancel: &'a CancellationToken,
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
                return Err(Error::Busy(format!(
                    "replication slot {slot} is still in use by another process; stop it and \
                     run this again"
                )))
            }
            Some(true) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
        }
    }
}

/// Drops a replication slot of the source (it must not be in use).
pub(crate) async fn drop_slot(source: &Client, slot: &str) -> Result<()> {
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
