//! `walfill backfill`, `swap` and `rollback`: building a target's new
//! version and choosing which version its view shows.

use tokio_postgres::Client;
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
    let mut dest = state_session(config, target).await?;
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
    let mut dest = state_session(config, target).await?;
    let version = job::rollback(config, &mut dest, target, force, cancel).await?;
    crate::say!("{target} now shows version {version} again")?;
    Ok(())
}

/// A session on the destination, whose state schema is in place, for a
/// configured `target`.
async fn state_session(config: &Config, target: &str) -> Result<Client> {
    config.target(target)?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    Ok(dest)
}
