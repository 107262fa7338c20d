//! A scoped refresh (`walfill request TARGET --where SQL`): the source rows
//! matching a condition copied again into the active version, in place,
//! while its live stream goes on writing it.
//!
//! The rows are read in keyset chunks under the exported snapshot of a
//! temporary slot, whose visibility is exactly "committed before its
//! consistent point C" (the snapshot builder makes it from the WAL). So
//! every copied row is versioned `(C, 0)` and stored by the usual rule: a
//! stream change committed before C is already in the row and loses to it,
//! one committed after C wins. Then every live key the source no longer
//! has (under the same snapshot) becomes a tombstone at `(C, 0)`, by the
//! same rule: batches of deletes through the apply loop, after the last
//! key an earlier attempt made one.
//!
//! Each chunk is stored against the version's TRUNCATE watermark as it is
//! when the chunk is stored (a TRUNCATE the stream applied since the refresh
//! began removes the chunk's older rows). One race is left to close: a
//! TRUNCATE applied by the stream between a chunk's reading of the
//! watermark and its commit would miss the chunk's new keys. So once every
//! chunk is stored, the refresh waits for the stream to pass a position
//! after its last commit, and deletes again what is older than the
//! watermark then.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::{Lsn, Version};
use walfill_snapshot::Boundary;

use crate::config::Config;
use crate::control::state::{self, RefreshProgress, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::apply::{self, Batch, Store, Writes};
use crate::pipeline::source::absent::AbsentKeys;
use crate::pipeline::source::copy::{CopySource, Pace, Snapshot};
use crate::pipeline::version_sql::Plan;
use crate::progress::Progress;

/// How long the refresh waits for the version's stream at its end.
const STREAM_WAIT: Duration = Duration::from_secs(300);

/// What a scoped refresh did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// The version refreshed.
    pub version: String,
    /// The snapshot's consistent point: the version of every row written.
    pub snapshot_lsn: Lsn,
    /// Source rows copied (those matching the scope).
    pub rows: i64,
    /// Keys the source no longer has, made tombstones.
    pub tombstoned: u64,
}

/// Copies the rows of `target`'s source matching `scope` into its active
/// version again, and tombstones the version's keys the source lost; for
/// request `request`, whose earlier attempts' progress it goes on from.
pub async fn refresh(
    config: &Config,
    request: i64,
    target: &str,
    scope: &str,
    cancel: &CancellationToken,
) -> Result<Refreshed> {
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let version = state::version_or_active(&dest, target, None)
        .await
        .map_err(|_| {
            Error::refused(
                format!("target {target} has no published version to refresh"),
                "request a backfill without --where to build one",
            )
        })?;
    let v = VersionState::load_existing(&dest, target, &version).await?;
    let plan = v.plan(&dest).await?;
    let source = db::connect(&config.source, Role::Source).await?;
    let source_table = plan.source.quoted();
    check_scope(&source, &source_table, scope).await?;
    let mut progress = RefreshProgress::begin(&dest, request, target, &version).await?;
    if let Some(key) = &progress.up_to {
        tracing::info!(
            target,
            %version,
            scope,
            after = %key.join(","),
            rows = progress.rows,
            "resuming the refresh after the last key an earlier attempt stored"
        );
    }

    let slot = format!(
        "{}_f{}",
        &v.slot_name[..v.slot_name.len().min(50)],
        std::process::id()
    );
    tracing::info!(target, %version, scope, "refreshing; creating a temporary slot for a snapshot");
    let boundary = Boundary::create(&db::replication_url(&config.source), &slot, true)?;
    let at = boundary.lsn;
    let mut copy = open_copy(
        config,
        (&source, &dest),
        &plan,
        &boundary,
        scope,
        &progress,
        cancel,
    )
    .await?;
    let store =
        Store::shared(plan.clone()).with_dead_letter_limit(config.backfill.max_dead_letter_percent);
    {
        let mut throttled = super::throttle::Throttled::new(
            &mut copy,
            config,
            target,
            &version,
            &v.slot_name,
            cancel,
        );
        apply::run(
            &mut dest,
            &store,
            &mut progress,
            &mut throttled,
            cancel,
            "refresh",
        )
        .await?;
    }
    copy.finish().await?;
    let tombstoned = tombstone_absent(
        config,
        (&source, &mut dest),
        (&plan, &store),
        &boundary,
        &mut progress,
        cancel,
    )
    .await?;
    drop(boundary);
    settle_truncate(&source, &mut dest, (&plan, &store), at, cancel).await?;
    let refreshed = Refreshed {
        version,
        snapshot_lsn: at,
        rows: progress.rows,
        tombstoned,
    };
    state::record_event(
        &dest,
        target,
        Some(&refreshed.version),
        "refreshed",
        serde_json::json!({
            "where": scope,
            "snapshot_lsn": at.to_string(),
            "rows": refreshed.rows,
            "tombstoned": tombstoned,
        }),
    )
    .await?;
    tracing::info!(target, version = %refreshed.version, rows = refreshed.rows, tombstoned, "refreshed");
    Ok(refreshed)
}

/// The copy of the rows in `scope` under the boundary's snapshot, after the
/// last key an earlier attempt stored.
async fn open_copy(
    config: &Config,
    (source, dest): (&Client, &Client),
    plan: &Plan,
    boundary: &Boundary,
    scope: &str,
    progress: &RefreshProgress,
    cancel: &CancellationToken,
) -> Result<CopySource> {
    let session = db::connect(&config.source, Role::Source).await?;
    let format = crate::pipeline::source::copy_format(
        config.backfill.copy_format,
        source,
        dest,
        plan,
        false,
    )
    .await?;
    let (target, version) = (&plan.def.target, &plan.def.version);
    CopySource::open(
        session,
        source,
        plan,
        Snapshot {
            projection: None,
            name: boundary.snapshot.clone(),
            lsn: boundary.lsn,
            scope: Some(scope.to_string()),
            with_hidden: false,
            format,
        },
        progress.up_to.clone(),
        Pace {
            chunk_rows: config.backfill.chunk_rows,
            max_rows_per_second: config.backfill.max_rows_per_second,
        },
        Progress::new(
            format!("refresh {target}/{version}"),
            None,
            progress.rows as u64,
        ),
        None,
        cancel.clone(),
    )
    .await
}

/// Refuses a scope the source cannot run, with PostgreSQL's reason.
async fn check_scope(source: &Client, source_table: &str, scope: &str) -> Result<()> {
    if scope.trim().is_empty() {
        return Err(Error::refused_no_fix("the --where condition is empty"));
    }
    source
        .prepare(&format!("SELECT FROM {source_table} WHERE ({scope})"))
        .await
        .map(|_| ())
        .map_err(|e| {
            let reason = e
                .as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_else(|| e.to_string());
            Error::refused(
                format!("the --where condition does not work on {source_table}: {reason}"),
                "it is one condition over the source table's columns, as in `WHERE id < 1000`",
            )
        })
}

/// Makes the version's live keys that the source no longer has (under the
/// refresh's snapshot) tombstones, through the apply loop, after the last
/// one an earlier attempt made; returns how many keys every attempt made
/// tombstones.
async fn tombstone_absent(
    config: &Config,
    (source, dest): (&Client, &mut Client),
    (plan, store): (&Plan, &Store),
    boundary: &Boundary,
    progress: &mut RefreshProgress,
    cancel: &CancellationToken,
) -> Result<u64> {
    let keys = db::connect(&config.destination, Role::Destination).await?;
    load_source_keys(source, &keys, plan, boundary).await?;
    if let Some(key) = &progress.tombstoned_up_to {
        tracing::info!(
            target = %plan.def.target,
            after = %key.join(","),
            "resuming the tombstones of lost keys after the last an earlier attempt made"
        );
    }
    let mut absent = AbsentKeys::new(
        keys,
        plan.clone(),
        boundary.lsn,
        progress.tombstoned_up_to.clone(),
    );
    apply::run(dest, store, progress, &mut absent, cancel, "refresh").await?;
    Ok(u64::try_from(progress.tombstoned).unwrap_or(0))
}

/// Loads the source's keys as of the boundary's snapshot into a temporary
/// table of the destination session `keys`.
async fn load_source_keys(
    source: &Client,
    keys: &Client,
    plan: &Plan,
    boundary: &Boundary,
) -> Result<()> {
    let read = |e| Error::source_query("reading the source's keys for the refresh", e);
    source
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            walfill_core::sql::quote_literal(&boundary.snapshot)
        ))
        .await
        .map_err(read)?;
    let result = async {
        let into = |e| Error::destination("loading the source's keys for the refresh", e);
        keys.batch_execute(&plan.source_keys_ddl())
            .await
            .map_err(into)?;
        let rows = source
            .copy_out(&plan.source_keys_copy_out(&plan.source.quoted()))
            .await
            .map_err(read)?;
        let sink = keys
            .copy_in::<_, Bytes>(&plan.source_keys_copy_in())
            .await
            .map_err(into)?;
        futures_util::pin_mut!(rows, sink);
        while let Some(piece) = rows.next().await {
            sink.send(piece.map_err(read)?).await.map_err(into)?;
        }
        sink.as_mut().finish().await.map_err(into)?;
        Ok(())
    }
    .await;
    let _ = source.batch_execute("COMMIT").await;
    result
}

/// Waits for the stream to pass a position after every write of the
/// refresh, then stores the version's TRUNCATE watermark again (its rows
/// older than it are gone: a TRUNCATE applied meanwhile could not see the
/// refresh's newest rows).
async fn settle_truncate(
    source: &Client,
    dest: &mut Client,
    (plan, store): (&Plan, &Store),
    at: Lsn,
    cancel: &CancellationToken,
) -> Result<()> {
    let text: String = source
        .query_one(
            "SELECT pg_logical_emit_message(true, 'walfill.refresh', '')::text",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("marking the end of the refresh", e))?
        .get(0);
    let mark: Lsn = text
        .parse()
        .map_err(|_| Error::Internal(format!("the source's WAL position {text} does not parse")))?;
    let (target, version) = (&plan.def.target, &plan.def.version);
    VersionState::wait_applied(
        dest,
        target,
        version,
        mark,
        STREAM_WAIT,
        "the refresh",
        cancel,
    )
    .await?;
    let truncated = VersionState::load(&*dest, target, version)
        .await?
        .and_then(|v| v.truncated);
    let Some(t) = truncated.filter(|t| *t > Version::snapshot(at)) else {
        return Ok(());
    };
    let failed = |e| Error::destination("applying a TRUNCATE the refresh raced with", e);
    let tx = dest.transaction().await.map_err(failed)?;
    let mut batch = Batch {
        writes: Writes::None,
        truncate: Some(t),
        truncate_xid: None,
        changes: 0,
        cursor: None,
    };
    store.store(&tx, &mut batch, None).await?;
    tx.commit().await.map_err(failed)
}
