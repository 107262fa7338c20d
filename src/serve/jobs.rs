//! Running one claimed request: the backfill of its version, with the
//! request's lease renewed and the target's pause watched while it runs.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::job::{self, BackfillOptions};
use crate::control::state::requests::{self, Ending, Request};
use crate::control::state::VersionState;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::retry::{self, Backoff};

use super::lease::Stop;

/// Runs request `request` to its end and records how it ended. `stop`
/// is the service's shutdown: the job stops at its next safe point and the
/// request is queued again, to resume.
pub(super) async fn run(
    config: Arc<Config>,
    request: Request,
    worker: String,
    retry_base: Duration,
    stop: CancellationToken,
) {
    let id = request.id;
    let dest = match db::connect(&config.destination, Role::Destination).await {
        Ok(dest) => dest,
        Err(e) => {
            // The lease runs out and another look (here or elsewhere) retries.
            tracing::error!(request = id, error = %e.describe(), "cannot reach the state database");
            return;
        }
    };
    let job_token = stop.child_token();
    let lease = Duration::from_secs(u64::from(config.serve.lease_seconds));
    // (A future does nothing until awaited: the job starts below, with its
    // watcher running beside it.)
    let job = build(&config, &dest, &request, &job_token);
    let watcher = tokio::spawn(super::lease::watch(
        config.clone(),
        request.clone(),
        worker.clone(),
        lease,
        job_token.clone(),
    ));
    let result = job.await;
    watcher.abort();
    let stopped = watcher.await.ok().flatten();
    let ending = match result {
        Ok(outcome) => {
            tracing::info!(request = id, target = %request.target, "request done");
            Ending::Done(outcome)
        }
        Err(Error::Interrupted) if stopped == Some(Stop::LeaseLost) => return,
        Err(Error::Interrupted) => {
            tracing::info!(
                request = id,
                target = %request.target,
                why = if stopped == Some(Stop::Paused) { "paused" } else { "stopping" },
                "job stopped; progress is saved and it resumes where it stopped"
            );
            Ending::Requeue
        }
        Err(e) => {
            let error = e.describe();
            // Tried again only when it may help: an error that needs the
            // operator fails the request, which `walfill request` makes
            // anew once the cause is fixed (or `walfill cancel` retires
            // the version it began).
            let retry = retry::may_retry(&e).then(|| Backoff::new(retry_base, retry_base * 60));
            tracing::error!(
                request = id,
                target = %request.target,
                attempt = request.attempts,
                %error,
                retried = retry.is_some(),
                "request failed"
            );
            Ending::Failed { error, retry }
        }
    };
    if let Err(e) = requests::finish(&dest, id, &worker, &ending).await {
        tracing::error!(request = id, error = %e.describe(), "cannot record how the request ended");
    }
}

/// Decides the version (once; a takeover builds the same one) and builds it.
async fn build(
    config: &Config,
    dest: &Client,
    request: &Request,
    cancel: &CancellationToken,
) -> Result<serde_json::Value> {
    let configured = config.target(&request.target)?;
    if let Some(scope) = &request.scope {
        tracing::info!(
            request = request.id,
            target = %configured.name,
            scope = %scope,
            origin = %request.origin,
            attempt = request.attempts,
            "refreshing the rows in scope"
        );
        let done = job::refresh(config, request.id, &configured.name, scope, cancel).await?;
        return Ok(serde_json::json!({
            "version": done.version,
            "path": "refresh",
            "where": scope,
            "snapshot_lsn": done.snapshot_lsn.to_string(),
            "rows": done.rows,
            "tombstoned": done.tombstoned,
        }));
    }
    let target = super::leader::version_to_build(dest, configured, request).await?;
    tracing::info!(
        request = request.id,
        target = %target.name,
        version = %target.version,
        origin = %request.origin,
        attempt = request.attempts,
        "building"
    );
    let gate = &request.gate;
    let options = BackfillOptions {
        no_swap: gate.holds(),
        verify_before_swap: gate.verify_before_swap,
        ..BackfillOptions::default()
    };
    job::backfill_target(config, &target, &options, cancel).await?;
    if gate.holds() {
        requests::hold(dest, &target.name, &target.version, gate).await?;
        match &gate.swap_at {
            Some(at) => tracing::info!(
                request = request.id,
                target = %target.name,
                version = %target.version,
                swap_at = %at,
                "built and held; it is kept caught up and published at swap_at"
            ),
            None => tracing::info!(
                request = request.id,
                target = %target.name,
                version = %target.version,
                "built and held (--no-swap); it is kept caught up, and `walfill swap {} {}` \
                 publishes it",
                target.name,
                target.version
            ),
        }
    }
    let built = VersionState::load(dest, &target.name, &target.version).await?;
    Ok(match built {
        Some(v) => serde_json::json!({
            "version": v.version,
            "phase": v.phase.as_str(),
            "path": v.path.as_str(),
            "why": v.path_reason,
            "rows": v.rows_copied,
            "held": gate.holds(),
            "swap_at": gate.swap_at,
        }),
        None => serde_json::json!({ "version": target.version }),
    })
}
