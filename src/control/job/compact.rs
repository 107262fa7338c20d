//! `walfill compact`: a table's newest base snapshot rolled forward with
//! the archived WAL since, written as a new base, from the archive alone.
//!
//! Like Neon's pageserver, which folds delta layers into new image layers
//! so that reading a page never needs the whole history, compaction keeps
//! what a replay must decode bounded: the next replay of the table starts
//! from the new base, not from the old one or the table's creation.
//!
//! The new base's boundary is a record at the start of the newest complete
//! archived segment, and its restart point the latest running-transactions
//! record from which every transaction in progress at that boundary is
//! seen whole (as a slot created there would have). The old base's rows and
//! the WAL from its restart point to the new boundary are folded as a
//! replay folds them, and the merged rows written as the new base, its
//! manifest last: a compaction killed at any point leaves the old base
//! usable, and a rerun writes the new one again. Nothing is read from the
//! source and no slot is created: the WAL accepted is the cluster's the old
//! base's manifest records, on the archive's newest timeline (a base an
//! older walfill wrote, without it, makes compaction ask the source who it
//! is).

use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;
use walfill_replay::archive::Archive;
use walfill_replay::decode::Identity;
use walfill_replay::TimelineId;

use crate::config::Config;
use crate::control::route::source_identity;
use crate::control::state::{self, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::apply::HistorySource;
use crate::pipeline::base::{find_bases_of, BaseWriter, Manifest};
use crate::pipeline::source::replay::{FoldSpace, Output, ReplayRange, ReplaySource};
use crate::pipeline::version_sql::Plan;

/// What one table's compaction did.
#[derive(Debug)]
pub struct Compacted {
    /// `schema.table`.
    pub table: String,
    /// The new base's boundary, when one was written.
    pub boundary: Option<Lsn>,
    /// Its rows.
    pub rows: u64,
    /// What happened, for the operator.
    pub note: String,
}

/// Compacts the bases of the tables the named targets read (every
/// configured target's when none is named).
pub async fn compact(
    config: &Config,
    names: &[String],
    cancel: &CancellationToken,
) -> Result<Vec<Compacted>> {
    let url = config
        .archive
        .as_deref()
        .ok_or_else(|| Error::refused("compaction reads the archive", "configure [archive] url"))?;
    if !config.archive_settings.base_snapshots {
        return Err(Error::refused_no_fix(
            "[archive] base_snapshots = false: walfill keeps no base snapshots, so there is \
             nothing to compact",
        ));
    }
    let archive = config.open_archive(url)?;
    let bases = config
        .open_bases()
        .ok_or_else(|| Error::refused_no_fix("no store of base snapshots is configured"))??;
    bases.check_writable().await?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let targets = select(config, names)?;
    let versions = VersionState::list(&dest).await?;
    let mut done: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for target in targets {
        // A built version of the target knows the table (its OID) and the
        // columns a base of it holds.
        let Some(version) = versions
            .iter()
            .rev()
            .find(|v| v.target == target.name && v.phase.is_live() && v.source_relid.is_some())
        else {
            out.push(Compacted {
                table: format!("{}", target.source),
                boundary: None,
                rows: 0,
                note: format!(
                    "target {} has no built version yet, so nothing says which table it reads",
                    target.name
                ),
            });
            continue;
        };
        let relid = version.source_relid.unwrap_or_default();
        if done.contains(&relid) {
            continue;
        }
        done.push(relid);
        let plan = version.plan(&dest).await?;
        out.push(compact_table(config, &archive, &bases, &plan, cancel).await?);
    }
    retire_summaries(&archive, &bases).await;
    Ok(out)
}

/// Deletes the segment summaries of WAL the archive no longer holds (its
/// tool's retention expired it), so that summaries do not pile up for
/// months. A failure is only reported: the next compaction tries again.
async fn retire_summaries(archive: &Archive, bases: &Archive) {
    let retired = async {
        let list = archive.segments(None).await?;
        let Some(oldest) = list.segments.iter().map(|s| s.name.segno).min() else {
            return Ok(0);
        };
        bases.retire_summaries(oldest, list.segment_size).await
    };
    match retired.await {
        Ok(0) => {}
        Ok(n) => tracing::info!(summaries = n, "retired the summaries of expired segments"),
        Err(e) => tracing::warn!(error = %e, "could not retire old segment summaries"),
    }
}

async fn compact_table(
    config: &Config,
    archive: &Archive,
    bases: &Archive,
    plan: &Plan,
    cancel: &CancellationToken,
) -> Result<Compacted> {
    let table = plan.source.to_string();
    let nothing = |note: String| Compacted {
        table: table.clone(),
        boundary: None,
        rows: 0,
        note,
    };
    let Some(old) = find_bases_of(bases, plan.source.oid)
        .await?
        .into_iter()
        .next()
    else {
        return Ok(nothing(
            "no base snapshot to start from: a snapshot backfill or a replay of the table \
             leaves one"
                .into(),
        ));
    };
    let columns: Vec<String> = plan
        .source
        .replicated_columns()
        .map(|c| c.name.clone())
        .collect();
    if columns != old.columns {
        return Ok(nothing(format!(
            "its newest base (at {}) holds columns {:?}, and the table now has {:?}: a \
             snapshot backfill or a replay of the table leaves a base of its new shape",
            old.boundary, old.columns, columns
        )));
    }
    let (boundary, restart) = match new_boundary(archive).await? {
        Some(found) => found,
        None => return Ok(nothing("the archive holds no complete segment".into())),
    };
    if boundary <= old.boundary {
        return Ok(nothing(format!(
            "its newest base (at {}) is as recent as the archive's newest complete segment",
            old.boundary
        )));
    }
    // Whose WAL to accept: the cluster the old base recorded, on the
    // archive's newest timeline; only an older base without it makes
    // compaction ask the source.
    let identity = match old.system_id {
        Some(system_id) => archive_identity(archive, system_id).await?,
        None => source_identity(config).await?,
    };
    crate::failpoint::hit("compact.start");
    tracing::info!(
        table = %table,
        from = %old.boundary,
        to = %boundary,
        restart = %restart,
        wal_mib = (boundary.0.saturating_sub(old.restart_lsn.0)) >> 20,
        "compacting: the base's rows and the archived WAL since, folded into a new base"
    );
    let writer = BaseWriter::new(
        bases.clone(),
        old.database,
        old.relation.clone(),
        old.columns.clone(),
        (boundary, restart),
    )
    .keeping(config.archive_settings.keep_bases)
    .of_system(Some(identity.system_id));
    let range = ReplayRange {
        database: old.database,
        restart: old.restart_lsn,
        emit_from: old.from_lsn,
        boundary,
        known: Some(old.relation.clone()),
        base: Some(Box::new(old.clone())),
        bases: Some(bases.clone()),
        loaded: None,
        from_creation: false,
        identity,
    };
    let space = FoldSpace {
        memory: config.backfill.replay_memory_bytes,
        spill_dir: config.backfill.spill_dir.clone(),
        batch_rows: config.backfill.chunk_rows as usize,
    };
    let mut source = ReplaySource::start(
        archive,
        range,
        plan,
        space,
        format!("compact {table}"),
        cancel.clone(),
        Output::BaseOnly(writer),
    )
    .await?;
    // The merged rows go to the base on the fold thread; only their count
    // comes here.
    let mut rows = 0u64;
    while let Some(batch) = source.next().await? {
        if let Some(crate::pipeline::apply::Cursor::Merged { rows: n, .. }) = batch.cursor {
            rows += n as u64;
        }
    }
    let outcome = source.finish().await?;
    if !outcome.reached_boundary {
        return Err(Error::history(format!(
            "the archived WAL ends at {}, before the compaction's boundary {boundary}",
            outcome.end
        )));
    }
    let written = find_bases_of(bases, plan.source.oid)
        .await?
        .into_iter()
        .any(|m: Manifest| m.boundary == boundary);
    Ok(Compacted {
        table,
        boundary: written.then_some(boundary),
        rows,
        note: if written {
            format!(
                "a new base at {boundary}: the base at {} and {} MiB of WAL folded",
                old.boundary,
                boundary.0.saturating_sub(old.restart_lsn.0) >> 20
            )
        } else {
            "no new base: see the log for why".into()
        },
    })
}

/// The targets `names` name: each a target, or a source table
/// (`schema.table`) that configured targets read (every target's when none
/// is named).
fn select<'a>(config: &'a Config, names: &[String]) -> Result<Vec<&'a crate::config::Target>> {
    let mut out = Vec::new();
    for name in names {
        let reading: Vec<_> = config
            .targets
            .iter()
            .filter(|t| t.source.to_string() == *name)
            .collect();
        match config.target(name) {
            Ok(target) => out.push(target),
            Err(_) if !reading.is_empty() => out.extend(reading),
            Err(e) => {
                let tables: Vec<String> = config
                    .targets
                    .iter()
                    .map(|t| t.source.to_string())
                    .collect();
                return Err(Error::refused_no_fix(format!(
                    "{e}; nor is {name:?} a table a target reads ({})",
                    if tables.is_empty() {
                        "none".to_string()
                    } else {
                        tables.join(", ")
                    }
                )));
            }
        }
    }
    if names.is_empty() {
        out.extend(config.targets.iter());
    }
    Ok(out)
}

/// The identity of cluster `system_id` as the archive shows it: its newest
/// timeline, and that timeline's history file.
async fn archive_identity(archive: &Archive, system_id: u64) -> Result<Identity> {
    let list = archive.segments(None).await?;
    let timeline = list
        .timelines()
        .into_iter()
        .chain(list.histories.iter().copied())
        .max()
        .unwrap_or(TimelineId(1));
    let history = match archive.history_text(&list, timeline).await? {
        Some(text) => text,
        None => {
            return Err(Error::history(format!(
                "the archive holds WAL of timeline {timeline} but not its history file, which \
                 says how it branched; store it in the archive, or compact with the source up"
            )))
        }
    };
    Identity::new(system_id, timeline.0, &history)
        .map_err(|e| Error::history(format!("the archive's history of timeline {timeline}: {e}")))
}

/// The new base's boundary (the first record of the newest complete
/// segment) and its restart point, found in the archive.
async fn new_boundary(archive: &Archive) -> Result<Option<(Lsn, Lsn)>> {
    let list = archive.segments(None).await?;
    let size = u64::from(list.segment_size);
    let Some(newest) = list
        .segments
        .iter()
        .filter(|s| !s.partial)
        .map(|s| s.name.segno)
        .max()
    else {
        return Ok(None);
    };
    let anchor = newest.start_lsn(size);
    let archive = archive.clone();
    let runtime = tokio::runtime::Handle::current();
    let start = tokio::task::spawn_blocking(move || {
        crate::pipeline::source::replay::start::find(&archive, &runtime, anchor)
    })
    .await
    .map_err(|e| Error::Internal(format!("the scanning thread failed: {e}")))??;
    Ok(Some((start.first_record, start.restart)))
}

/// The targets whose table's newest base is followed by more than
/// `after_mib` MiB of archived WAL (those worth compacting now), each with
/// that amount. Tables without a base are left out: nothing to start from.
pub async fn due(config: &Config, after_mib: u64) -> Result<Vec<(String, u64)>> {
    let Some(url) = config.archive.as_deref() else {
        return Ok(Vec::new());
    };
    let Some(bases) = config.open_bases() else {
        return Ok(Vec::new());
    };
    let (archive, bases) = (config.open_archive(url)?, bases?);
    let list = archive.segments(None).await?;
    let size = u64::from(list.segment_size);
    let Some(end) = list
        .segments
        .iter()
        .filter(|s| !s.partial)
        .map(|s| s.name.segno.start_lsn(size).0 + size)
        .max()
    else {
        return Ok(Vec::new());
    };
    let dest = db::connect(&config.destination, Role::Destination).await?;
    let versions = VersionState::list(&dest).await?;
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for target in &config.targets {
        let Some(relid) = versions
            .iter()
            .rev()
            .find(|v| v.target == target.name && v.phase.is_live())
            .and_then(|v| v.source_relid)
        else {
            continue;
        };
        if seen.contains(&relid) {
            continue;
        }
        seen.push(relid);
        if let Some(newest) = find_bases_of(&bases, relid).await?.into_iter().next() {
            let since = end.saturating_sub(newest.restart_lsn.0) >> 20;
            if since > after_mib {
                out.push((target.name.clone(), since));
            }
        }
    }
    Ok(out)
}
