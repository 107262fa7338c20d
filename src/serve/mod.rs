//! `walfill serve`: the backfill service.
//!
//! One process (or several, on the same state database) runs the whole
//! configuration:
//!
//! - every built version follows the live stream ([`crate::control::job::sync`]);
//!   each version is followed by the one process holding its lock;
//! - the archiver streams WAL into `[archive]` (in the one process
//!   holding its lock), unless `[serve] archiver = false`;
//! - backfills run as requests ([`requests`]): made by the CLI, SQL
//!   (`walfill.request_backfill`), HTTP, a schedule, a configuration change
//!   or a lost version; claimed one at a time under a lease;
//! - one process leads ([`leader`]): it turns the configuration, the
//!   schedules and lost versions into requests, and retires old versions.
//!
//! A request wakes every service at once (LISTEN/NOTIFY on channel
//! `walfill`); each also looks every `poll_seconds`. SIGTERM or Ctrl-C
//! stops at the next safe point (jobs resume on the next start); SIGHUP
//! reloads the configuration.

mod compactor;
mod cutover;
mod history;
mod http;
mod jobs;
pub mod leader;
mod lease;
mod listen;
mod metrics;
pub mod schedule;
mod supervise;
mod tidy;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{self, Config};
use crate::control::state;
use crate::db::{self, Role};
use crate::error::{Error, Result};

/// Backfills one process runs at the same time.
const JOBS_PER_PROCESS: usize = 2;
/// Failed looks at the state database in a row before `/health` says so.
const UNHEALTHY_AFTER: u32 = 3;

/// How `serve` runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where the HTTP endpoints listen (overrides `[serve] listen`).
    pub listen: Option<SocketAddr>,
}

/// What the parts of the service share.
pub(crate) struct Shared {
    /// The configuration in force (replaced on SIGHUP).
    pub config: watch::Receiver<Arc<Config>>,
    /// This process's name among the workers.
    pub worker: String,
    /// Wakes the main loop.
    pub wake: Notify,
    /// The service's own health.
    pub health: Mutex<Health>,
    /// Slots seen unowned while this process leads ([`tidy`]).
    pub orphans: tidy::Orphans,
    /// The last hour of figures for the page's plots ([`history`]).
    pub history: Arc<Mutex<history::History>>,
}

/// The service's own health: failed looks at its state in a row, and
/// the parts of the process that fail again and again.
#[derive(Debug, Default)]
pub(crate) struct Health {
    pub failures: u32,
    pub last_error: Option<String>,
    pub leader: bool,
    /// By part (`sync`, `archiver`): failures in quick succession.
    pub parts: std::collections::BTreeMap<&'static str, PartFailures>,
}

/// A part's failures that came in quick succession (see
/// [`supervise`]), and the last one.
#[derive(Debug)]
pub(crate) struct PartFailures {
    pub in_a_row: u32,
    pub last_error: String,
    pub at: std::time::Instant,
}

/// Failures in a row after which a part makes the process not ready.
const PART_NOT_READY_AFTER: u32 = 3;
/// How long a part that failed that often counts as failing after its
/// last failure.
const PART_FAILING_FOR: Duration = Duration::from_secs(180);

impl Shared {
    pub(crate) fn config(&self) -> Arc<Config> {
        self.config.borrow().clone()
    }

    /// The parts of this process that keep failing, each with its last
    /// error.
    pub(crate) fn failing_parts(&self) -> Vec<String> {
        let Ok(health) = self.health.lock() else {
            return Vec::new();
        };
        health
            .parts
            .iter()
            .filter(|(_, f)| {
                f.in_a_row >= PART_NOT_READY_AFTER && f.at.elapsed() < PART_FAILING_FOR
            })
            .map(|(part, f)| {
                format!(
                    "the {part} of this process failed {} times in a row; last: {}",
                    f.in_a_row, f.last_error
                )
            })
            .collect()
    }

    /// Why the service is unhealthy, if it is.
    pub(crate) fn unhealthy(&self) -> Option<String> {
        let health = self.health.lock().ok()?;
        (health.failures >= UNHEALTHY_AFTER).then(|| {
            format!(
                "{} looks at the state database failed in a row; last: {}",
                health.failures,
                health.last_error.as_deref().unwrap_or("?")
            )
        })
    }
}

/// Runs the service until `cancel`.
pub async fn serve(
    path: PathBuf,
    config: Config,
    options: ServeOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    // The state schema may be older than this walfill: bring it up to date.
    state::install(&dest).await?;
    // `[serve] archiver = true` over an archive another tool fills is
    // refused now, not failed on again and again.
    // (An archive that cannot be read now is the archiver's to retry.)
    if let Err(e @ Error::Refused(_)) = supervise::archiver_off(&config).await {
        return Err(e);
    }
    let worker = worker_name();
    let listen = options.listen.or(config.serve.listen);
    for token in &config.serve.tokens {
        http::secret(token)?;
    }
    if let Some(addr) = listen.filter(|a| !a.ip().is_loopback()) {
        if config.serve.tokens.is_empty() {
            return Err(Error::refused(
                format!(
                    "listening on {addr}, beyond this host, needs tokens: anyone who reaches the \
                     port could request rebuilds and pause targets"
                ),
                "declare [[serve.tokens]] (name, access = \"read\" or \"write\", secret_env = \
                 the variable holding its secret), or listen on 127.0.0.1",
            ));
        }
    }
    // The certificate and key are read now: a bad one stops the start.
    let tls = match (&config.serve.tls, listen) {
        (Some(files), Some(_)) => Some(tls::acceptor(files)?),
        _ => None,
    };
    register(&dest, &worker, listen).await?;
    let (config_tx, config_rx) = watch::channel(Arc::new(config));
    let shared = Arc::new(Shared {
        config: config_rx,
        worker: worker.clone(),
        wake: Notify::new(),
        health: Mutex::new(Health::default()),
        orphans: Default::default(),
        history: Default::default(),
    });
    tracing::info!(%worker, listen = ?listen, "walfill serve started");

    let mut background = JoinSet::new();
    background.spawn(listen::run(shared.clone(), cancel.clone()));
    background.spawn(supervise::sync(shared.clone(), cancel.clone()));
    background.spawn(supervise::archiver(shared.clone(), cancel.clone()));
    background.spawn(compactor::run(shared.clone(), cancel.clone()));
    if let Some(addr) = listen {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::refused(
                format!("cannot listen on {addr}: {e}"),
                "pick another address with --listen",
            )
        })?;
        tracing::info!(
            %addr,
            scheme = if tls.is_some() { "https" } else { "http" },
            "serving the HTTP endpoints"
        );
        background.spawn(http::run(listener, tls, shared.clone(), cancel.clone()));
        background.spawn(history::sample(
            shared.clone(),
            shared.history.clone(),
            cancel.clone(),
        ));
    }
    spawn_reload(path, config_tx, shared.clone(), cancel.clone());

    let result = main_loop(&shared, cancel).await;
    cancel.cancel();
    while background.join_next().await.is_some() {}
    if let Ok(dest) = db::connect(&shared.config().destination, Role::Destination).await {
        leader::let_go(&dest, &worker).await;
        let _ = dest
            .execute("DELETE FROM walfill.workers WHERE id = $1", &[&worker])
            .await;
    }
    tracing::info!(%worker, "walfill serve stopped");
    result
}

/// `host:pid:random`: unique among the workers, and says where it runs.
fn worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}:{}:{:04x}", std::process::id(), nonce & 0xffff)
}

async fn register(
    dest: &tokio_postgres::Client,
    worker: &str,
    listen: Option<SocketAddr>,
) -> Result<()> {
    let host = worker.split(':').next().unwrap_or("");
    let listen = listen.map(|a| a.to_string());
    dest.execute(
        "INSERT INTO walfill.workers (id, host, pid, listen) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE SET seen_at = now()",
        &[&worker, &host, &(std::process::id() as i32), &listen],
    )
    .await
    .map_err(|e| Error::destination("registering the worker", e))?;
    Ok(())
}

/// Reloads the configuration on SIGHUP; a file that does not load is
/// reported and the running configuration kept.
fn spawn_reload(
    path: PathBuf,
    config_tx: watch::Sender<Arc<Config>>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot catch SIGHUP; reloading the configuration needs a restart");
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = hangup.recv() => {}
            }
            match config::load(&path) {
                Ok(config) => {
                    tracing::info!(file = %path.display(), targets = config.targets.len(), "configuration reloaded");
                    let _ = config_tx.send(Arc::new(config));
                    shared.wake.notify_one();
                }
                Err(e) => tracing::error!(
                    error = %e,
                    "the configuration was not reloaded; the running one stays in force"
                ),
            }
        }
    });
}

/// Looks at the state when woken or every `poll_seconds`: leads if it can,
/// and claims requests while it has room for jobs.
async fn main_loop(shared: &Arc<Shared>, cancel: &CancellationToken) -> Result<()> {
    let mut jobs: JoinSet<()> = JoinSet::new();
    let mut retiring: Option<tokio::task::JoinHandle<()>> = None;
    let mut swapping: Option<tokio::task::JoinHandle<()>> = None;
    let mut dest: Option<tokio_postgres::Client> = None;
    loop {
        let config = shared.config();
        let poll = Duration::from_secs(u64::from(config.serve.poll_seconds));
        let chores = (&mut retiring, &mut swapping);
        match look(shared, &config, &mut dest, &mut jobs, chores, cancel).await {
            Ok(()) => {
                if let Ok(mut h) = shared.health.lock() {
                    h.failures = 0;
                }
            }
            Err(e) => {
                dest = None;
                tracing::error!(error = %e.describe(), "cannot look at the state; trying again");
                if let Ok(mut h) = shared.health.lock() {
                    h.failures += 1;
                    h.last_error = Some(e.describe());
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = shared.wake.notified() => {}
            Some(_) = jobs.join_next(), if !jobs.is_empty() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
    // Jobs stop at their next safe point and queue their requests again.
    while jobs.join_next().await.is_some() {}
    if let Some(task) = retiring {
        task.abort();
    }
    if let Some(task) = swapping {
        let _ = task.await;
    }
    Ok(())
}

async fn look(
    shared: &Arc<Shared>,
    config: &Arc<Config>,
    dest: &mut Option<tokio_postgres::Client>,
    jobs: &mut JoinSet<()>,
    (retiring, swapping): (
        &mut Option<tokio::task::JoinHandle<()>>,
        &mut Option<tokio::task::JoinHandle<()>>,
    ),
    cancel: &CancellationToken,
) -> Result<()> {
    if dest.as_ref().is_none_or(|c| c.is_closed()) {
        *dest = Some(db::connect(&config.destination, Role::Destination).await?);
    }
    let Some(client) = dest.as_mut() else {
        return Ok(());
    };
    let lease = Duration::from_secs(u64::from(config.serve.lease_seconds));
    client
        .execute(
            "UPDATE walfill.workers SET seen_at = now() WHERE id = $1",
            &[&shared.worker],
        )
        .await
        .map_err(|e| Error::destination("recording the worker's heartbeat", e))?;
    let leading = leader::hold(client, &shared.worker, lease).await?;
    let was = shared
        .health
        .lock()
        .map(|mut h| std::mem::replace(&mut h.leader, leading))
        .unwrap_or(leading);
    if leading != was {
        tracing::info!(worker = %shared.worker, leading, "lead changed");
    }
    if leading {
        let clock = schedule::Clock::from_env();
        if let Err(e) = leader::duties(config, client, &clock).await {
            tracing::error!(error = %e.describe(), "the leader's duties failed; trying again");
        }
        if retiring.as_ref().is_none_or(|t| t.is_finished()) {
            *retiring = Some(tokio::spawn(tidy::tidy(
                config.clone(),
                shared.orphans.clone(),
            )));
        }
        if swapping.as_ref().is_none_or(|t| t.is_finished()) {
            *swapping = Some(tokio::spawn(cutover::planned_swaps(
                config.clone(),
                cancel.child_token(),
            )));
        }
    }
    while jobs.len() < JOBS_PER_PROCESS && !cancel.is_cancelled() {
        let Some(request) = state::requests::claim(&*client, &shared.worker, lease).await? else {
            break;
        };
        tracing::info!(
            request = request.id,
            target = %request.target,
            origin = %request.origin,
            attempt = request.attempts,
            "claimed a request"
        );
        let retry = Duration::from_secs(u64::from(config.serve.retry_seconds));
        let span = tracing::info_span!("job", request = request.id, target = %request.target);
        jobs.spawn(
            jobs::run(
                config.clone(),
                request,
                shared.worker.clone(),
                retry,
                cancel.child_token(),
            )
            .instrument(span),
        );
    }
    Ok(())
}
