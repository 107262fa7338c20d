//! `walfill sync`: keep built versions in step with the source.
//!
//! Every version that is complete (ready, active, or previous, kept for
//! rollback) follows its own slot, each in its own task: one failing version
//! is retried with backoff while the others go on. The running sync looks
//! at the state every few seconds: it starts following versions built
//! after it started, and lets go of versions retired (or lost) meanwhile.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;

use super::follow::Follower;
use crate::config::Config;
use crate::control::state::{self, lock, VersionState};
use crate::db::{self, Role};
use crate::error::{Directive, Error, Result};
use crate::pipeline::version_sql;
use crate::retry::{self, Backoff};
use crate::upstream::current_wal_lsn;

/// How a sync runs.
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    /// Apply what is committed now, then exit.
    pub once: bool,
    /// Other processes (`walfill serve` workers) share the versions: one
    /// held by another is left to it, and looked at again at the next scan.
    pub shared: bool,
}

/// Pauses between retries of a failing version: 1 s, doubling up to a
/// minute.
const FOLLOW_RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// How often a running sync looks for versions built or retired.
const RESCAN: Duration = Duration::from_secs(2);

/// Follows the live versions of the named targets (all when empty).
pub async fn sync(
    config: &Config,
    names: &[String],
    options: &SyncOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    let selected: Vec<String> = config
        .select_targets(names)?
        .into_iter()
        .map(|t| t.name.clone())
        .collect();
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let live = |all: Vec<VersionState>| -> Vec<VersionState> {
        all.into_iter()
            .filter(|v| v.phase.is_live() && v.lost.is_none() && selected.contains(&v.target))
            .collect()
    };
    let versions = live(VersionState::list(&dest).await?);
    for target in names {
        if !versions.iter().any(|v| &v.target == target) {
            return Err(Error::refused(
                format!("target {target} has no built version to sync"),
                format!("run `walfill backfill {target}` first"),
            ));
        }
    }
    let until = if options.once {
        if versions.is_empty() {
            tracing::info!("no built versions to sync; run `walfill backfill TARGET` first");
            return Ok(());
        }
        let source = db::connect(&config.source, Role::Source).await?;
        Some(current_wal_lsn(&source).await?)
    } else {
        None
    };

    let mut tasks = JoinSet::new();
    let mut running: HashMap<String, CancellationToken> = HashMap::new();
    // Versions that failed for a reason only the operator can fix, with
    // the state they failed in: followed again once that state moves.
    let mut failed: HashMap<String, String> = HashMap::new();
    let mut failures = Vec::new();
    let mut current = versions;
    loop {
        for version in &current {
            let label = version.label();
            if running.contains_key(&label)
                || failed
                    .get(&label)
                    .is_some_and(|at| *at == version.updated_at)
            {
                continue;
            }
            let token = cancel.child_token();
            running.insert(label.clone(), token.clone());
            let config = config.clone();
            let version = version.clone();
            let shared = options.shared;
            tasks.spawn(async move {
                let result = follow_with_retry(&config, &version, until, shared, &token).await;
                (version.label(), result)
            });
        }
        if options.once {
            while let Some(joined) = tasks.join_next().await {
                if let Some(failure) = finished(joined, &mut running, &mut failed, &dest).await {
                    failures.push(failure);
                }
            }
            break;
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Some(failure) = finished(joined, &mut running, &mut failed, &dest).await {
                    tracing::error!(%failure, "stopped following a version");
                }
            }
            _ = tokio::time::sleep(RESCAN) => {}
        }
        // Read the versions again before starting anything: one that just
        // failed is followed again only once its state moves.
        current = match VersionState::list(&dest).await {
            Ok(all) => live(all),
            Err(e) => {
                tracing::warn!(error = %e.describe(), "could not read the versions; trying again");
                continue;
            }
        };
        // Let go of versions retired, lost or no longer live meanwhile.
        for (label, token) in &running {
            if !current.iter().any(|v| &v.label() == label) {
                tracing::info!(version = %label, "no longer live; letting go of it");
                token.cancel();
            }
        }
    }
    for token in running.values() {
        token.cancel();
    }
    while let Some(joined) = tasks.join_next().await {
        if let Some(failure) = finished(joined, &mut running, &mut failed, &dest).await {
            failures.push(failure);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Problems(failures))
    }
}

/// Books a finished task; returns its failure, if it failed.
async fn finished(
    joined: std::result::Result<(String, Result<()>), tokio::task::JoinError>,
    running: &mut HashMap<String, CancellationToken>,
    failed: &mut HashMap<String, String>,
    dest: &tokio_postgres::Client,
) -> Option<String> {
    match joined {
        Ok((label, result)) => {
            running.remove(&label);
            match result {
                Ok(()) | Err(Error::Interrupted) => None,
                Err(e) => {
                    if let Some((target, version)) = label.split_once('/') {
                        if let Ok(Some(v)) = VersionState::load(dest, target, version).await {
                            failed.insert(label.clone(), v.updated_at);
                        }
                    }
                    Some(format!("{label}: {}", e.describe()))
                }
            }
        }
        Err(e) => Some(format!("a sync task failed: {e}")),
    }
}

/// Follows one version; failures that may go away by themselves are
/// retried with exponential backoff until stopped (in continuous mode).
async fn follow_with_retry(
    config: &Config,
    version: &VersionState,
    until: Option<Lsn>,
    shared: bool,
    cancel: &CancellationToken,
) -> Result<()> {
    let mut failures = 0;
    loop {
        let result = Box::pin(follow_version(config, version, (until, shared), cancel)).await;
        let e = match result {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if let Ok(dest) = db::connect(&config.destination, Role::Destination).await {
            VersionState::record_error(&dest, &version.target, &version.version, &e.describe())
                .await;
        }
        if let Error::EnumLabels { labels, .. } = &e {
            if cancel.is_cancelled() {
                return Ok(());
            }
            if add_enum_labels(config, version, labels).await {
                continue;
            }
            if until.is_none() {
                if wait_for_enum_labels(config, version, labels, &e, cancel).await {
                    continue;
                }
                return Ok(());
            }
        }
        match e.directive() {
            Directive::Retry if until.is_none() && !cancel.is_cancelled() => {
                failures += 1;
                let wait = FOLLOW_RETRY.after(failures);
                tracing::error!(
                    target = %version.target,
                    version = %version.version,
                    error = %e.describe(),
                    retry_in = wait.as_secs(),
                    "sync failed; retrying"
                );
                if retry::pause(wait, cancel).await.is_err() {
                    return Ok(());
                }
            }
            Directive::Stop => return Ok(()),
            _ => return Err(e),
        }
    }
}

/// How often a version waiting for enum labels looks at the destination.
const LABEL_POLL: Duration = Duration::from_secs(5);

/// A version stopped by enum labels the destination lacks, of a target
/// that says `sync_enum_labels`: adds them. Returns whether it did.
async fn add_enum_labels(
    config: &Config,
    version: &VersionState,
    labels: &[crate::error::EnumLabel],
) -> bool {
    let sync_labels = config
        .targets
        .iter()
        .any(|t| t.name == version.target && t.sync_enum_labels);
    if !sync_labels {
        return false;
    }
    let added = match db::connect(&config.destination, Role::Destination).await {
        Ok(dest) => crate::pipeline::enum_labels::add(&dest, labels).await,
        Err(e) => Err(e),
    };
    match added {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(
                target = %version.target,
                version = %version.version,
                error = %e.describe(),
                "could not add the enum labels the source has"
            );
            false
        }
    }
}

/// A version stopped by enum labels the destination lacks: waits until
/// someone adds them. Returns whether to follow again (false when stopped).
async fn wait_for_enum_labels(
    config: &Config,
    version: &VersionState,
    labels: &[crate::error::EnumLabel],
    e: &Error,
    cancel: &CancellationToken,
) -> bool {
    tracing::error!(
        target = %version.target,
        version = %version.version,
        error = %e.describe(),
        "stopped following until the destination accepts the enum labels"
    );
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(LABEL_POLL) => {}
        }
        match db::connect(&config.destination, Role::Destination).await {
            Ok(dest) => {
                if let Ok(true) = crate::pipeline::enum_labels::accepted(&dest, labels).await {
                    tracing::info!(
                        target = %version.target,
                        version = %version.version,
                        "the destination accepts the enum labels; following again"
                    );
                    return true;
                }
            }
            Err(failed) => {
                tracing::warn!(error = %failed.describe(), "cannot reach the destination");
            }
        }
    }
}

/// Follows `version` until `until` (until stopped without one); `shared`:
/// only if no other process follows it.
async fn follow_version(
    config: &Config,
    version: &VersionState,
    (until, shared): (Option<Lsn>, bool),
    cancel: &CancellationToken,
) -> Result<()> {
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    let name = format!("version:{}:{}", version.target, version.version);
    let what = format!("version {} of {}", version.version, version.target);
    if shared {
        if !lock::try_acquire(&dest, &name).await? {
            tracing::debug!(version = %version.label(), "another process follows it");
            return Ok(());
        }
    } else {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            taken = lock::acquire(&dest, &name, &what, lock::DEFAULT_WAIT) => taken?,
        }
    }
    let source = db::connect(&config.source, Role::Source).await?;
    // Reread under the lock: another process may have moved it on.
    let Some(mut state) = VersionState::load(&dest, &version.target, &version.version).await?
    else {
        return Ok(());
    };
    if !state.phase.is_live() || state.lost.is_some() {
        return Ok(());
    }
    if state.source_desc.is_none() {
        let def = state.definition();
        let table = version_sql::describe(&source, &def).await?;
        state.adopt_description(&dest, &table).await?;
    }
    if let Some(relid) = state.source_relid {
        crate::upstream::require_publication(&source, &config.backfill.publication, relid).await?;
    }
    state.take_lease(&dest).await?;
    let plan = state.plan(&dest).await?;
    plan.verify_staging(&dest).await?;
    let catalog = db::connect(&config.source, Role::Source).await?;
    let cx = super::Context {
        config,
        source: &source,
        cancel,
    };
    let opened = Follower::open(&cx, catalog, &mut state, &plan, None, until).await;
    let mut follower = match opened {
        Err(Error::Lost(mut lost)) => {
            state.mark_lost(&mut dest, &lost.reason).await?;
            lost.fix = Some(format!(
                "rebuild it with `walfill backfill {}` (version {} configured)",
                lost.target, lost.version
            ));
            return Err(Error::Lost(lost));
        }
        other => other?,
    };
    tracing::info!(
        target = %state.target,
        version = %state.version,
        from = %state.applied_lsn.unwrap_or_default(),
        until = %until.map(|l| l.to_string()).unwrap_or_else(|| "stopped".into()),
        "following"
    );
    let applied = match follower.run(&mut dest, &mut state, cancel, "sync").await {
        Err(Error::Interrupted) => return Ok(()),
        Err(e) => {
            return Err(crate::pipeline::enum_labels::explain(
                &source,
                &dest,
                &plan,
                &state.target,
                e,
            )
            .await)
        }
        Ok(applied) => applied,
    };
    tracing::info!(
        target = %state.target,
        version = %state.version,
        applied = %state.applied_lsn.unwrap_or_default(),
        changes = applied.changes,
        "stopped following"
    );
    Ok(())
}
