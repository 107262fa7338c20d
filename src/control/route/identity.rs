//! The source cluster's identity, to check archived WAL against.

use walfill_replay::decode::Identity;
use walfill_snapshot::ReplicationConnection;

use crate::config::Config;
use crate::db;
use crate::error::{Error, Result};

/// The source's system identifier and timeline history, from a replication
/// connection (`IDENTIFY_SYSTEM`, `TIMELINE_HISTORY`).
pub async fn source_identity(config: &Config) -> Result<Identity> {
    let url = db::replication_url(&config.source);
    tokio::task::spawn_blocking(move || {
        let mut conn = ReplicationConnection::connect(&url)?;
        let (system_id, timeline) = conn.identify()?;
        let history = match timeline {
            0 | 1 => String::new(),
            t => conn.timeline_history(t)?,
        };
        Identity::new(system_id, timeline, &history)
            .map_err(|e| Error::Internal(format!("the source's timeline history: {e}")))
    })
    .await
    .map_err(|e| Error::Internal(format!("identifying the source: {e}")))?
}
