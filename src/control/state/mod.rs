//! walfill's state in the destination database, schema `walfill`.
//!
//! Every fact a rerun needs is here, written in the same destination
//! transaction as the work it describes: a chunk's rows and the copy cursor
//! after them; a batch of applied changes and the LSN after them; a view swap
//! and the record of which version is active.

mod cursor;
mod letters;
pub mod lock;
mod refresh;
pub mod requests;
mod transition;
mod version;

pub use letters::LetterProgress;
pub use refresh::RefreshProgress;
pub use transition::{retire_phase, swap_phases, FillStart};
pub use version::{NewVersion, Path, Phase, Stage, VersionState};

use tokio_postgres::{Client, GenericClient};

use crate::error::{Error, Result};

const SCHEMA_SQL: &str = include_str!("schema.sql");

/// Creates the state schema and its tables if they do not exist.
pub async fn install(client: &Client) -> Result<()> {
    client
        .batch_execute(SCHEMA_SQL)
        .await
        .map_err(|e| Error::destination("creating the state schema walfill", e))
}

/// Fails with the fix when `walfill setup` has not run on this destination.
pub async fn require(client: &impl GenericClient) -> Result<()> {
    let row = client
        .query_one(
            "SELECT to_regclass('walfill.versions') IS NOT NULL,
                    EXISTS (SELECT FROM pg_attribute
                             WHERE attrelid = to_regclass('walfill.requests')
                               AND attname = 'scope' AND NOT attisdropped)
                    AND to_regprocedure('walfill.chunk_sees(integer, bigint)') IS NOT NULL
                    AND EXISTS (SELECT FROM pg_attribute
                                 WHERE attrelid = to_regclass('walfill.targets')
                                   AND attname = 'stale' AND NOT attisdropped)
                    AND EXISTS (SELECT FROM pg_attribute
                                 WHERE attrelid = to_regclass('walfill.versions')
                                   AND attname = 'wal_read_bytes' AND NOT attisdropped)
                    AND EXISTS (SELECT FROM pg_attribute
                                 WHERE attrelid = to_regclass('walfill.requests')
                                   AND attname = 'tombstoned_keys' AND NOT attisdropped)
                    AND EXISTS (SELECT FROM pg_attribute
                                 WHERE attrelid = to_regclass('walfill.versions')
                                   AND attname = 'letters_retried_key' AND NOT attisdropped)",
            &[],
        )
        .await
        .map_err(|e| Error::destination("looking for walfill's state schema", e))?;
    let (present, current): (bool, bool) = (row.get(0), row.get(1));
    if present && !current {
        return Err(Error::refused(
            "the destination's state schema predates this walfill",
            "run `walfill setup` to bring it up to date",
        ));
    }
    if present {
        Ok(())
    } else {
        Err(Error::refused(
            "the destination has no walfill state schema",
            "run `walfill setup` first",
        ))
    }
}

/// Appends to the event record.
pub async fn record_event(
    client: &impl GenericClient,
    target: &str,
    version: Option<&str>,
    kind: &str,
    detail: serde_json::Value,
) -> Result<()> {
    client
        .execute(
            "INSERT INTO walfill.events (target, version, kind, detail) VALUES ($1, $2, $3, $4)",
            &[&target, &version, &kind, &detail],
        )
        .await
        .map_err(|e| Error::destination("recording an event", e))?;
    Ok(())
}

/// The active and previous versions of a target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetState {
    /// The version readers see.
    pub active: Option<String>,
    /// The version before it, kept for rollback.
    pub previous: Option<String>,
}

/// `version` if given, else the active version of `target` (an error that
/// says to name one when there is none).
pub async fn version_or_active(
    client: &impl GenericClient,
    target: &str,
    version: Option<String>,
) -> Result<String> {
    if let Some(v) = version {
        return Ok(v);
    }
    if let Some(active) = target_state(client, target).await?.active {
        return Ok(active);
    }
    // None published: the one version there is, or the choice.
    let versions: Vec<String> = client
        .query(
            "SELECT version FROM walfill.versions WHERE target = $1 AND phase <> 'retired'
              ORDER BY created_at, version",
            &[&target],
        )
        .await
        .map_err(|e| Error::destination("reading the target's versions", e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    match &versions[..] {
        [only] => Ok(only.clone()),
        [] => Err(Error::refused(
            format!("target {target} has no version"),
            format!("`walfill backfill {target}` builds one"),
        )),
        _ => Err(Error::refused(
            format!("target {target} has no active version"),
            format!("name one with --version: {}", versions.join(", ")),
        )),
    }
}

/// Reads which versions of `target` are active and previous.
pub async fn target_state(client: &impl GenericClient, target: &str) -> Result<TargetState> {
    let row = client
        .query_opt(
            "SELECT active_version, previous_version FROM walfill.targets WHERE target = $1",
            &[&target],
        )
        .await
        .map_err(|e| Error::destination("reading the target's state", e))?;
    Ok(row
        .map(|r| TargetState {
            active: r.get(0),
            previous: r.get(1),
        })
        .unwrap_or_default())
}
