//! The service's long-running parts that are not requests: the live sync of
//! built versions, the archiver, and the retirement of old versions. Each
//! restarts with the configuration after a reload, and after a failure
//! with a pause.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::archiver::{self, ArchiveOptions};
use crate::config::Config;
use crate::db::{self, Role};
use crate::error::Error;
use crate::job::{self, SyncOptions};
use crate::state::lock;

/// Longest pause before a failed part is started again.
const MAX_RESTART_WAIT: Duration = Duration::from_secs(60);

/// Runs `part` with the configuration in force until `cancel`: again with
/// the new configuration after a reload, and after a pause when it fails.
async fn supervise<F, Fut>(shared: Arc<Shared>, cancel: CancellationToken, what: &str, part: F)
where
    F: Fn(Arc<Config>, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mut config_rx = shared.config.clone();
    let mut wait = Duration::from_secs(1);
    while !cancel.is_cancelled() {
        let config = config_rx.borrow_and_update().clone();
        let token = cancel.child_token();
        let run = part(config, token.clone());
        tokio::pin!(run);
        let reloaded = tokio::select! {
            result = &mut run => {
                match result {
                    Ok(()) | Err(Error::Interrupted) => wait = Duration::from_secs(1),
                    Err(e) => {
                        tracing::error!(part = what, error = %e.describe(), retry_in = wait.as_secs(), "failed; starting it again");
                    }
                }
                false
            }
            changed = config_rx.changed() => changed.is_ok(),
        };
        if reloaded {
            token.cancel();
            let _ = run.await;
            tracing::info!(part = what, "restarting with the reloaded configuration");
            continue;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_RESTART_WAIT);
    }
}

/// Keeps every built version in step with the live stream.
pub(super) async fn sync(shared: Arc<Shared>, cancel: CancellationToken) {
    supervise(shared, cancel, "sync", |config, token| async move {
        let options = SyncOptions {
            once: false,
            shared: true,
        };
        job::sync(&config, &[], &options, &token).await
    })
    .await
}

/// Streams WAL into the archive, in the one process holding its lock, when
/// `[archive]` is configured and `[serve] archiver` is on.
pub(super) async fn archiver(shared: Arc<Shared>, cancel: CancellationToken) {
    supervise(shared, cancel, "archiver", |config, token| async move {
        if config.archive.is_none() || !config.serve.archiver {
            token.cancelled().await;
            return Ok(());
        }
        let dest = db::connect(&config.destination, Role::Destination).await?;
        loop {
            if lock::try_acquire(&dest, "archiver").await? {
                break;
            }
            tokio::select! {
                _ = token.cancelled() => return Ok(()),
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
        }
        tracing::info!("archiving the source's WAL");
        archiver::archive(&config, &ArchiveOptions::default(), &token).await?;
        Ok(())
    })
    .await
}

/// Retires the versions beyond `[serve] keep_versions` of every target.
pub(super) async fn retire_old(config: Arc<Config>) {
    let dest = match db::connect(&config.destination, Role::Destination).await {
        Ok(dest) => dest,
        Err(_) => return,
    };
    for target in &config.targets {
        let old =
            match super::leader::to_retire(&dest, &target.name, config.serve.keep_versions).await {
                Ok(old) => old,
                Err(e) => {
                    tracing::warn!(error = %e.describe(), "cannot read the versions to retire");
                    return;
                }
            };
        for version in old {
            match crate::retire::retire_version(&config, &target.name, &version).await {
                Ok(done) => tracing::info!(target = %target.name, %version, "{done}"),
                Err(e) => tracing::warn!(
                    target = %target.name,
                    %version,
                    error = %e.describe(),
                    "cannot retire an old version yet"
                ),
            }
        }
    }
}
