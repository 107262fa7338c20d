//! Filling a version from a snapshot: the slot's exported snapshot copied
//! in keyset chunks through the apply loop, the rows also written to the
//! archive as a base snapshot for later replays. Large tables are read in
//! chunks of their own instead (see [`super::fill_chunked`]).

use tokio_postgres::Client;
use walfill_snapshot::{Boundary, CopyFormat, ReplicationConnection};

use super::copy_rows::{route, rows_label};
use super::slot_wait::Exported;
use super::Context;
use crate::config::SnapshotMode;
use crate::control::state::{FillStart, Phase, VersionState};
use crate::db::{self, Role};
use crate::error::Result;
use crate::failpoint;
use crate::pipeline::apply::{run, Store};
use crate::pipeline::source::copy::{CopySource, Pace, Snapshot};
use crate::pipeline::version_sql::Plan;
use crate::progress::Progress;
use crate::upstream::slot_exists;

/// Copies the table into the version: from the start (a new slot and its
/// snapshot are the boundary) when the version is planned, or, for a copy
/// interrupted earlier, from its cursor in a new snapshot (rows copied from
/// it carry its later LSN, and the version rule keeps them right). Returns
/// the connection that created the slot, if this run created it, for the
/// stream to start on.
pub(super) async fn fill_copy(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    plan: &Plan,
) -> Result<Option<ReplicationConnection>> {
    if chunked(cx.config, state) {
        return Box::pin(super::fill_chunked::fill_chunked(cx, dest, state, plan)).await;
    }
    let url = db::replication_url(&cx.config.source);
    let slot = state.slot_name.clone();
    let pace = Pace {
        chunk_rows: cx.config.backfill.chunk_rows,
        max_rows_per_second: cx.config.backfill.max_rows_per_second,
    };
    let snapshot_session = db::connect(&cx.config.source, Role::Source).await?;
    let fresh = state.phase != Phase::Copying;
    // A fresh table is loaded without its key (see `key_index`); a table
    // that already holds rows (a resumed copy that loaded with its key)
    // keeps it.
    let loading = fresh && super::key_index::drop_for_load(dest, plan).await?
        || super::key_index::primary_key(dest, plan).await?.is_none();
    let (boundary, base) = if fresh {
        if slot_exists(cx.source, &slot).await? {
            // Created by a run that died before recording it: unused.
            crate::upstream::drop_slot(cx.source, &slot).await?;
        }
        let boundary =
            super::slot_wait::create_slot(cx, dest, state, &slot, Exported::Snapshot).await?;
        failpoint::hit("copy.slot_created");
        let base = super::base::writer(cx.config, cx.source, plan, &slot, boundary.lsn).await;
        (boundary, base)
    } else {
        // The snapshot died with the previous run: a temporary slot gives a
        // new one.
        let temporary = format!("{}_{}", &slot[..slot.len().min(50)], std::process::id());
        let boundary = Boundary::create(&url, &temporary, true)?;
        state.resume_copy(dest, boundary.lsn).await?;
        if base_writer_possible(cx).await {
            tracing::info!(
                "the copy was interrupted, so it leaves no base snapshot for later replays; the \
                 next snapshot backfill of this table that runs uninterrupted leaves one"
            );
        }
        (boundary, None)
    };
    // The base snapshot keeps the source's rows, so rows go straight into
    // the table only without one.
    let with_base = base.is_some();
    let (direct, format, projection) = route(cx, dest, plan, loading, with_base).await?;
    let copy = open(
        cx,
        snapshot_session,
        plan,
        (&boundary.snapshot, boundary.lsn, format),
        (direct, projection),
        state.copy_cursor.clone().filter(|_| !fresh),
        pace,
        state,
        base,
    )
    .await?;
    let mut stream_conn = None;
    if fresh {
        state
            .start_fill(
                dest,
                FillStart::Copy {
                    boundary: boundary.lsn,
                    stream: copy.stream_desc.clone(),
                },
            )
            .await?;
        stream_conn = Some(boundary.connection);
    } else {
        // The copy imported the temporary slot's snapshot: the slot goes.
        drop(boundary);
    }
    failpoint::hit("copy.start");
    let projected = copy.projected();
    tracing::info!(
        table = %plan.staging_table(),
        key_index = if loading { "built after the copy" } else { "kept" },
        rows = rows_label(direct, projected),
        "loading"
    );
    let store = Store::for_copy(plan.clone(), direct, loading)
        .with_dead_letter_limit(cx.config.backfill.max_dead_letter_percent);
    let mut copy = copy;
    let (target, version) = (state.target.clone(), state.version.clone());
    let mut throttled =
        super::throttle::Throttled::new(&mut copy, cx.config, &target, &version, &slot, cx.cancel);
    if loading && !projected {
        super::writers::load(cx, dest, (plan, &store), state, &mut throttled, "copy").await?;
    } else {
        run(&mut *dest, &store, state, &mut throttled, cx.cancel, "copy").await?;
    }
    let (_session, base_writer) = copy.finish().await?;
    if let (true, Some(writer)) = (fresh, base_writer) {
        if let Err(e) = writer.finish().await {
            tracing::warn!(error = %e.describe(), "the base snapshot could not be completed");
        }
    }
    super::key_index::build(dest, plan).await?;
    failpoint::hit("copy.end");
    state.finish_fill(dest, None, None, None).await?;
    Ok(stream_conn)
}

/// Whether the table is read chunk by chunk, each in a snapshot of its
/// own, rather than in the slot's exported snapshot (`backfill.snapshot`).
fn chunked(config: &crate::config::Config, state: &VersionState) -> bool {
    match config.backfill.snapshot {
        SnapshotMode::Chunked => true,
        SnapshotMode::Exported => false,
        SnapshotMode::Auto => {
            u64::try_from(state.rows_estimated).unwrap_or(0) > config.backfill.chunked_above_rows
        }
    }
}

/// Opens the copy of `plan`'s table in the exported snapshot `(name, lsn)`,
/// its rows travelling in `format`.
#[allow(clippy::too_many_arguments)]
async fn open(
    cx: &Context<'_>,
    session: Client,
    plan: &Plan,
    (snapshot, lsn, format): (&str, walfill_core::Lsn, CopyFormat),
    (direct, projection): (bool, Option<walfill_snapshot::Projection>),
    after: Option<Vec<String>>,
    pace: Pace,
    state: &VersionState,
    base: Option<crate::pipeline::base::BaseWriter>,
) -> Result<CopySource> {
    let total = u64::try_from(state.rows_estimated).ok().filter(|t| *t > 0);
    let done = u64::try_from(state.rows_copied).unwrap_or(0);
    let progress = Progress::new(format!("copy {}", state.label()), total, done);
    tracing::info!(
        target = %state.target,
        version = %state.version,
        snapshot_lsn = %lsn,
        resume_after = %after.as_ref().map(|k| k.join(", ")).unwrap_or_else(|| "(start)".into()),
        "copying"
    );
    CopySource::open(
        session,
        cx.source,
        plan,
        Snapshot {
            name: snapshot.to_string(),
            lsn,
            scope: None,
            with_hidden: direct,
            format,
            projection,
        },
        after,
        pace,
        progress,
        base,
        cx.cancel.clone(),
    )
    .await
}

/// Whether a snapshot copy can leave a base snapshot: a store of bases
/// (an archive of walfill's own layout, or `bases_url`), with base
/// snapshots on.
async fn base_writer_possible(cx: &Context<'_>) -> bool {
    let Some(opened) = cx.config.open_bases() else {
        return false;
    };
    if !cx.config.archive_settings.base_snapshots {
        return false;
    }
    match opened {
        Ok(archive) => matches!(
            archive.layout().await,
            Ok(walfill_replay::archive::Layout::Walfill)
        ),
        Err(_) => false,
    }
}
