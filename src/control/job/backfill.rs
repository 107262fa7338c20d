//! `walfill backfill`: build a target's configured version (fill it by
//! replay or from a snapshot, catch it up with the live stream) and swap it
//! in.
//!
//! The version's phase is recorded before each step and every unit of work
//! is committed with the position after it, so running the same command
//! again after any failure (or `kill -9`) resumes where the last one
//! stopped, from every phase.

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_snapshot::ReplicationConnection;

use super::fill_copy::fill_copy;
use super::fill_replay::fill_replay;
use super::follow::{catch_up, Follower};
use super::path::choose;
use super::swap;
use super::Context;
use crate::config::Config;
use crate::control::route::PathChoice;
use crate::control::state::{self, lock, NewVersion, Path, Phase, VersionState};
use crate::db::{self, Role};
use crate::error::{Directive, Error, Loss, LostVersion, Result};
use crate::failpoint;
use crate::pipeline::version_sql::{self, Definition, Plan};
use crate::upstream::require_publication;

/// How a backfill runs.
#[derive(Clone, Debug, Default)]
pub struct BackfillOptions {
    /// Stop when caught up instead of swapping the view.
    pub no_swap: bool,
    /// How the version is built.
    pub path: PathChoice,
    /// Verify it before the swap (none: the target's, else `[backfill]`'s
    /// `verify_before_swap`).
    pub verify_before_swap: Option<bool>,
}

/// Builds (or resumes) the configured version of target `name`.
pub async fn backfill(
    config: &Config,
    name: &str,
    options: &BackfillOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    backfill_target(config, config.target(name)?, options, cancel).await
}

/// Builds (or resumes) the version of `target` it names (its transform, a
/// version name that may not be the configured one).
pub async fn backfill_target(
    config: &Config,
    target: &crate::config::Target,
    options: &BackfillOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    match build(config, target, options, cancel).await {
        // `sync_enum_labels`: add what the source has, then go on where the
        // build stopped (once: a second time would mean they did not take).
        Err(Error::EnumLabels { labels, .. }) if target.sync_enum_labels => {
            let dest = db::connect(&config.destination, Role::Destination).await?;
            crate::pipeline::enum_labels::add(&dest, &labels).await?;
            drop(dest);
            build(config, target, options, cancel).await
        }
        other => other,
    }
}

/// One run of [`backfill_target`].
async fn build(
    config: &Config,
    target: &crate::config::Target,
    options: &BackfillOptions,
    cancel: &CancellationToken,
) -> Result<()> {
    let name = target.name.as_str();
    let wanted = Definition::from_config(target);
    let source = db::connect(&config.source, Role::Source).await?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    if config.archive.is_some() {
        crate::upstream::journal::record_moved_files(&source).await;
    }
    let what = format!("version {} of {}", wanted.version, wanted.target);
    lock::acquire(
        &dest,
        &format!("version:{}:{}", wanted.target, wanted.version),
        &what,
        lock::DEFAULT_WAIT,
    )
    .await?;

    let existing = VersionState::load(&dest, &wanted.target, &wanted.version).await?;
    let mut state = match existing {
        Some(mut recorded) => {
            same_definition(&recorded, &wanted)?;
            if recorded.phase == Phase::Retired {
                return Err(Error::refused(
                    format!("version {} of {name} was retired", recorded.version),
                    "configure a new version to rebuild",
                ));
            }
            if recorded.source_desc.is_none() {
                // Recorded by an older walfill: described by name, once.
                let table = version_sql::describe(&source, &wanted).await?;
                recorded.adopt_description(&dest, &table).await?;
            }
            recorded
        }
        None => {
            let table = version_sql::describe(&source, &wanted).await?;
            let plan = version_sql::build(&dest, &wanted, table.clone()).await?;
            crate::control::dependents::check(&dest, target, &plan).await?;
            create_staging(&dest, &plan).await?;
            VersionState::create(
                &mut dest,
                &NewVersion {
                    target: &wanted.target,
                    version: &wanted.version,
                    dest_schema: &wanted.dest_schema,
                    table_name: &wanted.table,
                    source: &table,
                    select_sql: &wanted.select,
                    filter_sql: wanted.filter.as_deref(),
                    key_columns: &table.key,
                    slot_name: &wanted.slot_name(&config.deployment_tag()),
                },
            )
            .await?
        }
    };
    // A live version whose slot is gone missed changes: it is rebuilt (an
    // active one beside the table readers see, until the swap).
    if state.phase.is_live() && state.lost.is_none() {
        let health = crate::upstream::slot_health(&source, &state.slot_name).await?;
        if health != crate::upstream::SlotHealth::Kept {
            let reason = format!(
                "its replication slot {} is gone or invalidated",
                state.slot_name
            );
            state.mark_lost(&mut dest, &reason).await?;
        }
    }
    if matches!(state.phase, Phase::Ready | Phase::Previous) {
        if let Some(reason) = state.lost.clone() {
            state.rebuild(&mut dest, &reason).await?;
        }
    } else if state.phase == Phase::Active {
        if let Some(reason) = state.lost.clone() {
            tracing::warn!(
                target = name,
                version = %state.version,
                %reason,
                "the active version lost changes; rebuilding it beside the table readers see, \
                 which the swap replaces"
            );
            state.rebuild_aside(&mut dest, &reason).await?;
        }
    }
    let relid = state
        .source_relid
        .ok_or_else(|| Error::Internal("the version has no source table OID".into()))?;
    require_publication(&source, &config.backfill.publication, relid).await?;
    let def = state.definition();
    let plan = state.plan(&dest).await?;
    for warning in &plan.warnings {
        tracing::warn!("{warning}");
    }
    create_staging(&dest, &plan).await?;
    state.take_lease(&dest).await?;
    state::record_event(
        &dest,
        &def.target,
        Some(&def.version),
        "backfill_started",
        serde_json::json!({ "phase": state.phase.as_str(), "path": state.path.as_str() }),
    )
    .await?;

    let cx = Context {
        config,
        source: &source,
        cancel,
    };
    let result = match Box::pin(run(&cx, &mut dest, &mut state, &plan, options)).await {
        Err(e) => Err(crate::pipeline::enum_labels::explain(&source, &dest, &plan, name, e).await),
        ok => ok,
    };
    match &result {
        Err(Error::Interrupted) => {
            tracing::warn!(
                target = name,
                "interrupted; progress is saved, rerun to resume"
            );
        }
        Err(e) => {
            VersionState::record_error(&dest, &def.target, &def.version, &e.describe()).await;
        }
        Ok(()) => {}
    }
    result
}

async fn create_staging(dest: &Client, plan: &Plan) -> Result<()> {
    dest.batch_execute(&plan.staging_ddl())
        .await
        .map_err(|e| Error::destination(format!("creating {}", plan.staging_table()), e))?;
    plan.verify_staging(dest).await
}

/// Whether a recorded version was built from the definition `wanted`
/// (same transform, schema and key).
pub fn defines_same(recorded: &VersionState, wanted: &Definition) -> bool {
    recorded.select_sql == wanted.select
        && recorded.filter_sql == wanted.filter
        && recorded.dest_schema == wanted.dest_schema
        && wanted
            .key
            .as_ref()
            .is_none_or(|k| *k == recorded.key_columns)
}

fn same_definition(recorded: &VersionState, wanted: &Definition) -> Result<()> {
    if defines_same(recorded, wanted) {
        return Ok(());
    }
    Err(Error::refused(
        format!(
            "version {} of target {} was built from a different definition (select {:?}, where \
             {:?})",
            recorded.version, recorded.target, recorded.select_sql, recorded.filter_sql
        ),
        "give the new definition a new version, or restore the old one",
    ))
}

/// Runs the version's remaining phases, each from what the state records.
async fn run(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
    options: &BackfillOptions,
) -> Result<()> {
    let mut stream_conn: Option<ReplicationConnection> = None;
    loop {
        match state.phase {
            Phase::Planned => {
                let path = choose(cx, dest, plan, state, options.path).await?;
                stream_conn = fill(cx, dest, state, plan, path, options).await?;
            }
            Phase::Replaying if options.path == PathChoice::Snapshot => {
                fall_back(cx, dest, state, "asked for with --path snapshot").await?;
            }
            Phase::Replaying => {
                stream_conn = fill(cx, dest, state, plan, Path::Replay, options).await?;
            }
            Phase::Copying => {
                stream_conn = fill(cx, dest, state, plan, Path::Snapshot, options).await?;
            }
            Phase::CatchingUp => {
                let catalog = db::connect(&cx.config.source, Role::Source).await?;
                let opened =
                    Follower::open(cx, catalog, state, plan, stream_conn.take(), None).await;
                let mut follower = match opened {
                    Err(Error::Lost(lost)) => {
                        tracing::warn!(reason = %lost.reason, "building the version again");
                        state.rebuild(dest, &lost.reason).await?;
                        continue;
                    }
                    other => other?,
                };
                catch_up(cx, dest, state, &mut follower, "catchup").await?;
                state.caught_up(dest).await?;
            }
            Phase::Ready | Phase::Previous | Phase::Active if state.lost.is_some() => {
                // Lost while this run went on: start over from the top.
                return Err(LostVersion {
                    target: state.target.clone(),
                    version: state.version.clone(),
                    loss: Loss::Changes,
                    reason: format!(
                        "{}, while it was built",
                        state.lost.as_deref().unwrap_or("")
                    ),
                    fix: Some("run the backfill again to rebuild it".into()),
                }
                .into());
            }
            Phase::Ready if options.no_swap => {
                tracing::info!(
                    target = %state.target,
                    version = %state.version,
                    "caught up; swap it in with `walfill swap {} {}`",
                    state.target,
                    state.version
                );
                return Ok(());
            }
            Phase::Ready => {
                let configured = cx.config.target(&state.target).ok();
                if verifies(cx.config, configured, options.verify_before_swap) {
                    verify_before_swap(cx, dest, state).await?;
                }
                failpoint::hit("swap.start");
                return swap::swap(
                    cx.config,
                    dest,
                    &state.target,
                    &state.version,
                    false,
                    cx.cancel,
                )
                .await;
            }
            Phase::Active => {
                tracing::info!(target = %state.target, version = %state.version, "already active; nothing to do");
                return Ok(());
            }
            Phase::Previous => {
                tracing::info!(
                    target = %state.target,
                    version = %state.version,
                    "built and kept for rollback; `walfill swap {} {}` publishes it again",
                    state.target,
                    state.version
                );
                return Ok(());
            }
            Phase::Retired => {
                return Err(Error::refused_no_fix(format!(
                    "version {} of {} was retired",
                    state.version, state.target
                )))
            }
        }
    }
}

/// Whether a version is verified before its swap: as its request says,
/// else as its target says, else as `[backfill]` says.
pub fn verifies(
    config: &Config,
    target: Option<&crate::config::Target>,
    requested: Option<bool>,
) -> bool {
    requested
        .or(target.and_then(|t| t.verify_before_swap))
        .unwrap_or(config.backfill.verify_before_swap)
}

/// `verify_before_swap`: compares the caught-up version with the transform
/// of its source before it is published, while a sync task of this process
/// keeps it following the stream (the version's lock is handed to it for
/// the while, and taken back for the swap).
async fn verify_before_swap(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &VersionState,
) -> Result<()> {
    let name = format!("version:{}:{}", state.target, state.version);
    let what = format!("version {} of {}", state.version, state.target);
    lock::release(dest, &name).await?;
    let follow = cx.cancel.child_token();
    let sync = {
        let config = cx.config.clone();
        let target = state.target.clone();
        let token = follow.clone();
        tokio::spawn(async move {
            let options = super::SyncOptions {
                once: false,
                shared: true,
            };
            super::sync(&config, &[target], &options, &token).await
        })
    };
    tracing::info!(target = %state.target, version = %state.version, "verifying before the swap");
    let verified = crate::control::verify::verify_version(
        cx.config,
        dest,
        &state.target,
        &state.version,
        cx.cancel,
    )
    .await;
    follow.cancel();
    let _ = sync.await;
    lock::acquire(dest, &name, &what, lock::DEFAULT_WAIT).await?;
    let verified = verified?;
    let differs = "differs from the transform of its source, so it is not swapped in";
    verified
        .record(&*dest, &state.target, &state.version, differs)
        .await?;
    tracing::info!(
        target = %state.target,
        version = %state.version,
        rows = verified.rows,
        ranges = verified.ranges,
        "verified: the version equals the transform of its source"
    );
    Ok(())
}

/// Fills the version by `path`, falling back from a replay the archive
/// cannot serve to a snapshot when the path is not forced.
async fn fill(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
    path: Path,
    options: &BackfillOptions,
) -> Result<Option<ReplicationConnection>> {
    match path {
        Path::Snapshot => fill_copy(cx, dest, state, plan).await,
        Path::Replay => match fill_replay(cx, dest, state, plan).await {
            Err(e) if e.directive() == Directive::FallBack => {
                let reason = e.describe();
                if options.path == PathChoice::Replay {
                    return Err(Error::refused(
                        format!("the replay cannot go on: {reason}"),
                        "run without --path replay to build the version from a snapshot",
                    ));
                }
                fall_back(cx, dest, state, &reason).await?;
                Ok(None)
            }
            other => other,
        },
    }
}

/// Gives up a replay the archive cannot serve: the version will be copied
/// from a snapshot instead (one transaction).
async fn fall_back(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    reason: &str,
) -> Result<()> {
    tracing::warn!(
        target = %state.target,
        version = %state.version,
        %reason,
        "cannot replay; building the version from a snapshot instead"
    );
    failpoint::hit("fallback.start");
    // The replay's slot has no snapshot to copy from: the copy makes its own.
    if crate::upstream::slot_exists(cx.source, &state.slot_name).await? {
        crate::upstream::drop_slot(cx.source, &state.slot_name).await?;
    }
    state.fall_back(dest, reason).await?;
    failpoint::hit("fallback.end");
    Ok(())
}
