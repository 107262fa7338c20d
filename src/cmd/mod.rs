//! The commands: each takes what the command line gave, calls into the
//! control wing (or, for `decode` and `catalog`, straight into the pipeline
//! and the source), and prints what an operator needs to see.
//!
//! `main` parses the command line and loads the configuration; [`run`]
//! hands each command to its file here.

pub mod archive;
pub mod catalog;
pub mod dead_letters;
pub mod decode;
pub mod request;
pub mod setup;
pub mod sync;
pub mod version;

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::cli::Command;
use crate::config::Config;
use crate::control::{job, retire, route, status, verify};
use crate::error::{Error, Result};

/// Runs `command`; returns the exit code. `config` is `None` only for the
/// commands that can run without one (`decode --archive`, `catalog
/// --source`); `path` is where it was read from (read again on SIGHUP).
pub async fn run(
    command: Command,
    config: Option<Config>,
    path: &Path,
    cancel: &CancellationToken,
) -> Result<u8> {
    let config = match command {
        Command::Catalog { source } => {
            return catalog::catalog(source.as_deref(), config.as_ref()).await
        }
        Command::Decode(given) => return decode::command(given, config.as_ref()).await,
        _ => config.ok_or_else(|| Error::Internal("no configuration".into()))?,
    };
    match command {
        Command::Setup => setup::setup(&config).await?,
        Command::Teardown => setup::teardown(&config).await?,
        Command::Backfill {
            target,
            no_swap,
            path,
        } => Box::pin(version::backfill(&config, &target, no_swap, path, cancel)).await?,
        Command::Plan { target, json } => route::plan(&config, &target, json, cancel).await?,
        Command::Status { json } => status::status(&config, json).await?,
        Command::Swap {
            target,
            version,
            force,
        } => version::swap(&config, &target, &version, force, cancel).await?,
        Command::Rollback { target, force } => {
            version::rollback(&config, &target, force, cancel).await?
        }
        Command::Verify { target, version } => {
            verify::verify(&config, &target, version, cancel).await?
        }
        Command::Retire { target, version } => {
            config.target(&target)?;
            retire::retire(&config, &target, &version).await?
        }
        Command::Compact { targets, .. } => {
            for c in job::compact(&config, &targets, cancel).await? {
                crate::say!("{}: {}", c.table, c.note)?;
            }
        }
        Command::DeadLetters {
            target,
            version,
            retry,
            json,
        } => dead_letters::dead_letters(&config, &target, version, retry, json).await?,
        Command::Sync { targets, once } => sync::sync(path, config, &targets, once, cancel).await?,
        Command::Archive {
            slot, drop_slot, ..
        } if drop_slot => archive::drop_slot(&config, slot.as_deref()).await?,
        Command::Archive {
            slot,
            flush_interval,
            once_until_lsn,
            ..
        } => archive::archive(&config, slot, flush_interval, once_until_lsn, cancel).await?,
        Command::WalPush { path } => {
            crate::archiver::wal_push(&config, &path).await?;
        }
        Command::Serve { listen } => {
            let path = config.path.clone();
            let options = crate::serve::ServeOptions { listen };
            Box::pin(crate::serve::serve(path, config, options, cancel)).await?;
        }
        command @ (Command::Request { .. }
        | Command::Cancel { .. }
        | Command::Pause { .. }
        | Command::Resume { .. }) => request::command(&config, command).await?,
        Command::Decode(_) | Command::Catalog { .. } => unreachable!("handled above"),
    }
    Ok(0)
}
