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
use walfill_snapshot::ReplicationConnection;

use super::slot_wait::Exported;
use super::Context;
use crate::control::route::{source_identity, ReplayStart};
use crate::control::state::{FillStart, Phase, VersionState};
use crate::error::{Error, Result};
use crate::failpoint;
use crate::pipeline::apply::{Store, StreamDesc};
use crate::pipeline::source::replay::{
    check, FoldSpace, Output, ReplayOutcome, ReplayRange, ReplaySource,
};
use crate::pipeline::version_sql::Plan;
use crate::retry::pause;
use crate::upstream::wal::wait_for_archive;
use crate::upstream::SlotHealth;

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
        .ok_or_else(|| Error::history("no archive is configured any more"))?;
    let archive = cx.config.open_archive(url)?;
    let start: ReplayStart = state
        .replay_base
        .clone()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| Error::Internal(format!("the recorded replay start is unreadable: {e}")))?
        .ok_or_else(|| Error::history("the version has no recorded replay start"))?;
    let slot = state.slot_name.clone();
    let health = crate::upstream::slot_health(cx.source, &slot).await?;
    let mut connection = None;
    if state.phase != Phase::Replaying || health != SlotHealth::Kept {
        if health != SlotHealth::Missing {
            // Created by a run that died before recording it, or unusable.
            crate::upstream::drop_slot(cx.source, &slot).await?;
        }
        if state.phase == Phase::Replaying {
            tracing::warn!(%slot, "the version's slot is gone; replaying again to a new boundary");
        }
        let boundary =
            super::slot_wait::create_slot(cx, dest, state, &slot, Exported::Nothing).await?;
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
    // The version's table is loaded with plain inserts, its key built at
    // the end. A load goes on after its last stored key; rows an attempt
    // left without one (an older walfill's replay) are dropped first.
    let table_has_rows = !super::key_index::is_empty(dest, plan).await?;
    if state.load_cursor.is_none() && table_has_rows {
        tracing::info!(
            table = %plan.staging_table(),
            "an earlier replay left rows this one cannot go on from; starting the load over"
        );
        state.restart_load(dest).await?;
    }
    // An earlier attempt may have built the key already (it died before
    // recording the end of the fill): the load goes on without it.
    super::key_index::drop(dest, plan).await?;
    let store = Store::loading(plan.clone())
        .with_dead_letter_limit(cx.config.backfill.max_dead_letter_percent);
    let started = Instant::now();
    let mut reported = None;
    let outcome = loop {
        let range = ReplayRange {
            database,
            restart: start.restart(),
            emit_from: start.from(),
            boundary,
            known: match &start {
                ReplayStart::Snapshot { manifest } => Some(manifest.relation.clone()),
                ReplayStart::Creation { .. } => None,
            },
            base: match &start {
                ReplayStart::Snapshot { manifest } => Some(manifest.clone()),
                ReplayStart::Creation { .. } => None,
            },
            bases: cx.config.open_bases().transpose()?,
            loaded: state.load_cursor.clone(),
            from_creation: matches!(start, ReplayStart::Creation { .. }),
            identity: identity.clone(),
        };
        // A fresh load leaves a base snapshot of the table's rows at the
        // boundary (a resumed one no longer holds every row).
        let leaves = match state.load_cursor {
            None => super::base::writer(cx.config, cx.source, plan, &slot, boundary).await,
            Some(_) => None,
        };
        let outcome = replay_wal(cx, dest, (plan, &store), state, &archive, range, leaves).await?;
        check(plan, start.from(), &outcome)?;
        if outcome.reached_boundary {
            tracing::info!(
                target = %state.target,
                version = %state.version,
                transactions = outcome.transactions,
                rows = state.rows_copied,
                spilled_runs = outcome.spilled.runs,
                spilled_mib = format!("{:.1}", outcome.spilled.peak_bytes as f64 / 1048576.0),
                seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                "replayed up to the boundary"
            );
            break outcome;
        }
        // The archive's unfinished segment ends before the boundary: wait
        // for the archiver to store more of it, then decode again.
        if started.elapsed() > wait {
            return Err(Error::history(format!(
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
        Error::history(format!(
            "the archive does not describe {} at the replay's boundary",
            plan.source
        ))
    })?;
    super::key_index::build(dest, plan).await?;
    failpoint::hit("replay.end");
    state
        .finish_fill(
            dest,
            Some(&StreamDesc::from_journal(&relation)),
            Some(outcome.spilled),
            Some(&outcome.read),
        )
        .await?;
    Ok(connection)
}

/// Decodes `range` and stores each key's final row, once every record
/// before the boundary is decoded.
async fn replay_wal(
    cx: &Context<'_>,
    dest: &mut Client,
    (plan, store): (&Plan, &Store),
    state: &mut VersionState,
    archive: &Archive,
    range: ReplayRange,
    leaves: Option<crate::pipeline::base::BaseWriter>,
) -> Result<ReplayOutcome> {
    let space = FoldSpace {
        memory: cx.config.backfill.replay_memory_bytes,
        spill_dir: cx.config.backfill.spill_dir.clone(),
        batch_rows: cx.config.backfill.chunk_rows as usize,
    };
    let mut source = ReplaySource::start(
        archive,
        range,
        plan,
        space,
        format!("replay {}", state.label()),
        cx.cancel.clone(),
        match leaves {
            Some(writer) => Output::StoreAndBase(writer),
            None => Output::Store,
        },
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
    let applied =
        super::writers::load(cx, dest, (plan, store), state, &mut throttled, "replay").await;
    let decoded = source.finish().await;
    // A failed store stops the decoder too; its error is the one to tell.
    applied?;
    decoded
}
