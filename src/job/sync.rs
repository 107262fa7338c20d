//! `walfill sync`: keep built versions in step with the source.
//!
//! Every version that has a complete copy (ready, active, or previous, kept
//! for rollback) follows its own slot. Each runs in its own task: one failing
//! version is retried with backoff while the others go on.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use walfill_replay::Lsn;

use super::follow::Follower;
use super::source::current_wal_lsn;
use crate::apply::Applier;
use crate::config::Config;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::plan::{self, Definition};
use crate::state::{self, VersionState};

/// How a sync runs.
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    /// Apply what is committed now, then exit.
    pub once: bool,
}

/// Longest pause between retries of a failing version.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Follows the live versions of the named targets (all when empty).
pub async fn sync(
    config: &Config,
    names: &[String],
    options: &SyncOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    let selected = config.select_targets(names)?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let versions: Vec<VersionState> = VersionState::list(&dest)
        .await?
        .into_iter()
        .filter(|v| v.phase.is_live() && selected.iter().any(|t| t.name == v.target))
        .collect();
    for target in &selected {
        if !names.is_empty() && !versions.iter().any(|v| v.target == target.name) {
            return Err(Error::State(format!(
                "target {} has no built version to sync; run `walfill backfill {}` first",
                target.name, target.name
            )));
        }
    }
    if versions.is_empty() {
        tracing::info!("no built versions to sync; run `walfill backfill TARGET` first");
        return Ok(());
    }
    let until = if options.once {
        let source = db::connect(&config.source, Role::Source).await?;
        Some(current_wal_lsn(&source).await?)
    } else {
        None
    };

    let mut tasks = JoinSet::new();
    for version in versions {
        let config = config.clone();
        let cancel = cancel.clone();
        tasks.spawn(async move {
            let label = format!("{}/{}", version.target, version.version);
            let result = follow_with_retry(&config, version, until, &cancel).await;
            (label, result)
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((_, Ok(()))) => {}
            Ok((label, Err(e))) => failures.push(format!("{label}: {e}")),
            Err(e) => failures.push(format!("a sync task failed: {e}")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Problems(failures))
    }
}

/// Follows one version; in continuous mode failures are retried with
/// exponential backoff until cancelled.
async fn follow_with_retry(
    config: &Config,
    version: VersionState,
    until: Option<Lsn>,
    cancel: &CancellationToken,
) -> Result<()> {
    let mut backoff = Duration::from_secs(1);
    loop {
        let result = follow_version(config, &version, until, cancel).await;
        match result {
            Ok(()) => return Ok(()),
            Err(e) if until.is_some() || cancel.is_cancelled() => return Err(e),
            Err(e) => {
                tracing::error!(
                    target = %version.target,
                    version = %version.version,
                    error = %e,
                    retry_in = backoff.as_secs(),
                    "sync failed; retrying"
                );
                if let Ok(dest) = db::connect(&config.destination, Role::Destination).await {
                    VersionState::record_error(
                        &dest,
                        &version.target,
                        &version.version,
                        &e.to_string(),
                    )
                    .await;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

async fn follow_version(
    config: &Config,
    version: &VersionState,
    until: Option<Lsn>,
    cancel: &CancellationToken,
) -> Result<()> {
    let source = db::connect(&config.source, Role::Source).await?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    let lock = format!("version:{}:{}", version.target, version.version);
    if !state::try_lock(&dest, &lock).await? {
        return Err(Error::Busy(format!(
            "another walfill process is applying version {} of {}",
            version.version, version.target
        )));
    }
    // Reread under the lock: another process may have moved it on.
    let current = VersionState::load(&dest, &version.target, &version.version)
        .await?
        .ok_or_else(|| Error::State("the version vanished from walfill.versions".into()))?;
    let plan = plan::build(&source, &dest, &Definition::from_state(&current)).await?;
    plan.verify_staging(&dest).await?;
    let url = config.source.replication_url();
    let publication = &config.backfill.publication;
    let batch = config.backfill.apply_batch_changes;
    let mut follower =
        Follower::start(Applier::new(plan), current, None, &url, publication, batch).await?;
    tracing::info!(
        target = %version.target,
        version = %version.version,
        until = ?until.map(|l| l.to_string()),
        "following"
    );
    let stop = follower.run(&mut dest, until, cancel).await?;
    tracing::info!(target = %version.target, version = %version.version, ?stop, "stopped");
    Ok(())
}
