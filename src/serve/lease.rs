//! The watcher beside a running job: it renews the request's lease and
//! watches the target's pause, and stops the job when it is paused or
//! another worker took the request over.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::state::requests::{self, Request};
use crate::db::{self, Role};

/// How often a running job looks whether its target was paused.
const PAUSE_CHECK: Duration = Duration::from_millis(250);

/// Why a job stopped before it was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// The target was paused.
    Paused,
    /// Another worker took the request over.
    LeaseLost,
}

/// Renews the request's lease and watches the target's pause; cancels the
/// job when it is paused or its lease was lost. Returns why it stopped it.
pub(super) async fn watch(
    config: Arc<Config>,
    request: Request,
    worker: String,
    lease: Duration,
    job: CancellationToken,
) -> Option<Stop> {
    let renew_every = lease / 3;
    let mut dest: Option<Client> = None;
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = job.cancelled() => return None,
            _ = tokio::time::sleep(PAUSE_CHECK) => {}
        }
        if dest.as_ref().is_none_or(|c| c.is_closed()) {
            dest = db::connect(&config.destination, Role::Destination)
                .await
                .ok();
        }
        let Some(client) = &dest else { continue };
        if let Ok(true) = requests::is_paused(client, &request.target).await {
            tracing::info!(request = request.id, target = %request.target, "paused; stopping the job");
            job.cancel();
            return Some(Stop::Paused);
        }
        if renewed.elapsed() >= renew_every {
            match requests::renew(client, request.id, &worker, lease).await {
                Ok(true) => renewed = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(
                        request = request.id,
                        "another worker took this request over (this one was cut off too \
                         long); stopping"
                    );
                    job.cancel();
                    return Some(Stop::LeaseLost);
                }
                Err(e) => tracing::warn!(error = %e.describe(), "cannot renew the request's lease"),
            }
        }
    }
}
