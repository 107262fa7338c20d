//! The `walfill` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use walfill::cli::{Cli, Command};
use walfill::config::{self, Config, PgUrl};
use walfill::error::{Error, Result};
use walfill::{
    archiver, db, decode, job, journal, planner, retire, setup, state, status, telemetry,
};

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
        Command::Decode {
            archive: Some(_),
            source,
            catalog,
            ..
        } => source.is_none() && catalog.is_none(),
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
    if let Command::Catalog { source } = &command {
        let url = source_url(source.as_deref(), config.as_ref())?;
        let client = db::connect(&url, db::Role::Source).await?;
        let snapshot = walfill::catalog::load(&client).await?.snapshot();
        let text = serde_json::to_string_pretty(&snapshot)
            .map_err(|e| Error::Internal(format!("cannot print the catalog: {e}")))?;
        walfill::say!("{text}")?;
        return Ok(0);
    }
    if let Command::Decode {
        archive,
        layout,
        source,
        catalog,
        from,
        restart_from,
        to,
        table,
        exclude_schema,
        format,
        memory_limit,
        spill_dir,
    } = command
    {
        let configured = config.as_ref().filter(|_| archive.is_none());
        let layout = match layout {
            Some(layout) => layout.0,
            None => configured.and_then(|c| c.archive_settings.layout),
        };
        let archive = archive
            .or_else(|| config.as_ref().and_then(|c| c.archive.clone()))
            .ok_or_else(|| {
                Error::Request(
                    "no archive: give --archive URL or [archive] url in the configuration".into(),
                )
            })?;
        let catalog = match catalog {
            Some(path) => decode::CatalogSource::File(path),
            None => {
                decode::CatalogSource::Database(source_url(source.as_deref(), config.as_ref())?)
            }
        };
        let args = decode::DecodeArgs {
            archive,
            layout,
            catalog,
            from,
            restart_from,
            to,
            table,
            exclude_schemas: exclude_schema,
            format,
            memory_mb: memory_limit,
            spill_dir,
        };
        return decode::decode(args).await;
    }
    let config = config.ok_or_else(|| Error::Internal("no configuration".into()))?;
    match command {
        Command::Setup => setup::setup(&config).await?,
        Command::Teardown => {
            let source = db::connect(&config.source, db::Role::Source).await?;
            journal::uninstall(&source).await?;
            walfill::say!("catalog journal removed from {}", config.source)?;
            let (name, dropped) = archiver::drop_slot(&config, None).await?;
            if dropped != archiver::Dropped::Missing {
                walfill::say!("{}", archiver::describe_dropped_slot(&name, &dropped))?;
            }
        }
        Command::Backfill {
            target,
            no_swap,
            path,
        } => {
            let options = job::BackfillOptions {
                no_swap,
                path,
                verify_before_swap: None,
            };
            Box::pin(job::backfill(&config, &target, &options, &cancel)).await?
        }
        Command::Plan { target, json } => planner::plan(&config, &target, json, &cancel).await?,
        Command::Status { json } => status::status(&config, json).await?,
        Command::Swap {
            target,
            version,
            force,
        } => {
            config.target(&target)?;
            let mut dest = db::connect(&config.destination, db::Role::Destination).await?;
            state::require(&dest).await?;
            job::swap(&config, &mut dest, &target, &version, force, &cancel).await?;
            walfill::say!("{target} now shows version {version}")?;
        }
        Command::Rollback { target, force } => {
            config.target(&target)?;
            let mut dest = db::connect(&config.destination, db::Role::Destination).await?;
            state::require(&dest).await?;
            let version = job::rollback(&config, &mut dest, &target, force, &cancel).await?;
            walfill::say!("{target} now shows version {version} again")?;
        }
        Command::Sync { targets, once } => {
            let options = job::SyncOptions {
                once,
                shared: false,
            };
            let synced = match once {
                true => job::sync(&config, &targets, &options, &cancel).await,
                false => sync_reloading(&path, config, &targets, &options, &cancel).await,
            };
            match synced {
                Err(Error::Interrupted) | Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
        Command::Archive {
            slot, drop_slot, ..
        } if drop_slot => {
            let (name, dropped) = archiver::drop_slot(&config, slot.as_deref()).await?;
            walfill::say!("{}", archiver::describe_dropped_slot(&name, &dropped))?;
            if dropped == archiver::Dropped::InUse {
                return Err(walfill::error::Error::Busy(
                    archiver::describe_dropped_slot(&name, &dropped),
                ));
            }
        }
        Command::Archive {
            slot,
            flush_interval,
            once_until_lsn,
            ..
        } => {
            // Best effort: the archiver itself streams over replication.
            if let Ok(source) = db::connect(&config.source, db::Role::Source).await {
                journal::record_moved_files(&source).await;
            }
            let options = archiver::ArchiveOptions {
                slot,
                flush_interval: std::time::Duration::from_secs(flush_interval),
                until: once_until_lsn,
            };
            archiver::archive(&config, &options, &cancel).await?;
        }
        Command::WalPush { path } => {
            archiver::wal_push(&config, &path).await?;
        }
        Command::Compact { targets, .. } => {
            let done = walfill::job::compact(&config, &targets, &cancel).await?;
            for c in done {
                walfill::say!("{}: {}", c.table, c.note)?;
            }
        }
        Command::Retire { target, version } => {
            config.target(&target)?;
            retire::retire(&config, &target, &version).await?
        }
        Command::DeadLetters {
            target,
            version,
            retry,
            json,
        } => walfill::dead_letters::dead_letters(&config, &target, version, retry, json).await?,
        Command::Verify { target, version } => {
            walfill::verify::verify(&config, &target, version, &cancel).await?
        }
        Command::Serve { listen } => {
            let path = config.path.clone();
            let options = walfill::serve::ServeOptions { listen };
            Box::pin(walfill::serve::serve(path, config, options, &cancel)).await?;
        }
        Command::Request {
            target,
            scope,
            no_swap,
            swap_at,
            verify_before_swap,
            no_verify_before_swap,
            ..
        } => {
            config.target(&target)?;
            let dest = serve_state(&config).await?;
            let gate = walfill::state::requests::Gate {
                no_swap,
                swap_at,
                verify_before_swap: (verify_before_swap || no_verify_before_swap)
                    .then_some(verify_before_swap),
            };
            let id = walfill::state::requests::enqueue_by(
                &dest,
                &target,
                "cli",
                scope.as_deref(),
                None,
                &gate,
            )
            .await?;
            walfill::say!("{id}")?;
            tracing::info!(
                request = id,
                "queued; `walfill status` shows its state, `walfill cancel {id}` withdraws it"
            );
        }
        Command::Cancel { id } => {
            let dest = serve_state(&config).await?;
            let request = walfill::state::requests::cancel(&dest, id).await?;
            walfill::say!("request {id} for {} cancelled", request.target)?;
        }
        Command::Pause { target, .. } => {
            if let Some(t) = &target {
                config.target(t)?;
            }
            let dest = serve_state(&config).await?;
            walfill::state::requests::pause(&dest, target.as_deref()).await?;
            walfill::say!(
                "backfills of {} paused; `walfill resume` continues them",
                target.as_deref().unwrap_or("every target")
            )?;
        }
        Command::Resume { target, .. } => {
            if let Some(t) = &target {
                config.target(t)?;
            }
            let dest = serve_state(&config).await?;
            walfill::state::requests::resume(&dest, target.as_deref()).await?;
            walfill::say!(
                "backfills of {} resumed",
                target.as_deref().unwrap_or("every target")
            )?;
        }
        Command::Decode { .. } | Command::Catalog { .. } => unreachable!("handled above"),
    }
    Ok(0)
}

/// `--source`, or the configuration's source.
fn source_url(given: Option<&str>, config: Option<&Config>) -> Result<PgUrl> {
    match given {
        Some(url) => {
            PgUrl::parse(url, "--source").map_err(|m| Error::Request(format!("--source: {m}")))
        }
        None => config
            .map(|c| c.source.clone())
            .ok_or_else(|| Error::Request("no source: give --source URL".into())),
    }
}

/// The first Ctrl-C or SIGTERM asks running work to stop at the next safe
/// point (position saved); a second one exits at once.
/// A session on the destination whose state schema knows requests.
async fn serve_state(config: &Config) -> Result<tokio_postgres::Client> {
    let dest = db::connect(&config.destination, db::Role::Destination).await?;
    state::require(&dest).await?;
    let serving: bool = dest
        .query_one("SELECT to_regclass('walfill.requests') IS NOT NULL", &[])
        .await
        .map_err(|e| Error::destination("looking for walfill's state schema", e))?
        .get(0);
    if !serving {
        return Err(Error::Request(
            "the destination's state schema predates `walfill serve`; run `walfill setup` \
             again to add its tables"
                .into(),
        ));
    }
    Ok(dest)
}

/// `walfill sync` until stopped, with the configuration at `path` read
/// again on SIGHUP (as `serve` does): the versions of targets added since
/// are followed from then on. A file that does not load, or that lacks a
/// target named on the command line, is reported and the running
/// configuration kept.
async fn sync_reloading(
    path: &std::path::Path,
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
