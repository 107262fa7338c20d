//! The service's long-running parts that are not requests: the live sync of
//! built versions, the archiver, and the retirement of old versions. Each
//! restarts with the configuration after a reload, and after a failure
//! with a pause.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use walfill_replay::archive::Layout;

use crate::archiver::{self, ArchiveOptions};
use crate::config::{ArchiverSetting, Config};
use crate::control::job::{self, SyncOptions};
use crate::control::state::lock;
use crate::db::{self, Role};
use crate::error::Error;

/// Longest pause before a failed part is started again.
const MAX_RESTART_WAIT: Duration = Duration::from_secs(60);

/// Runs `part` with the configuration in force until `cancel`: again with
/// the new configuration after a reload, and after a pause when it fails.
async fn supervise<F, Fut>(
    shared: Arc<Shared>,
    cancel: CancellationToken,
    what: &'static str,
    part: F,
) where
    F: Fn(Arc<Config>, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mut config_rx = shared.config.clone();
    let mut wait = Duration::from_secs(1);
    while !cancel.is_cancelled() {
        let config = config_rx.borrow_and_update().clone();
        let token = cancel.child_token();
        let started = std::time::Instant::now();
        let run = part(config, token.clone());
        tokio::pin!(run);
        let reloaded = tokio::select! {
            result = &mut run => {
                match result {
                    Ok(()) | Err(Error::Interrupted) => {
                        wait = Duration::from_secs(1);
                        if let Ok(mut health) = shared.health.lock() {
                            health.parts.remove(what);
                        }
                    }
                    Err(e) => {
                        tracing::error!(part = what, error = %e.describe(), retry_in = wait.as_secs(), "failed; starting it again");
                        failed(&shared, what, started.elapsed(), e.describe());
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

/// Books a failure of `what` after it ran for `ran`: one that ran longer
/// than the longest pause had recovered, and counts as the first again.
fn failed(shared: &Shared, what: &'static str, ran: Duration, error: String) {
    let Ok(mut health) = shared.health.lock() else {
        return;
    };
    let entry = health.parts.entry(what).or_insert(super::PartFailures {
        in_a_row: 0,
        last_error: String::new(),
        at: std::time::Instant::now(),
    });
    if ran > MAX_RESTART_WAIT * 2 {
        entry.in_a_row = 0;
    }
    entry.in_a_row += 1;
    entry.last_error = error;
    entry.at = std::time::Instant::now();
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
        if let Some(off) = archiver_off(&config).await? {
            tracing::info!("the archiver stays off: {off}");
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

/// Why the archiver stays off under `config`, if it does: no archive,
/// `[serve] archiver = false`, or (`"auto"`) an archive another tool fills.
/// `archiver = true` over such an archive is an error of the
/// configuration, with its fix.
pub(super) async fn archiver_off(config: &Config) -> Result<Option<String>, Error> {
    let Some(url) = config.archive.as_deref() else {
        return Ok(Some("no [archive] url is configured".into()));
    };
    if config.serve.archiver == ArchiverSetting::Off {
        return Ok(Some("[serve] archiver = false".into()));
    }
    let layout = config.open_archive(url)?.layout().await?;
    if layout == Layout::Walfill {
        return Ok(None);
    }
    let why = format!(
        "archive {url} has the {layout} layout: another tool fills it (an archive_command, \
         pgBackRest, WAL-G) and walfill only reads it"
    );
    match config.serve.archiver {
        ArchiverSetting::On => Err(Error::refused(
            format!("[serve] archiver = true, but {why}"),
            "set `archiver = \"auto\"` (the default) or false and keep that tool archiving, \
             or point [archive] url at an empty location for walfill to archive into in its \
             own layout",
        )),
        _ => Ok(Some(format!("{why} ([serve] archiver = \"auto\")"))),
    }
}
