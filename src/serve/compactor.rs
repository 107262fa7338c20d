//! Compaction on its own: every `[compact] check_seconds`, the leading
//! service compacts the tables whose newest base snapshot is followed by
//! more than `[compact] after_wal_mb` of archived WAL (see
//! `crate::control::job::compact`), and, when `[compact] schedule` is due, every
//! table whose base has any archived WAL after it; one at a time, with a
//! `compacted` event for each new base. Like a target's schedule, a due
//! time first seen is remembered, not run (a restart does not compact at
//! once), and several missed ones run once.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{schedule, Shared};
use crate::control::state;
use crate::db::{self, Role};

/// Runs until `cancel`.
pub(super) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut last_due = None;
    loop {
        let config = shared.config();
        let every = Duration::from_secs(config.compact.check_seconds);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let leading = shared.health.lock().map(|h| h.leader).unwrap_or(false);
        if !leading || config.archive.is_none() || !config.archive_settings.base_snapshots {
            continue;
        }
        let scheduled = config.compact.schedule.as_ref().is_some_and(|schedule| {
            let now = chrono::Utc::now();
            match schedule::decide(schedule, config.serve.timezone, last_due, now) {
                schedule::Decision::Wait => false,
                schedule::Decision::Start(due) => {
                    last_due = Some(due);
                    false
                }
                schedule::Decision::Run(due) => {
                    last_due = Some(due);
                    true
                }
            }
        });
        // On schedule, any WAL since the base (at least a MiB) will do.
        let after = match (scheduled, config.compact.after_wal_mb) {
            (true, _) => 0,
            (false, Some(after)) => after,
            (false, None) => continue,
        };
        let why = if scheduled { "schedule" } else { "wal" };
        let due = match crate::control::job::compaction_due(&config, after).await {
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
                why,
                "compacting the table's base snapshot"
            );
            match crate::control::job::compact(&config, std::slice::from_ref(&target), &cancel)
                .await
            {
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
                                        "why": why,
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
