//! Creating a logical slot waits for every transaction running on the
//! source that holds a transaction id: an idle-in-transaction session
//! blocks it for as long as it lives. While it waits, the sessions it
//! waits for are named (pid, user, application, state, age) in the log and
//! in the version's state, which `status` shows.

use std::time::Duration;

use tokio_postgres::Client;
use walfill_snapshot::Boundary;

use crate::error::{Error, Result};

/// How long the creation may wait before the sessions are named, and how
/// often they are named again.
const NAME_AFTER: Duration = Duration::from_secs(3);

/// What a version's slot is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Exported {
    /// A snapshot at its consistent point, for a copy.
    Snapshot,
    /// Nothing: a replay reads the archive up to the consistent point.
    Nothing,
}

/// Creates `state`'s version's slot `slot`, naming the sessions it waits
/// for meanwhile (see [`create_naming_blockers`]).
pub(super) async fn create_slot(
    cx: &super::Context<'_>,
    dest: &Client,
    state: &crate::control::state::VersionState,
    slot: &str,
    exported: Exported,
) -> Result<Boundary> {
    tracing::info!(%slot, "creating the slot; this waits for running source transactions");
    let (url, slot) = (
        crate::db::replication_url(&cx.config.source),
        slot.to_string(),
    );
    create_naming_blockers(
        cx.source,
        dest,
        (&state.target, &state.version),
        move || match exported {
            Exported::Snapshot => Boundary::create(&url, &slot, false),
            Exported::Nothing => Boundary::create_without_snapshot(&url, &slot),
        },
    )
    .await
}

/// Runs `create` (which blocks until the slot exists) on a thread of its
/// own; meanwhile names the sessions it waits for on `source`, in the log
/// and as the state's `throttled` of `target`'s `version` in `dest`.
async fn create_naming_blockers(
    source: &Client,
    dest: &Client,
    (target, version): (&str, &str),
    create: impl FnOnce() -> std::result::Result<Boundary, walfill_snapshot::SnapshotError>
        + Send
        + 'static,
) -> Result<Boundary> {
    let started: String = source
        .query_one("SELECT now()::text", &[])
        .await
        .map_err(|e| Error::source_query("reading the source's clock", e))?
        .get(0);
    let creating = tokio::task::spawn_blocking(create);
    tokio::pin!(creating);
    let mut named = false;
    let made = loop {
        tokio::select! {
            made = &mut creating => break made,
            _ = tokio::time::sleep(NAME_AFTER) => {}
        }
        let blockers = blockers(source, &started).await?;
        if blockers.is_empty() {
            continue;
        }
        let why = format!(
            "creating its slot waits for these source transactions to end (end or cancel \
             them, e.g. SELECT pg_terminate_backend(PID)): {}",
            blockers.join("; ")
        );
        tracing::warn!(%target, %version, "{why}");
        set_waiting(dest, target, version, Some(&why)).await;
        named = true;
    };
    if named {
        set_waiting(dest, target, version, None).await;
    }
    made.map_err(|e| Error::Internal(format!("the slot's creation stopped: {e}")))?
        .map_err(Error::from)
}

/// Sessions with a transaction id that began before `started`.
async fn blockers(source: &Client, started: &str) -> Result<Vec<String>> {
    let rows = source
        .query(
            "SELECT format('pid %s (user %s, application %L, %s, open %s s)', pid, usename,
                           application_name, coalesce(state, '?'),
                           extract(epoch FROM now() - xact_start)::bigint)
               FROM pg_stat_activity
              WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
                AND xact_start < $1::text::timestamptz
              ORDER BY xact_start",
            &[&started],
        )
        .await
        .map_err(|e| Error::source_query("looking for the transactions the slot waits for", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

async fn set_waiting(dest: &Client, target: &str, version: &str, why: Option<&str>) {
    let _ = dest
        .execute(
            "UPDATE walfill.versions SET throttled = $3 WHERE target = $1 AND version = $2",
            &[&target, &version, &why],
        )
        .await;
}
