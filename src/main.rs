//! The `walfill` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use walfill::cli::{Cli, Command};
use walfill::config::{self, Config};
use walfill::error::{Error, Result};
use walfill::{cmd, telemetry};

/// The memory allocator. glibc's keeps memory a thread freed for that
/// thread's arena: the apply's buffers, built and freed by whichever runtime
/// thread runs the task, would hold the memory bound several times over.
/// Built without transparent huge pages (`no_thp`): a 2 MiB page backs
/// itself whole when one byte of it is touched.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's option enum (the same in its
/// versions 2 and 3), which the `extended` bindings do not name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory the process frees goes back to the system at once, not after
/// mimalloc's default delay of a second. A sync applying a 300k-row
/// transaction in 1 MiB batches peaked 25-40 MiB above a one-row run
/// with the delay and huge pages, 4-5 MiB without; the 1M-row replay of
/// `scripts/bench-rebuild.sh` peaked at 150 MiB instead of 235, in 3.89 s
/// instead of 3.75.
#[allow(unsafe_code)]
fn return_freed_memory_at_once() {
    // SAFETY: called first thing in `main`, before any other thread
    // exists (mimalloc's option setter is not thread safe).
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    let cli = Cli::parse();
    let format = cli.log_format;
    telemetry::init(format, cli.verbose);
    match try_main(cli) {
        Ok(code) => ExitCode::from(code),
        // The reader of stdout went away (`| head`): nothing to say.
        Err(e) if walfill::output::is_closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            telemetry::report_error(format, &e.describe(), e.exit_code());
            ExitCode::from(e.exit_code())
        }
    }
}

/// Loads the configuration (when the command needs it) before any runtime
/// exists, then runs the command; returns the exit code.
fn try_main(cli: Cli) -> Result<u8> {
    let needs_config = match &cli.command {
        Command::Decode(given) if given.archive.is_some() => {
            given.source.is_none() && given.catalog.is_none()
        }
        Command::Catalog { source: Some(_) } => false,
        _ => true,
    };
    let config = if needs_config {
        Some(config::load(&cli.config)?)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("walfill")
        .build()
        .map_err(|e| Error::Internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(run(cli.command, config, cli.config))
}

async fn run(command: Command, config: Option<Config>, path: PathBuf) -> Result<u8> {
    let cancel = CancellationToken::new();
    tokio::spawn(stop_on_signal(cancel.clone()));
    cmd::run(command, config, &path, &cancel).await
}

/// The first Ctrl-C or SIGTERM asks running work to stop at the next safe
/// point (position saved); a second one exits at once.
async fn stop_on_signal(cancel: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return,
    };
    for count in 0.. {
        let interrupt = tokio::select! {
            _ = tokio::signal::ctrl_c() => true,
            _ = term.recv() => false,
        };
        if count > 0 {
            tracing::warn!("stopping now");
            std::process::exit(130);
        }
        if interrupt {
            tracing::warn!("stopping after the current batch (press Ctrl-C again to quit at once)");
        } else {
            tracing::warn!(
                "SIGTERM: stopping after the current batch (a second signal quits at once)"
            );
        }
        cancel.cancel();
    }
}
