//! `walfill request`, `cancel`, `pause` and `resume`: work queued for
//! `walfill serve` through the destination's state schema.

use crate::cli::Command;
use crate::config::Config;
use crate::control::state::{self, requests};
use crate::db::{self, Role};
use crate::error::{Error, Result};

/// Runs `request`, `cancel`, `pause` or `resume`.
pub async fn command(config: &Config, command: Command) -> Result<()> {
    match command {
        Command::Request {
            target,
            scope,
            no_swap,
            swap_at,
            verify_before_swap,
            no_verify_before_swap,
            ..
        } => {
            let verify =
                (verify_before_swap || no_verify_before_swap).then_some(verify_before_swap);
            let gate = requests::Gate {
                no_swap,
                swap_at,
                verify_before_swap: verify,
            };
            request(config, &target, scope.as_deref(), &gate).await
        }
        Command::Cancel { id } => cancel(config, id).await,
        Command::Pause { target, .. } => pause(config, target.as_deref()).await,
        Command::Resume { target, .. } => resume(config, target.as_deref()).await,
        _ => Err(Error::Internal("not a request command".into())),
    }
}

/// Queues a backfill of `target` (of the keys in `scope`, when given).
pub async fn request(
    config: &Config,
    target: &str,
    scope: Option<&str>,
    gate: &requests::Gate,
) -> Result<()> {
    config.target(target)?;
    let dest = serve_state(config).await?;
    let id = requests::enqueue_by(&dest, target, "cli", scope, None, gate).await?;
    crate::say!("{id}")?;
    tracing::info!(
        request = id,
        "queued; `walfill status` shows its state, `walfill cancel {id}` withdraws it"
    );
    Ok(())
}

/// Withdraws request `id`.
pub async fn cancel(config: &Config, id: i64) -> Result<()> {
    let dest = serve_state(config).await?;
    let request = requests::cancel(&dest, id).await?;
    crate::say!("request {id} for {} cancelled", request.target)?;
    Ok(())
}

/// Holds the backfills of `target` (of every target when `None`).
pub async fn pause(config: &Config, target: Option<&str>) -> Result<()> {
    if let Some(t) = target {
        config.target(t)?;
    }
    let dest = serve_state(config).await?;
    requests::pause(&dest, target).await?;
    crate::say!(
        "backfills of {} paused; `walfill resume` continues them",
        target.unwrap_or("every target")
    )?;
    Ok(())
}

/// Lets the backfills `pause` held go on.
pub async fn resume(config: &Config, target: Option<&str>) -> Result<()> {
    if let Some(t) = target {
        config.target(t)?;
    }
    let dest = serve_state(config).await?;
    requests::resume(&dest, target).await?;
    crate::say!("backfills of {} resumed", target.unwrap_or("every target"))?;
    Ok(())
}

/// A session on the destination whose state schema knows requests.
async fn serve_state(config: &Config) -> Result<tokio_postgres::Client> {
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let serving: bool = dest
        .query_one("SELECT to_regclass('walfill.requests') IS NOT NULL", &[])
        .await
        .map_err(|e| Error::destination("looking for walfill's state schema", e))?
        .get(0);
    if !serving {
        return Err(Error::refused(
            "the destination's state schema predates `walfill serve`",
            "run `walfill setup` again to add its tables",
        ));
    }
    Ok(dest)
}
