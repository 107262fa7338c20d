//! Running one claimed request: the backfill of its version, with the
//! request's lease renewed and the target's pause watched while it runs.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Target};
use crate::control::job::{self, BackfillOptions};
use crate::control::state::requests::{self, Ending, Request};
use crate::control::state::VersionState;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::retry::{self, Backoff};

/// How often a running job looks whether its target was paused.
const PAUSE_CHECK: Duration = Duration::from_millis(250);

/// Why a job stopped before it was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Paused,
    LeaseLost,
}

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
    let watcher = tokio::spawn(watch(
        config.clone(),
        request.clone(),
        worker.clone(),
        lease,
        job_token.clone(),
    ));
    let result = build(&config, &dest, &request, &job_token).await;
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
            let schedule = Backoff::new(retry_base, retry_base * 60);
            let retry_in = retry::may_retry(&e)
                .then(|| schedule.after(u32::try_from(request.attempts).unwrap_or(1)));
            tracing::error!(
                request = id,
                target = %request.target,
                attempt = request.attempts,
                %error,
                retry_in_seconds = retry_in.map(|d| d.as_secs()),
                "request failed"
            );
            Ending::Failed { error, retry_in }
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
    let target = match &request.version {
        Some(v) => configured.with_version(v),
        None => {
            let target = choose_version(dest, configured, request.id).await?;
            requests::set_version(dest, request.id, &target.version).await?;
            target
        }
    };
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

/// The version a request without one builds: the configured version when
/// it is not built yet, else a new version of the same transform,
/// `VERSION_rID`.
async fn choose_version(dest: &Client, configured: &Target, id: i64) -> Result<Target> {
    let wanted = super::leader::wanted_version(dest, configured).await?;
    let recorded = VersionState::load(dest, &wanted.name, &wanted.version).await?;
    let unbuilt = recorded.is_none_or(|v| v.phase.is_building());
    if unbuilt {
        return Ok(wanted);
    }
    Ok(wanted.with_version(&format!("{}_r{id}", wanted.version)))
}

/// Renews the request's lease and watches the target's pause; cancels the
/// job when it is paused or its lease was lost. Returns why it stopped it.
async fn watch(
    config: Arc<Config>,
    request: Request,
    worker: String,
    lease: Duration,
    job: CancellationToken,
) -> Option<Stop> {
    let renew_every = lease / 3;
    let mut dest: Option<Client> = None;
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = job.cancelled() => return None,
            _ = tokio::time::sleep(PAUSE_CHECK) => {}
        }
        if dest.as_ref().is_none_or(|c| c.is_closed()) {
            dest = db::connect(&config.destination, Role::Destination)
                .await
                .ok();
        }
        let Some(client) = &dest else { continue };
        if let Ok(true) = requests::is_paused(client, &request.target).await {
            tracing::info!(request = request.id, target = %request.target, "paused; stopping the job");
            job.cancel();
            return Some(Stop::Paused);
        }
        if renewed.elapsed() >= renew_every {
            match requests::renew(client, request.id, &worker, lease).await {
                Ok(true) => renewed = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(
                        request = request.id,
                        "another worker took this request over (this one was cut off too \
                         long); stopping"
                    );
                    job.cancel();
                    return Some(Stop::LeaseLost);
                }
                Err(e) => tracing::warn!(error = %e.describe(), "cannot renew the request's lease"),
            }
        }
    }
}
