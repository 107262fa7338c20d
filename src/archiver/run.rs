//! `walfill archive`: startup (slot, start position), the sessions with
//! reconnects, and the end.
//!
//! **Where streaming starts.** The archive is read once at startup, for the
//! server's current timeline, from the segment holding the slot's
//! `restart_lsn`: streaming starts at the first segment from there on that
//! the archive does not hold complete. A `.partial` file is not trusted to
//! be whole: its segment is streamed again from its start and the file
//! rewritten as the stream passes its end. On the first start the slot was
//! just created, so this is the start of the segment holding its
//! `restart_lsn` (the last checkpoint's redo point). After a reconnect
//! within one run, streaming restarts at the start of the segment that was
//! being filled.
//!
//! This is correct because the slot's flush position only ever moves to
//! positions the archive holds: the server keeps every segment from
//! `restart_lsn` on, and everything before the start is in the archive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use walfill_replay::archive::Archive;
use walfill_replay::{Lsn, SegmentNo, TimelineId};

use crate::config::Config;
use crate::retry::Backoff;

use super::error::ArchiverError;
use super::replication::{is_valid_slot_name, Source, SystemInfo};
use super::stream::{Confirmed, Session, SessionEnd, Settings};
use super::writer::Writer;
use super::ArchiveOptions;

/// Pauses before reconnecting: 1 s, doubling up to a minute.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// How long a slot in use by another process is waited for at startup.
const BUSY_SLOT_WAIT: Duration = Duration::from_secs(10);
/// A session that lasted this long starts the reconnect pauses over.
const HEALTHY_SESSION: Duration = Duration::from_secs(60);

/// The default slot name: `walfill_archive_<deployment tag>`.
pub fn default_slot_name(config: &Config) -> String {
    format!("walfill_archive_{}", config.deployment_tag())
}

/// Runs `walfill archive` until stopped (Ctrl-C / SIGTERM through `cancel`)
/// or, with [`ArchiveOptions::until`], until the archive has everything
/// before that LSN. Returns how far the archive is durable.
pub async fn archive(
    config: &Config,
    options: &ArchiveOptions,
    cancel: &CancellationToken,
) -> Result<Lsn, ArchiverError> {
    let url = super::archive_url(config, "archive")?;
    let slot = options
        .slot
        .clone()
        .unwrap_or_else(|| default_slot_name(config));
    if !is_valid_slot_name(&slot) {
        return Err(ArchiverError::Slot {
            slot,
            problem:
                "not a valid slot name: use 1 to 63 lower-case letters, digits and underscores"
                    .to_string(),
        });
    }
    if options.flush_interval.is_zero() {
        return Err(ArchiverError::Config {
            path: config.path.clone(),
            message: "--flush-interval must be at least 1 second".to_string(),
        });
    }

    let mut source = Source::connect(&config.source)?;
    let system = source.identify()?;
    let segment_size = source.segment_size()?;
    let archive = config.open_archive(&url)?.with_segment_size(segment_size)?;
    archive.check_writable().await?;
    let restart = prepare_slot(&mut source, &slot, &archive, system.timeline).await?;
    let start = resume_point(&archive, system.timeline, restart, segment_size).await?;
    if start > system.flushed {
        return Err(ArchiverError::AheadOfSource {
            url,
            archived: start,
            server_end: system.flushed,
        });
    }
    tracing::info!(
        archive = %url,
        slot = %slot,
        timeline = %system.timeline,
        system_id = %system.system_id,
        slot_restart = %restart,
        start = %start,
        server_end = %system.flushed,
        "archiving WAL"
    );

    let server_end = Arc::new(AtomicU64::new(system.flushed.0));
    // Summaries go beside the bases: `[archive] bases_url`, else the archive.
    let summaries = match config.archive_settings.bases_url {
        Some(_) => config.open_bases().transpose()?,
        None => Some(archive.clone()),
    };
    let mut writer = Writer::spawn(
        archive,
        summaries,
        start,
        server_end.clone(),
        cancel.clone(),
    );
    let settings = Settings {
        source: &config.source,
        slot: &slot,
        timeline: system.timeline,
        segment_size,
        flush_interval: options.flush_interval,
        until: options.until,
        cancel,
        server_end,
    };
    let mut confirmed = Confirmed(restart);
    let mut resume = start;
    let mut connection = Some((source, system));
    let mut failures = 0;
    loop {
        let started = Instant::now();
        let attempt = match connection.take() {
            Some(ready) => Ok(ready),
            None => reconnect(&settings, &slot),
        };
        let outcome = match attempt {
            Ok((source, system)) => {
                session(
                    &settings,
                    source,
                    system,
                    resume,
                    &mut writer,
                    &mut confirmed,
                    &mut resume,
                )
                .await
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(_) => break,
            Err(e) if e.is_transient() && !cancel.is_cancelled() => {
                if started.elapsed() >= HEALTHY_SESSION {
                    failures = 0;
                }
                failures += 1;
                let delay = RECONNECT.after(failures);
                tracing::warn!(
                    error = %e,
                    resume_at = %resume,
                    retry_in_s = delay.as_secs(),
                    "replication stream interrupted; the slot keeps the WAL, reconnecting"
                );
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = cancel.cancelled() => {}
                }
                if cancel.is_cancelled() {
                    break;
                }
            }
            Err(e) => {
                // Keep what was already handed to the writer, then report.
                if let Err(w) = writer.drain().await {
                    tracing::warn!(error = %w, "the archive writer failed too");
                }
                return Err(e);
            }
        }
    }
    let progress = writer.drain().await?;
    tracing::info!(
        archived_to = %progress.durable,
        segments = progress.segments,
        "archive stopped"
    );
    if options.until.is_none() {
        tracing::info!(
            %slot,
            kept_from = %confirmed.0,
            "the physical slot {slot} stays in the source and keeps its WAL from there on, so \
             the next `walfill archive` resumes without a gap; when archiving is over, drop it \
             with `walfill archive --drop-slot` (or `walfill teardown`)"
        );
    }
    Ok(progress.durable)
}

/// Makes sure the slot exists, is physical and idle; returns its restart LSN.
async fn prepare_slot(
    source: &mut Source,
    slot: &str,
    archive: &Archive,
    timeline: TimelineId,
) -> Result<Lsn, ArchiverError> {
    let mut found = source.slot(slot)?;
    // A walsender of a process that just died may hold the slot a moment longer.
    let waiting = Instant::now();
    while found.as_ref().is_some_and(|s| s.active_pid.is_some())
        && waiting.elapsed() < BUSY_SLOT_WAIT
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        found = source.slot(slot)?;
    }
    let info = match found {
        Some(info) => info,
        None => {
            source.create_slot(slot)?;
            let info = source.slot(slot)?.ok_or_else(|| ArchiverError::Slot {
                slot: slot.to_string(),
                problem: "was created but is not listed in pg_replication_slots".to_string(),
            })?;
            if let Some(restart) = info.restart_lsn {
                tracing::info!(slot, restart_lsn = %restart, "created physical replication slot");
                warn_of_gap(archive, timeline, restart).await?;
            }
            info
        }
    };
    if info.slot_type != "physical" {
        return Err(ArchiverError::Slot {
            slot: slot.to_string(),
            problem: format!(
                "is a {} slot; walfill archive needs a physical one: give another --slot NAME",
                info.slot_type
            ),
        });
    }
    if let Some(pid) = info.active_pid {
        return Err(ArchiverError::SlotBusy {
            slot: slot.to_string(),
            pid,
        });
    }
    info.restart_lsn.ok_or_else(|| ArchiverError::Slot {
        slot: slot.to_string(),
        problem: "reserves no WAL (it was created without RESERVE_WAL, or its WAL was removed): \
                  drop it (SELECT pg_drop_replication_slot(...)) and run walfill archive again"
            .to_string(),
    })
}

/// A new slot starts at the source's recent WAL: if the archive already
/// holds older segments of the timeline that stop before it, the WAL in
/// between is not in the archive. Says so (it is not an error: the archive
/// may have been filled by other means).
async fn warn_of_gap(
    archive: &Archive,
    timeline: TimelineId,
    restart: Lsn,
) -> Result<(), ArchiverError> {
    let list = archive.segments(Some(timeline)).await?;
    let size = u64::from(list.segment_size);
    let first = SegmentNo::containing(restart, size);
    let before = list.segments.iter().rev().find(|s| s.name.segno < first);
    if let Some(last) = before {
        if last.partial || last.name.segno.next() != first {
            tracing::warn!(
                last_archived = %last.file,
                restart_lsn = %restart,
                "the archive has a gap: WAL between its last segment and the new slot's start is not archived"
            );
        }
    }
    Ok(())
}

/// The first segment, from the one holding `restart` on, that the archive
/// does not hold complete; its start is where streaming starts. A leftover
/// `.partial` file of the segment before it is deleted.
pub(crate) async fn resume_point(
    archive: &Archive,
    timeline: TimelineId,
    restart: Lsn,
    segment_size: u32,
) -> Result<Lsn, ArchiverError> {
    let size = u64::from(segment_size);
    let list = archive.segments_from(restart, Some(timeline)).await?;
    let mut segno = SegmentNo::containing(restart, size);
    for segment in &list.segments {
        if segment.name.segno != segno || segment.partial {
            break;
        }
        segno = segno.next();
    }
    if segno > SegmentNo::containing(restart, size) {
        let previous = walfill_replay::SegmentName {
            timeline,
            segno: walfill_replay::SegmentNo(segno.0 - 1),
        };
        archive.delete_partials(previous).await?;
    }
    Ok(segno.start_lsn(size))
}

/// A new connection for the next session, checked against the first one.
fn reconnect(settings: &Settings<'_>, slot: &str) -> Result<(Source, SystemInfo), ArchiverError> {
    let mut source = Source::connect(settings.source)?;
    let system = source.identify()?;
    if system.timeline != settings.timeline {
        return Err(ArchiverError::TimelineSwitch {
            was: settings.timeline,
            now: system.timeline,
        });
    }
    if source.slot(slot)?.is_none() {
        return Err(ArchiverError::Slot {
            slot: slot.to_string(),
            problem: "was dropped while walfill archive ran: WAL the archive did not have yet \
                      may be gone; run walfill archive again to create it, and check the \
                      archive for a gap"
                .to_string(),
        });
    }
    Ok((source, system))
}

/// One session: start streaming at `start`, run until it ends; `resume`
/// gets where the next session must start.
async fn session(
    settings: &Settings<'_>,
    source: Source,
    system: SystemInfo,
    start: Lsn,
    writer: &mut Writer,
    confirmed: &mut Confirmed,
    resume: &mut Lsn,
) -> Result<SessionEnd, ArchiverError> {
    let conn = source.start(settings.slot, start, settings.timeline)?;
    settings
        .server_end
        .fetch_max(system.flushed.0, Ordering::Relaxed);
    let mut session = Session::new(settings, conn, start, system.flushed)?;
    let outcome = session.run(writer, confirmed).await;
    *resume = session.resume_point();
    outcome
}

#[cfg(test)]
mod tests;
