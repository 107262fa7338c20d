//! `walfill sync`: keep the targets' versions in step with the source's
//! stream, once or until stopped.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::config::{self, Config};
use crate::control::job;
use crate::error::{Error, Result};

/// Applies the stream to the targets' versions: until they have caught up
/// (`once`), or until cancelled, with the configuration read again on
/// SIGHUP.
pub async fn sync(
    path: &Path,
    config: Config,
    targets: &[String],
    once: bool,
    cancel: &CancellationToken,
) -> Result<()> {
    let options = job::SyncOptions {
        once,
        shared: false,
    };
    let synced = match once {
        true => job::sync(&config, targets, &options, cancel).await,
        false => sync_reloading(path, config, targets, &options, cancel).await,
    };
    match synced {
        Err(Error::Interrupted) | Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `walfill sync` until stopped, with the configuration at `path` read
/// again on SIGHUP (as `serve` does): the versions of targets added since
/// are followed from then on. A file that does not load, or that lacks a
/// target named on the command line, is reported and the running
/// configuration kept.
async fn sync_reloading(
    path: &Path,
    mut config: Config,
    targets: &[String],
    options: &job::SyncOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup())
        .map_err(|e| Error::Internal(format!("cannot catch SIGHUP: {e}")))?;
    loop {
        let reloaded = {
            let run = cancel.child_token();
            let sync = job::sync(&config, targets, options, &run);
            tokio::pin!(sync);
            let reloaded = loop {
                tokio::select! {
                    result = &mut sync => return result,
                    _ = hangup.recv() => {}
                }
                match config::load(path) {
                    Ok(new) => match new.select_targets(targets) {
                        Ok(_) => break new,
                        Err(e) => tracing::error!(
                            error = %e,
                            "the configuration was not reloaded; the running one stays in force"
                        ),
                    },
                    Err(e) => tracing::error!(
                        error = %e,
                        "the configuration was not reloaded; the running one stays in force"
                    ),
                }
            };
            tracing::info!(
                file = %path.display(),
                targets = reloaded.targets.len(),
                "configuration reloaded; following its versions"
            );
            run.cancel();
            match sync.await {
                Ok(()) | Err(Error::Interrupted) => {}
                Err(e) => tracing::error!(error = %e.describe(), "sync stopped before the reload"),
            }
            reloaded
        };
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        config = reloaded;
    }
}
