//! `walfill backfill`, `swap` and `rollback`: building a target's new
//! version and choosing which version its view shows.

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::route::PathChoice;
use crate::control::{job, state};
use crate::db::{self, Role};
use crate::error::Result;

/// Builds a new version of `target` and (unless `no_swap`) publishes it.
pub async fn backfill(
    config: &Config,
    target: &str,
    no_swap: bool,
    path: PathChoice,
    cancel: &CancellationToken,
) -> Result<()> {
    let options = job::BackfillOptions {
        no_swap,
        path,
        verify_before_swap: None,
    };
    job::backfill(config, target, &options, cancel).await
}

/// Publishes `version` of `target`.
pub async fn swap(
    config: &Config,
    target: &str,
    version: &str,
    force: bool,
    cancel: &CancellationToken,
) -> Result<()> {
    config.target(target)?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    job::swap(config, &mut dest, target, version, force, cancel).await?;
    crate::say!("{target} now shows version {version}")?;
    Ok(())
}

/// Publishes the version `target` showed before.
pub async fn rollback(
    config: &Config,
    target: &str,
    force: bool,
    cancel: &CancellationToken,
) -> Result<()> {
    config.target(target)?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let version = job::rollback(config, &mut dest, target, force, cancel).await?;
    crate::say!("{target} now shows version {version} again")?;
    Ok(())
}
