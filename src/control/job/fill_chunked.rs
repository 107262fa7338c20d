//! Filling a version by a chunked copy: the slot is made first (its
//! consistent point is where the stream starts), then, after the fence
//! (see [`super::fence`]), each keyset chunk is read in a short
//! transaction of its own and stored with its snapshot. No transaction on
//! the source lasts longer than one chunk, and a copy that stops resumes
//! from its last stored chunk.
//!
//! Why the version is exact: a chunk shows each of its keys as left by the
//! transactions its snapshot sees. A change from the stream replaces a
//! chunk's row only if that snapshot could not see the change's
//! transaction (see [`crate::pipeline::version_sql`]); every transaction a chunk could not
//! see and that committed after the consistent point is in the stream, and
//! every one that committed before it is seen by every chunk (the fence).
//! Stream changes among themselves go by commit LSN as always. The version
//! is complete once every chunk is stored and the stream is applied past
//! the last chunk's WAL position: the catch-up that follows runs to the
//! source's position after the copy, which is past it.

use tokio_postgres::{Client, IsolationLevel};
use walfill_core::sql::quote_literal;
use walfill_snapshot::{CopyFormat, Projection, ReplicationConnection};

use super::copy_rows::{route, rows_label};
use super::slot_wait::Exported;
use super::Context;
use crate::control::state::{FillStart, Phase, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::failpoint;
use crate::pipeline::apply::{run, Store, StreamDesc};
use crate::pipeline::source::chunked::{ChunkedSource, KeyRange};
use crate::pipeline::source::copy::Pace;
use crate::pipeline::version_sql::Plan;
use crate::progress::Progress;
use crate::upstream::slot_exists;

/// Copies the table into the version chunk by chunk, from the start when
/// the version is planned or after its last stored chunk. Returns no
/// connection: the stream opens its own.
pub(super) async fn fill_chunked(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
) -> Result<Option<ReplicationConnection>> {
    let fresh = state.phase != Phase::Copying;
    let loading = fresh && super::key_index::drop_for_load(dest, plan).await?
        || super::key_index::primary_key(dest, plan).await?.is_none();
    if fresh {
        let slot = state.slot_name.clone();
        if slot_exists(cx.source, &slot).await? {
            // Created by a run that died before recording it: unused.
            crate::upstream::drop_slot(cx.source, &slot).await?;
        }
        dest.execute(
            "DELETE FROM walfill.chunk_snapshots WHERE version_table = $1",
            &[&plan.staging_table()],
        )
        .await
        .and(
            dest.execute(
                "DELETE FROM walfill.chunk_ranges WHERE version_table = $1",
                &[&plan.staging_table()],
            )
            .await,
        )
        .map_err(|e| Error::destination("forgetting an earlier copy's chunks", e))?;
        let boundary =
            super::slot_wait::create_slot(cx, dest, state, &slot, Exported::Snapshot).await?;
        failpoint::hit("copy.slot_created");
        // The exported snapshot serves only to describe the stream as of
        // the consistent point; it goes with its connection at once.
        let stream = describe_at(cx, plan, &boundary.snapshot).await?;
        let at = boundary.lsn;
        drop(boundary);
        state
            .start_fill(
                dest,
                FillStart::Copy {
                    boundary: at,
                    stream,
                },
            )
            .await?;
        if cx.config.archive.is_some() && cx.config.archive_settings.base_snapshots {
            tracing::info!(
                "a chunked copy leaves no base snapshot (no single snapshot holds its rows)"
            );
        }
    }
    super::fence::wait_for_running(cx.source, cx.cancel).await?;
    failpoint::hold("copy.fenced").await;
    let mut ranges = super::ranges::load(dest, plan).await?;
    if ranges.is_none() && fresh && cx.config.backfill.workers > 1 {
        ranges =
            Some(super::ranges::plan(cx.source, dest, plan, cx.config.backfill.workers).await?);
    }
    let (direct, format, projection) = route(cx, dest, plan, loading, false).await?;
    tracing::info!(
        table = %plan.staging_table(),
        mode = "chunked: a short transaction per chunk",
        key_index = if loading { "built after the copy" } else { "kept" },
        rows = rows_label(direct, projection.is_some()),
        resume_after = %state.copy_cursor.as_ref().map(|k| k.join(", ")).unwrap_or_else(|| "(start)".into()),
        "loading"
    );
    let store = Store::for_copy(plan.clone(), direct, loading)
        .with_dead_letter_limit(cx.config.backfill.max_dead_letter_percent);
    match ranges {
        None => copy_serially(cx, dest, state, plan, &store, (direct, format, projection)).await?,
        Some(ranges) => {
            tracing::info!(
                ranges = ranges.len(),
                "copying key ranges in parallel, one worker each"
            );
            let workers = ranges.len();
            let copies = ranges.into_iter().map(|pending| {
                let rows = (direct, format, projection.clone());
                copy_range(cx, state, plan, &store, pending, workers, rows)
            });
            futures_util::future::try_join_all(copies).await?;
            // The workers counted the rows on their copies of the state.
            *state = VersionState::load_existing(&*dest, &state.target, &state.version).await?;
        }
    }
    super::key_index::build(dest, plan).await?;
    failpoint::hit("copy.end");
    state.finish_fill(dest, None, None, None).await?;
    Ok(None)
}

/// The copy's pace for each of `workers` workers: the rate cap is shared.
fn pace(cx: &Context<'_>, workers: usize) -> Pace {
    let workers = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
    Pace {
        chunk_rows: cx.config.backfill.chunk_rows,
        max_rows_per_second: cx
            .config
            .backfill
            .max_rows_per_second
            .map(|cap| (cap / workers).max(1)),
    }
}

/// Copies the table in one sequence of chunks, resuming after the
/// version's copy cursor.
async fn copy_serially(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
    store: &Store,
    rows: Rows,
) -> Result<()> {
    let total = u64::try_from(state.rows_estimated).ok().filter(|t| *t > 0);
    let done = u64::try_from(state.rows_copied).unwrap_or(0);
    let progress = Progress::new(format!("copy {}", state.label()), total, done);
    let after = state.copy_cursor.clone();
    let part = Part {
        range: None,
        after,
        pace: pace(cx, 1),
        rows,
        progress,
    };
    copy_part(cx, dest, state, plan, store, part).await
}

/// Copies one key range on a destination session of its own, resuming
/// after the range's last stored key; records the range done.
async fn copy_range(
    cx: &Context<'_>,
    state: &VersionState,
    plan: &Plan,
    store: &Store,
    pending: super::ranges::Pending,
    workers: usize,
    rows: Rows,
) -> Result<()> {
    let mut dest = db::connect(&cx.config.destination, Role::Destination).await?;
    crate::pipeline::version_sql::create_work_table(&dest, plan).await?;
    let mut state = state.clone();
    let no = pending.range.no;
    let done = u64::try_from(pending.rows).unwrap_or(0);
    let part = Part {
        range: Some(pending.range),
        after: pending.cursor,
        pace: pace(cx, workers),
        rows,
        progress: Progress::new(format!("copy {} range {no}", state.label()), None, done),
    };
    copy_part(cx, &mut dest, &mut state, plan, store, part).await?;
    super::ranges::done(&dest, plan, no).await
}

/// Whether rows go straight into the version's table, how they travel, and
/// the transform the source evaluates over them, if it does.
type Rows = (bool, CopyFormat, Option<Projection>);

/// What one sequence of chunks reads.
struct Part {
    range: Option<KeyRange>,
    after: Option<Vec<String>>,
    pace: Pace,
    rows: Rows,
    progress: Progress,
}

/// Reads `part`'s chunks and stores them through the apply loop on `dest`.
async fn copy_part(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
    store: &Store,
    part: Part,
) -> Result<()> {
    let ranged = part.range.is_some();
    let direct = part.rows.0 || part.rows.2.is_some();
    let mut copy = ChunkedSource::open(
        cx.config.source.clone(),
        plan,
        part.range,
        part.after,
        part.pace,
        part.rows,
        part.progress,
        cx.cancel.clone(),
    );
    failpoint::hit("copy.start");
    let (target, version, slot) = (
        state.target.clone(),
        state.version.clone(),
        state.slot_name.clone(),
    );
    let mut throttled =
        super::throttle::Throttled::new(&mut copy, cx.config, &target, &version, &slot, cx.cancel);
    // A load of one sequence of chunks stores them on several sessions;
    // key ranges copied in parallel are already on sessions of their own.
    let ran = if direct || !store.is_loading() || ranged {
        run(dest, store, state, &mut throttled, cx.cancel, "copy").await
    } else {
        super::writers::load(cx, dest, (plan, store), state, &mut throttled, "copy").await
    };
    copy.finish().await;
    ran.map(|_| ())
}

/// The columns the stream sends, as of the exported snapshot `snapshot`.
async fn describe_at(cx: &Context<'_>, plan: &Plan, snapshot: &str) -> Result<StreamDesc> {
    let mut session = db::connect(&cx.config.source, Role::Source).await?;
    let tx = session
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(|e| Error::source_query("opening the slot's snapshot", e))?;
    tx.batch_execute(&format!(
        "SET TRANSACTION SNAPSHOT {}",
        quote_literal(snapshot)
    ))
    .await
    .map_err(|e| Error::source_query("importing the slot's snapshot", e))?;
    let desc = StreamDesc::from_catalog(&tx, plan.source.oid).await?;
    tx.commit()
        .await
        .map_err(|e| Error::source_query("closing the slot's snapshot", e))?;
    Ok(desc)
}
