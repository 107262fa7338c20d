//! Planned swaps, the leader's part of the cut-over gate.
//!
//! A request with `--swap-at TIME` builds its version and holds it back
//! (`versions.held`, `swap_at`); the sync keeps it caught up meanwhile.
//! Once the time has come, the leader publishes it, comparing it with the
//! transform of its source first when `verify_before_swap` says so (the
//! request's, else the target's, else `[backfill]`'s). A swap that fails
//! (the version differs, fell behind, lost its slot) leaves the view as it
//! is, records why in `versions.swap_error` (shown by `status`) and is
//! tried again a minute later. A version held by `--no-swap` alone waits
//! for `walfill swap`.

use std::sync::Arc;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::state;
use crate::db::{self, Role};
use crate::error::{Error, Result};

/// Publishes every held version whose planned swap is due; failures are
/// recorded and tried again next round.
pub(super) async fn planned_swaps(config: Arc<Config>, cancel: CancellationToken) {
    let mut dest = match db::connect(&config.destination, Role::Destination).await {
        Ok(dest) => dest,
        Err(e) => {
            tracing::warn!(error = %e.describe(), "cannot look for planned swaps");
            return;
        }
    };
    let due = match due(&dest).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e.describe(), "cannot look for planned swaps");
            return;
        }
    };
    for (target, version, verify) in due {
        if cancel.is_cancelled() {
            return;
        }
        tracing::info!(
            target,
            version,
            "publishing a held version at its planned time"
        );
        let result = publish(&config, &mut dest, &target, &version, verify, &cancel).await;
        match result {
            Ok(()) => tracing::info!(target, version, "published at its planned time"),
            Err(Error::Interrupted) => return,
            Err(e) => {
                let why = e.describe();
                tracing::error!(
                    target,
                    version,
                    error = %why,
                    "the planned swap failed; the view is unchanged and it is tried again in a \
                     minute"
                );
                let _ = dest
                    .execute(
                        "UPDATE walfill.versions SET swap_error = $3, swap_tried_at = now()
                          WHERE target = $1 AND version = $2",
                        &[&target, &version, &why],
                    )
                    .await;
            }
        }
    }
}

/// Held versions whose swap is due (and not tried in the last minute),
/// with the request's `verify_before_swap`.
async fn due(dest: &Client) -> Result<Vec<(String, String, Option<bool>)>> {
    let rows = dest
        .query(
            "SELECT target, version, verify_before_swap FROM walfill.versions
              WHERE held AND swap_at <= now() AND phase = $1 AND lost IS NULL
                AND (swap_tried_at IS NULL OR swap_tried_at < now() - interval '1 minute')
              ORDER BY swap_at, target, version",
            &[&state::Phase::Ready.as_str()],
        )
        .await
        .map_err(|e| Error::destination("reading the planned swaps", e))?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

async fn publish(
    config: &Config,
    dest: &mut Client,
    target: &str,
    version: &str,
    verify: Option<bool>,
    cancel: &CancellationToken,
) -> Result<()> {
    let configured = config.target(target)?;
    if crate::control::job::verifies(config, Some(configured), verify) {
        let verified =
            crate::control::verify::verify_version(config, dest, target, version, cancel).await?;
        verified
            .record(&*dest, target, version, "differs from its source")
            .await?;
    }
    crate::control::job::swap(config, dest, target, version, false, cancel).await
}
