//! The `walfill` command.

use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use walfill::cli::{Cli, Command};
use walfill::config::{self, Config};
use walfill::error::{Error, Result};
use walfill::{db, job, retire, setup, state, status, swap, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format, cli.verbose);
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Loads the configuration before any runtime exists, then runs the command.
fn try_main(cli: Cli) -> Result<()> {
    let config = config::load(&cli.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("walfill")
        .build()
        .map_err(|e| Error::State(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(run(cli.command, config))
}

async fn run(command: Command, config: Config) -> Result<()> {
    let cancel = CancellationToken::new();
    tokio::spawn(stop_on_signal(cancel.clone()));
    match command {
        Command::Setup => setup::setup(&config).await,
        Command::Backfill { target, no_swap } => {
            let options = job::BackfillOptions { no_swap };
            Box::pin(job::backfill(&config, &target, &options, &cancel)).await
        }
        Command::Status { json } => status::status(&config, json).await,
        Command::Swap { target, version } => {
            config.target(&target)?;
            let mut dest = db::connect(&config.destination, db::Role::Destination).await?;
            state::require(&dest).await?;
            let timeout = config.backfill.swap_lock_timeout_ms;
            swap::swap(&mut dest, &target, &version, timeout).await?;
            println!("{target} now shows version {version}");
            Ok(())
        }
        Command::Rollback { target } => {
            config.target(&target)?;
            let mut dest = db::connect(&config.destination, db::Role::Destination).await?;
            state::require(&dest).await?;
            let timeout = config.backfill.swap_lock_timeout_ms;
            let version = swap::rollback(&mut dest, &target, timeout).await?;
            println!("{target} now shows version {version} again");
            Ok(())
        }
        Command::Sync { targets, once } => {
            let options = job::SyncOptions { once };
            match job::sync(&config, &targets, &options, &cancel).await {
                Err(Error::Interrupted) => Ok(()),
                other => other,
            }
        }
        Command::Retire { target, version } => {
            config.target(&target)?;
            retire::retire(&config, &target, &version).await
        }
    }
}

/// The first Ctrl-C or SIGTERM asks running work to stop at the next safe
/// point (position saved); a second one exits at once.
async fn stop_on_signal(cancel: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return,
    };
    for count in 0.. {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        if count > 0 {
            eprintln!("stopping now");
            std::process::exit(130);
        }
        tracing::warn!("stopping after the current batch (press Ctrl-C again to quit at once)");
        cancel.cancel();
    }
}
