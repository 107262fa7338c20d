//! Compaction on its own: every `[compact] check_seconds`, the leading
//! service compacts the tables whose newest base snapshot is followed by
//! more than `[compact] after_wal_mb` of archived WAL (see
//! `crate::job::compact`), one at a time, and records a `compacted` event
//! for each new base.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::db::{self, Role};
use crate::state;

/// Runs until `cancel`.
pub(super) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        let config = shared.config();
        let every = Duration::from_secs(config.compact.check_seconds);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let leading = shared.health.lock().map(|h| h.leader).unwrap_or(false);
        let Some(after) = config.compact.after_wal_mb.filter(|_| leading) else {
            continue;
        };
        if config.archive.is_none() || !config.archive_settings.base_snapshots {
            continue;
        }
        let due = match crate::job::compaction_due(&config, after).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e.describe(), "cannot tell which tables to compact");
                continue;
            }
        };
        for (target, since_mib) in due {
            tracing::info!(
                %target,
                wal_since_base_mib = since_mib,
                after_wal_mb = after,
                "compacting the table's base snapshot"
            );
            match crate::job::compact(&config, std::slice::from_ref(&target), &cancel).await {
                Ok(done) => {
                    for c in done {
                        tracing::info!(table = %c.table, note = %c.note, "compaction done");
                        if let Some(boundary) = c.boundary {
                            if let Ok(dest) =
                                db::connect(&config.destination, Role::Destination).await
                            {
                                let _ = state::record_event(
                                    &dest,
                                    &target,
                                    None,
                                    "compacted",
                                    serde_json::json!({
                                        "table": c.table,
                                        "boundary": boundary.to_string(),
                                        "rows": c.rows,
                                        "wal_since_base_mib": since_mib,
                                    }),
                                )
                                .await;
                            }
                        }
                    }
                }
                Err(e) => tracing::error!(
                    %target,
                    error = %e.describe(),
                    "compaction failed; it is tried again at the next look"
                ),
            }
        }
    }
}
