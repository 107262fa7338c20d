//! `walfill backfill`: build a target's configured version by snapshot,
//! catch it up with the live stream, and swap it in.
//!
//! Each phase is recorded before it starts and every unit of work is
//! committed with the position after it, so running the same command again
//! after any failure (or `kill -9`) resumes where the last one stopped.

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_snapshot::{Boundary, ReplicationConnection, SnapshotError};

use super::copy::{copy_snapshot, Pace, Snapshot};
use super::follow::{Follower, Stop};
use super::path::{self, ReplayJob};
use super::source::{current_wal_lsn, require_publication, slot_exists};
use crate::apply::Applier;
use crate::config::Config;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::plan::{self, Definition, Plan};
use crate::planner::PathChoice;
use crate::state::{self, NewVersion, Phase, VersionState};
use crate::swap;

/// How a backfill runs.
#[derive(Clone, Debug, Default)]
pub struct BackfillOptions {
    /// Stop when caught up instead of swapping the view.
    pub no_swap: bool,
    /// How the version is built.
    pub path: PathChoice,
}

/// Builds (or resumes) the configured version of target `name`.
pub async fn backfill(
    config: &Config,
    name: &str,
    options: &BackfillOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    let target = config.target(name)?;
    let wanted = Definition::from_config(target);
    let source = db::connect(&config.source, Role::Source).await?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    require_publication(&source, &config.backfill.publication, &target.source).await?;
    let lock = format!("version:{}:{}", wanted.target, wanted.version);
    if !state::try_lock(&dest, &lock).await? {
        return Err(Error::Busy(format!(
            "another walfill process is working on version {} of {}",
            wanted.version, wanted.target
        )));
    }

    let existing = VersionState::load(&dest, &wanted.target, &wanted.version).await?;
    if let Some(recorded) = &existing {
        same_definition(recorded, &wanted)?;
        if matches!(recorded.phase, Phase::Active) {
            tracing::info!(target = name, version = %recorded.version, "already active; nothing to do");
            return Ok(());
        }
        if recorded.phase == Phase::Retired {
            return Err(Error::State(format!(
                "version {} of {name} was retired; configure a new version to rebuild",
                recorded.version
            )));
        }
    }
    let def = existing
        .as_ref()
        .map(Definition::from_state)
        .unwrap_or(wanted);
    let plan = plan::build(&source, &dest, &def).await?;
    dest.batch_execute(&plan.staging_ddl())
        .await
        .map_err(|e| Error::destination(format!("creating {}", plan.staging_table()), e))?;
    plan.verify_staging(&dest).await?;
    let state = match existing {
        Some(s) => s,
        None => create_version(&dest, &plan, &config.deployment_tag()).await?,
    };
    state::record_event(
        &dest,
        &def.target,
        Some(&def.version),
        "backfill_started",
        serde_json::json!({ "phase": state.phase.as_str(), "path": state.path }),
    )
    .await?;

    let mut job = Job {
        config,
        source,
        plan,
        options,
        cancel,
    };
    let mut dest = dest;
    let result = Box::pin(job.run(&mut dest, state)).await;
    match &result {
        Err(Error::Interrupted) => {
            tracing::warn!(
                target = name,
                "interrupted; progress is saved, rerun to resume"
            );
        }
        Err(e) => {
            VersionState::record_error(&dest, &def.target, &def.version, &e.to_string()).await;
        }
        Ok(()) => {}
    }
    result
}

fn same_definition(recorded: &VersionState, wanted: &Definition) -> Result<()> {
    let same = recorded.select_sql == wanted.select
        && recorded.filter_sql == wanted.filter
        && recorded.source_table == wanted.source.to_string()
        && recorded.dest_schema == wanted.dest_schema
        && wanted
            .key
            .as_ref()
            .is_none_or(|k| *k == recorded.key_columns);
    if same {
        return Ok(());
    }
    Err(Error::State(format!(
        "version {} of target {} was built from a different definition (source {}, select {:?}, \
         where {:?}); give the new definition a new version, or restore the old one",
        recorded.version,
        recorded.target,
        recorded.source_table,
        recorded.select_sql,
        recorded.filter_sql
    )))
}

async fn create_version(dest: &Client, plan: &Plan, tag: &str) -> Result<VersionState> {
    let def = &plan.def;
    VersionState::create(
        dest,
        &NewVersion {
            target: &def.target,
            version: &def.version,
            dest_schema: &def.dest_schema,
            table_name: &def.table_name(),
            source_table: &def.source.to_string(),
            select_sql: &def.select,
            filter_sql: def.filter.as_deref(),
            key_columns: &plan.key,
            slot_name: &def.slot_name(tag),
            rows_estimated: plan.source.estimated_rows.max(0),
        },
    )
    .await?;
    VersionState::load(dest, &def.target, &def.version)
        .await?
        .ok_or_else(|| Error::State("the new version vanished from walfill.versions".into()))
}

struct Job<'a> {
    config: &'a Config,
    source: Client,
    plan: Plan,
    options: &'a BackfillOptions,
    cancel: &'a CancellationToken,
}

impl Job<'_> {
    /// Runs the remaining phases.
    async fn run(&mut self, dest: &mut Client, mut state: VersionState) -> Result<()> {
        let applier = Applier::new(self.plan.clone());
        let mut stream_conn = None;
        if state.phase == Phase::Planned {
            path::choose(
                self.config,
                &self.source,
                dest,
                &self.plan,
                &mut state,
                self.options.path,
                self.cancel,
            )
            .await?;
        } else if state.phase == Phase::Replaying && self.options.path == PathChoice::Snapshot {
            path::fall_back(dest, &mut state, "asked for with --path snapshot").await?;
        }
        if state.path == "replay" && matches!(state.phase, Phase::Planned | Phase::Replaying) {
            let job = ReplayJob {
                config: self.config,
                source: &self.source,
                plan: &self.plan,
                cancel: self.cancel,
            };
            match job.run(dest, &mut state).await {
                Ok(conn) => stream_conn = conn,
                Err(Error::History(reason)) if self.options.path == PathChoice::Auto => {
                    path::fall_back(dest, &mut state, &reason).await?;
                }
                Err(Error::History(reason)) => {
                    return Err(Error::State(format!(
                        "the replay cannot go on: {reason}; run without --path replay to build                          the version from a snapshot"
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        if matches!(state.phase, Phase::Planned | Phase::Copying) {
            stream_conn = self.copy(dest, &applier, &mut state).await?;
        }
        if state.phase == Phase::CatchingUp {
            state = self.catch_up(dest, state, applier, stream_conn).await?;
        }
        if state.phase == Phase::Ready && !self.options.no_swap {
            let lock_timeout = self.config.backfill.swap_lock_timeout_ms;
            return swap::swap(dest, &state.target, &state.version, lock_timeout).await;
        }
        if state.phase == Phase::Ready {
            tracing::info!(
                target = %state.target,
                version = %state.version,
                "caught up; swap it in with `walfill swap {} {}`",
                state.target,
                state.version
            );
        }
        Ok(())
    }

    /// The copy phase, fresh or resumed. Returns the connection that created
    /// the slot, if this run created it, for the stream to start on.
    async fn copy(
        &mut self,
        dest: &mut Client,
        applier: &Applier,
        state: &mut VersionState,
    ) -> Result<Option<ReplicationConnection>> {
        let url = self.config.source.replication_url();
        let slot = state.slot_name.clone();
        let has_slot = slot_exists(&self.source, &slot).await?;
        let fresh = state.phase == Phase::Planned || state.boundary_lsn.is_none() || !has_slot;
        let pace = Pace {
            chunk_rows: self.config.backfill.chunk_rows,
            max_rows_per_second: self.config.backfill.max_rows_per_second,
        };
        let mut stream_conn = None;
        if fresh {
            if has_slot {
                // Created by a run that died before recording it: unused.
                self.drop_slot(&slot).await?;
            } else if state.phase == Phase::Copying {
                tracing::warn!(%slot, "the version's slot is gone; copying again from a new snapshot");
                state::record_event(
                    dest,
                    &state.target,
                    Some(&state.version),
                    "slot_lost",
                    serde_json::json!({ "slot": slot }),
                )
                .await?;
            }
            dest.batch_execute(&format!("TRUNCATE {}", self.plan.staging_table()))
                .await
                .map_err(|e| Error::destination("emptying the staging table", e))?;
            tracing::info!(%slot, "creating the slot; this waits for running source transactions");
            let boundary = Boundary::create(&url, &slot, false)?;
            state.set_boundary(&*dest, boundary.lsn).await?;
            state
                .record_boundary_event(&*dest, &slot, boundary.lsn)
                .await?;
            let mut base =
                super::base::writer(self.config, &self.source, &self.plan, &slot, boundary.lsn)
                    .await;
            copy_snapshot(
                &mut self.source,
                dest,
                applier,
                state,
                Snapshot {
                    name: &boundary.snapshot,
                    boundary: boundary.lsn,
                },
                pace,
                &mut base,
                self.cancel,
            )
            .await?;
            if let Some(writer) = base {
                if let Err(e) = writer.finish().await {
                    tracing::warn!(error = %e, "the base snapshot could not be completed");
                }
            }
            stream_conn = Some(boundary.connection);
        } else {
            // The snapshot died with the previous run: continue from the
            // cursor with a new one. Rows copied from it carry its later
            // boundary, and the version rule keeps them right.
            let temporary = format!("{}_{}", &slot[..slot.len().min(50)], std::process::id());
            let boundary = Boundary::create(&url, &temporary, true)?;
            state.set_copy_boundary(&*dest, boundary.lsn).await?;
            state::record_event(&*dest, &state.target, Some(&state.version), "copy_resumed", serde_json::json!({ "after": state.copy_cursor, "snapshot_lsn": boundary.lsn.to_string() })).await?;
            if self.config.archive.is_some() && self.config.archive_settings.base_snapshots {
                tracing::info!(
                    "the copy was interrupted, so it leaves no base snapshot; the next snapshot \
                     backfill of this table will"
                );
            }
            copy_snapshot(
                &mut self.source,
                dest,
                applier,
                state,
                Snapshot {
                    name: &boundary.snapshot,
                    boundary: boundary.lsn,
                },
                pace,
                &mut None,
                self.cancel,
            )
            .await?;
        }
        state.set_phase(&*dest, Phase::CatchingUp).await?;
        Ok(stream_conn)
    }

    async fn drop_slot(&self, slot: &str) -> Result<()> {
        self.source
            .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
            .await
            .map_err(|e| SnapshotError::query(format!("dropping the unused slot {slot}"), e))?;
        Ok(())
    }

    /// Applies the stream until the version is within the swap lag of the source.
    async fn catch_up(
        &mut self,
        dest: &mut Client,
        state: VersionState,
        applier: Applier,
        conn: Option<ReplicationConnection>,
    ) -> Result<VersionState> {
        let url = self.config.source.replication_url();
        let publication = &self.config.backfill.publication;
        let batch = self.config.backfill.apply_batch_changes;
        let mut follower = Follower::start(applier, state, conn, &url, publication, batch).await?;
        self.follow_until_caught_up(dest, &mut follower).await?;
        let mut state = follower.into_state();
        state.set_phase(&*dest, Phase::Ready).await?;
        Ok(state)
    }

    async fn follow_until_caught_up(
        &mut self,
        dest: &mut Client,
        follower: &mut Follower,
    ) -> Result<()> {
        let max_lag = self.config.backfill.swap_max_lag_bytes;
        loop {
            let until = current_wal_lsn(&self.source).await?;
            tracing::info!(
                target = %follower.state().target,
                version = %follower.state().version,
                applied = ?follower.state().applied_lsn.map(|l| l.to_string()),
                %until,
                "catching up"
            );
            match follower.run(dest, Some(until), self.cancel).await? {
                Stop::Cancelled(_) => return Err(Error::Interrupted),
                Stop::Reached(position) => {
                    let now = current_wal_lsn(&self.source).await?;
                    let lag = now.checked_sub(position).unwrap_or(0);
                    if lag <= max_lag {
                        tracing::info!(%position, lag, "caught up");
                        return Ok(());
                    }
                }
            }
        }
    }
}
