//! Filling a version by replay: its base (the table's creation, or a base
//! snapshot in the archive) and the archived WAL after it, up to the slot's
//! boundary, where the live stream takes over. The source table is never
//! read.
//!
//! A rerun decodes from the start again and stores, by the version rule,
//! only what committed after the last stored position.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use walfill_replay::archive::Archive;
use walfill_snapshot::{Boundary, ReplicationConnection};

use super::archive_wait::{pause, wait_for_archive};
use super::source::SlotHealth;
use super::Context;
use crate::apply::{run, Store, StreamDesc};
use crate::db;
use crate::error::{Error, Result};
use crate::failpoint;
use crate::plan::Plan;
use crate::planner::{blocking_loss, source_identity, ReplayStart};
use crate::progress::Progress;
use crate::source::base::BaseSource;
use crate::source::replay::{ReplayOutcome, ReplayRange, ReplaySource};
use crate::state::{FillStart, Phase, VersionState};

/// Replays the archive into the version up to its boundary (creating the
/// version's slot first unless a previous run did) and moves it to catching
/// up. Returns the connection that created the slot, if this run did. An
/// archive that cannot serve the replay is an [`Error::History`].
pub(super) async fn fill_replay(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
) -> Result<Option<ReplicationConnection>> {
    let url = cx
        .config
        .archive
        .as_deref()
        .ok_or_else(|| Error::History("no archive is configured any more".into()))?;
    let archive = cx.config.open_archive(url)?;
    let start: ReplayStart = state
        .replay_base
        .clone()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| Error::Internal(format!("the recorded replay start is unreadable: {e}")))?
        .ok_or_else(|| Error::History("the version has no recorded replay start".into()))?;
    let slot = state.slot_name.clone();
    let health = super::source::slot_health(cx.source, &slot).await?;
    let mut connection = None;
    if state.phase != Phase::Replaying || health != SlotHealth::Kept {
        if health != SlotHealth::Missing {
            // Created by a run that died before recording it, or unusable.
            super::drop_slot(cx.source, &slot).await?;
        }
        if state.phase == Phase::Replaying {
            tracing::warn!(%slot, "the version's slot is gone; replaying again to a new boundary");
        }
        tracing::info!(%slot, "creating the slot; this waits for running source transactions");
        let boundary =
            Boundary::create_without_snapshot(&db::replication_url(&cx.config.source), &slot)?;
        failpoint::hit("replay.slot_created");
        state
            .start_fill(
                dest,
                FillStart::Replay {
                    boundary: boundary.lsn,
                    restart: start.restart(),
                },
            )
            .await?;
        connection = Some(boundary.connection);
    }
    failpoint::hit("replay.start");
    let boundary = state
        .boundary_lsn
        .ok_or_else(|| Error::Internal("the replay's boundary is not recorded".into()))?;
    let wait = Duration::from_secs(cx.config.archive_settings.wait_seconds);
    tracing::info!(
        target = %state.target,
        version = %state.version,
        base = %start.describe(),
        restart = %start.restart(),
        %boundary,
        "replaying the archive"
    );
    wait_for_archive(
        cx.source,
        &archive,
        start.restart(),
        boundary,
        wait,
        cx.cancel,
    )
    .await?;
    let identity = source_identity(cx.config).await?;
    let database: u32 = cx
        .source
        .query_one(
            "SELECT oid FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading the database's OID", e))?
        .get(0);
    let store = Store::new(plan.clone());
    if let ReplayStart::Snapshot { manifest } = &start {
        if state.replayed_lsn.is_none() {
            let done = state.copy_cursor.as_ref().and_then(|c| c.first().cloned());
            let label = format!("base {}", state.label());
            let progress =
                Progress::new(label, Some(manifest.rows), state.rows_copied.max(0) as u64);
            let mut base = BaseSource::new(
                archive.clone(),
                (**manifest).clone(),
                plan.clone(),
                done.as_deref(),
                progress,
            );
            run(dest, &store, state, &mut base, cx.cancel, "replay").await?;
        }
    }
    let started = Instant::now();
    let mut reported = None;
    let outcome = loop {
        let range = ReplayRange {
            database,
            restart: start.restart(),
            emit_from: match state.replayed_lsn {
                Some(done) => done.advance(1).max(start.from()),
                None => start.from(),
            },
            boundary,
            known: match &start {
                ReplayStart::Snapshot { manifest } => Some(manifest.relation.clone()),
                ReplayStart::Creation { .. } => None,
            },
            from_creation: matches!(start, ReplayStart::Creation { .. }),
            identity: identity.clone(),
        };
        let outcome = replay_wal(cx, dest, &store, state, plan, &archive, range).await?;
        check(plan, &start, &outcome)?;
        if outcome.reached_boundary {
            tracing::info!(
                target = %state.target,
                version = %state.version,
                transactions = outcome.transactions,
                seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                "replayed up to the boundary"
            );
            break outcome;
        }
        // The archive's unfinished segment ends before the boundary: wait
        // for the archiver to store more of it, then go on from what is
        // stored.
        if started.elapsed() > wait {
            return Err(Error::History(format!(
                "the archived WAL ends at {} (in an unfinished .partial segment), before the \
                 replay's boundary {boundary}; is the archiver running?",
                outcome.end
            )));
        }
        if reported.is_none_or(|at: Instant| at.elapsed() >= Duration::from_secs(10)) {
            reported = Some(Instant::now());
            tracing::info!(
                end = %outcome.end,
                %boundary,
                waited = %format!(
                    "{} s of at most {} s",
                    started.elapsed().as_secs(),
                    wait.as_secs()
                ),
                "the archive's unfinished segment ends before the boundary; waiting for the \
                 archiver to store more of it"
            );
        }
        pause(Duration::from_secs(1), cx.cancel).await?;
    };
    let relation = outcome.relation.ok_or_else(|| {
        Error::History(format!(
            "the archive does not describe {} at the replay's boundary",
            plan.source
        ))
    })?;
    failpoint::hit("replay.end");
    state
        .finish_fill(dest, Some(&StreamDesc::from_journal(&relation)))
        .await?;
    Ok(connection)
}

/// Decodes `range` and stores the changes of transactions committing after
/// what is already stored.
async fn replay_wal(
    cx: &Context<'_>,
    dest: &mut Client,
    store: &Store,
    state: &mut VersionState,
    plan: &Plan,
    archive: &Archive,
    range: ReplayRange,
) -> Result<ReplayOutcome> {
    let fold_bytes = cx.config.backfill.replay_memory_mb as usize * (1 << 20);
    let mut source = ReplaySource::start(
        archive,
        range,
        plan,
        fold_bytes,
        format!("replay {}", state.label()),
        cx.cancel.clone(),
    )
    .await?;
    let (target, version, slot) = (
        state.target.clone(),
        state.version.clone(),
        state.slot_name.clone(),
    );
    let mut throttled = super::throttle::Throttled::new(
        &mut source,
        cx.config,
        &target,
        &version,
        &slot,
        cx.cancel,
    );
    let applied = run(dest, store, state, &mut throttled, cx.cancel, "replay").await;
    let decoded = source.finish().await;
    // A failed store stops the decoder too; its error is the one to tell.
    applied?;
    decoded
}

/// Fails when the replayed rows cannot be right: the table's changes could
/// not be followed, or a column the transform reads could not be decoded.
fn check(plan: &Plan, start: &ReplayStart, outcome: &ReplayOutcome) -> Result<()> {
    if let Some(lost) = blocking_loss(&outcome.lost, plan, start.from()) {
        return Err(Error::History(format!(
            "{} cannot be followed through the archive from {}: {}",
            plan.source, lost.lsn, lost.reason
        )));
    }
    if let Some(column) = outcome.unsupported.iter().find(|c| plan.reads(&c.column)) {
        return Err(Error::History(format!(
            "column {}.{} has type {}, which walfill cannot decode from WAL",
            column.relation, column.column, column.type_name
        )));
    }
    Ok(())
}
