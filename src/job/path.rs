//! Choosing how a version is built, and running the replay path up to the
//! handoff to the live stream.

use std::time::Duration;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_replay::archive::Archive;
use walfill_replay::Lsn;
use walfill_snapshot::{Boundary, ReplicationConnection, SnapshotError};

use super::replay::{replay, wait_for_archive, ReplaySource};
use super::source::{current_wal_lsn, slot_exists};
use crate::apply::Applier;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::planner::{self, PathChoice, ReplayStart};
use crate::state::{self, Phase, VersionState};

/// Decides the path of a version that has not started, and records it with
/// the reason.
pub(super) async fn choose(
    config: &Config,
    source: &Client,
    dest: &Client,
    plan: &Plan,
    state: &mut VersionState,
    choice: PathChoice,
    cancel: &CancellationToken,
) -> Result<()> {
    let (path, reason, start) = match choice {
        PathChoice::Snapshot => (
            "snapshot",
            "asked for with --path snapshot".to_string(),
            None,
        ),
        PathChoice::Auto | PathChoice::Replay => {
            archive_recent_wal(config, source, cancel).await?;
            let decision = planner::decide(config, source, plan).await?;
            if decision.path != "replay" && choice == PathChoice::Replay {
                return Err(Error::State(format!(
                    "{} cannot be built by replay: {}; run without --path replay to build it \
                     from a snapshot",
                    plan.def.target, decision.reason
                )));
            }
            (decision.path, decision.reason, decision.start)
        }
    };
    let start = start
        .map(|s| serde_json::to_value(&s))
        .transpose()
        .map_err(|e| Error::State(format!("recording the replay's start: {e}")))?;
    state.set_path(dest, path, &reason, start).await?;
    tracing::info!(target = %state.target, version = %state.version, path, %reason, "path chosen");
    state::record_event(
        dest,
        &state.target,
        Some(&state.version),
        "path",
        serde_json::json!({ "path": path, "reason": reason }),
    )
    .await
}

/// Lets the archive catch up with the source before the planner looks at
/// it (a table created minutes ago is in the segment being written): asks
/// the source to switch segments and waits a little for the archiver. The
/// planner decides on what is archived, whatever happens here.
async fn archive_recent_wal(
    config: &Config,
    source: &Client,
    cancel: &CancellationToken,
) -> Result<()> {
    let Some(url) = &config.archive else {
        return Ok(());
    };
    let archive = Archive::open(url)?;
    let now = current_wal_lsn(source).await?;
    let last = Lsn(now.0.saturating_sub(1));
    let wait = Duration::from_secs(config.archive_settings.wait_seconds.min(30));
    match wait_for_archive(source, &archive, last, now, wait, cancel).await {
        Err(Error::History(reason)) => {
            tracing::info!(%reason, "the archive is behind the source; planning with what it holds");
            Ok(())
        }
        other => other,
    }
}

/// Gives up a replay that the archive cannot serve: the version will be
/// copied from a snapshot instead.
pub(super) async fn fall_back(dest: &Client, state: &mut VersionState, reason: &str) -> Result<()> {
    tracing::warn!(
        target = %state.target,
        version = %state.version,
        %reason,
        "cannot replay; building the version from a snapshot instead"
    );
    let why = format!("replay abandoned: {reason}");
    state.fall_back_to_snapshot(dest, &why).await?;
    state::record_event(
        dest,
        &state.target,
        Some(&state.version),
        "replay_abandoned",
        serde_json::json!({ "reason": reason }),
    )
    .await
}

/// What the replay path needs besides the version.
pub(super) struct ReplayJob<'a> {
    pub(super) config: &'a Config,
    pub(super) source: &'a Client,
    pub(super) plan: &'a Plan,
    pub(super) cancel: &'a CancellationToken,
}

impl ReplayJob<'_> {
    /// Creates the version's slot (unless a previous run did), replays the
    /// archive up to its boundary and moves the version to catching up.
    /// Returns the connection that created the slot, if this run did.
    pub(super) async fn run(
        &self,
        dest: &mut Client,
        state: &mut VersionState,
    ) -> Result<Option<ReplicationConnection>> {
        let url = self
            .config
            .archive
            .as_deref()
            .ok_or_else(|| Error::History("no archive is configured any more".into()))?;
        let archive = Archive::open(url)?;
        let start: ReplayStart = state
            .replay_base
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| Error::State(format!("the recorded replay start is unreadable: {e}")))?
            .ok_or_else(|| Error::State("the version has no recorded replay start".into()))?;
        let slot = state.slot_name.clone();
        let has_slot = slot_exists(self.source, &slot).await?;
        let mut connection = None;
        if state.phase == Phase::Planned || state.boundary_lsn.is_none() || !has_slot {
            if has_slot {
                // Created by a run that died before recording it: unused.
                self.source
                    .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
                    .await
                    .map_err(|e| SnapshotError::query(format!("dropping unused slot {slot}"), e))?;
            } else if state.boundary_lsn.is_some() {
                tracing::warn!(%slot, "the version's slot is gone; replaying again to a new boundary");
                state::record_event(
                    &*dest,
                    &state.target,
                    Some(&state.version),
                    "slot_lost",
                    serde_json::json!({ "slot": slot }),
                )
                .await?;
            }
            state.restart_replay(&*dest).await?;
            tracing::info!(%slot, "creating the slot; this waits for running source transactions");
            let replication = self.config.source.replication_url();
            let boundary = Boundary::create_without_snapshot(&replication, &slot)?;
            state
                .set_replay_boundary(&*dest, boundary.lsn, start.restart())
                .await?;
            state
                .record_boundary_event(&*dest, &slot, boundary.lsn)
                .await?;
            connection = Some(boundary.connection);
        }
        if state.replayed_lsn.is_none() && state.copy_cursor.is_none() {
            dest.batch_execute(&format!("TRUNCATE {}", self.plan.staging_table()))
                .await
                .map_err(|e| Error::destination("emptying the staging table", e))?;
        }
        let boundary = state
            .boundary_lsn
            .ok_or_else(|| Error::State("the replay's boundary is not recorded".into()))?;
        let wait = Duration::from_secs(self.config.archive_settings.wait_seconds);
        tracing::info!(
            target = %state.target,
            version = %state.version,
            base = %start.describe(),
            restart = %start.restart(),
            %boundary,
            "replaying the archive"
        );
        wait_for_archive(
            self.source,
            &archive,
            start.restart(),
            boundary,
            wait,
            self.cancel,
        )
        .await?;
        let database: u32 = self
            .source
            .query_one(
                "SELECT oid FROM pg_database WHERE datname = current_database()",
                &[],
            )
            .await
            .map_err(|e| SnapshotError::query("reading the database's OID", e))?
            .get(0);
        let replay_source = ReplaySource {
            archive: &archive,
            database,
            start: &start,
            boundary,
            fold_bytes: self.config.backfill.replay_memory_mb as usize * (1 << 20),
        };
        let mut applier = Applier::historical(self.plan.clone());
        replay(dest, &mut applier, state, &replay_source, wait, self.cancel).await?;
        state.set_phase(&*dest, Phase::CatchingUp).await?;
        Ok(connection)
    }
}
