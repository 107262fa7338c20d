//! `walfill dead-letters`: the rows of a version whose transform failed,
//! and applying them again once the cause is fixed (a function the
//! transform calls, a setting, a lookup the destination holds).
//!
//! A dead letter keeps the source row as the transform read it and the
//! version of its change, so applying it again needs no read of the
//! source: the row is stored at its own version, and only where what the
//! version holds for its key is the tombstone it left (or an older one, or
//! nothing). A newer change of the key, stored meanwhile, wins, as every
//! change does; a TRUNCATE after it makes it obsolete. The letters go
//! through the apply loop like any history (see
//! [`crate::pipeline::source::letters`]), with a durable cursor.

use serde::Serialize;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::control::state::{self, LetterProgress, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::apply::{self, Store};
use crate::pipeline::source::letters::LetterSource;

/// One dead letter.
#[derive(Debug, Serialize)]
pub struct DeadLetter {
    /// The key's values, as text.
    pub key: Vec<String>,
    /// The version of the change: commit LSN and position.
    pub lsn: String,
    /// Position of the change in its transaction.
    pub seq: i32,
    /// The transform's error.
    pub error: String,
    /// When it was set aside (last).
    pub created_at: String,
    /// How many times it failed.
    pub attempts: i32,
}

/// Lists the dead letters of `version` (default: the active one) of
/// `target`, or applies them again with `retry`.
pub async fn dead_letters(
    config: &Config,
    target: &str,
    version: Option<String>,
    retry: bool,
    json: bool,
) -> Result<()> {
    config.target(target)?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let version = state::version_or_active(&dest, target, version).await?;
    if retry {
        let (applied, failing, obsolete) = retry_all(&mut dest, config, target, &version).await?;
        crate::say!(
            "version {version} of {target}: {applied} dead letter(s) applied, {failing} still \
             failing{}",
            if obsolete > 0 {
                format!(", {obsolete} dropped (a later TRUNCATE removed their rows)")
            } else {
                String::new()
            }
        )?;
        return Ok(());
    }
    let letters = list(&dest, target, &version).await?;
    if json {
        let text = serde_json::to_string_pretty(&letters).unwrap_or_else(|_| "[]".into());
        crate::say!("{text}")?;
        return Ok(());
    }
    if letters.is_empty() {
        crate::say!("version {version} of {target} has no dead letters")?;
        return Ok(());
    }
    crate::say!(
        "{:<24} {:<22} {:>8}  ERROR",
        "KEY",
        "VERSION (LSN/SEQ)",
        "ATTEMPTS"
    )?;
    for d in &letters {
        crate::say!(
            "{:<24} {:<22} {:>8}  {}",
            d.key.join(", "),
            format!("{}/{}", d.lsn, d.seq),
            d.attempts,
            d.error
        )?;
    }
    Ok(())
}

async fn list(
    dest: &tokio_postgres::Client,
    target: &str,
    version: &str,
) -> Result<Vec<DeadLetter>> {
    let rows = dest
        .query(
            "SELECT key, lsn::text, seq, error, created_at::text, attempts
               FROM walfill.dead_letters WHERE target = $1 AND version = $2 ORDER BY lsn, seq",
            &[&target, &version],
        )
        .await
        .map_err(|e| Error::destination("reading the dead letters", e))?;
    Ok(rows
        .iter()
        .map(|r| DeadLetter {
            key: r.get(0),
            lsn: r.get(1),
            seq: r.get(2),
            error: r.get(3),
            created_at: r.get(4),
            attempts: r.get(5),
        })
        .collect())
}

/// Applies every dead letter of the version again, through the apply
/// loop, a page of letters per transaction, going on after the last letter
/// a stopped retry settled; returns how many were applied, still fail, and
/// were dropped (a later TRUNCATE removed their rows).
async fn retry_all(
    dest: &mut tokio_postgres::Client,
    config: &Config,
    target: &str,
    version: &str,
) -> Result<(u64, u64, u64)> {
    let v = VersionState::load_existing(&*dest, target, version).await?;
    let plan = v.plan(&*dest).await?;
    let mut progress = LetterProgress::begin(&*dest, target, version).await?;
    if let Some((lsn, seq, key)) = &progress.after {
        tracing::info!(
            target,
            version,
            after = %format!("{lsn}/{seq} key {}", key.join(",")),
            "resuming the retry after the last letter an earlier one settled"
        );
    }
    let reader = db::connect(&config.destination, Role::Destination).await?;
    let mut letters = LetterSource::open(reader, target, version, progress.after.clone()).await?;
    let store = Store::shared(plan);
    let applied = apply::run(
        &mut *dest,
        &store,
        &mut progress,
        &mut letters,
        &CancellationToken::new(),
        "letters",
    )
    .await?;
    progress.finish(&*dest).await?;
    let settled = u64::try_from(applied.changes).unwrap_or(0);
    let tried_again = settled - applied.dropped;
    Ok((
        tried_again - applied.set_aside,
        applied.set_aside,
        applied.dropped,
    ))
}
