//! The source's WAL: its write position, and waiting for the archive to
//! hold the WAL a replay needs.
//!
//! A replay's boundary is usually in the segment the source is writing.
//! The archiver stores it once it is full, or once the source switches to a
//! new segment: walfill asks for the switch when its user may, and says
//! once, with the fix, why it waits when it may not.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;
use walfill_replay::archive::{Archive, ArchiveError, ReadOptions};

use crate::error::{Error, Gap, Result};

/// The source's current WAL write position.
pub async fn current_wal_lsn(source: &Client) -> Result<Lsn> {
    source
        .query_one("SELECT pg_current_wal_lsn()", &[])
        .await
        .map(|r| r.get(0))
        .map_err(|e| Error::source_query("reading the source's WAL position", e))
}

/// How often a long wait says it is still waiting.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Whether the source's user may call `pg_switch_wal()`.
pub async fn can_switch_wal(source: &Client) -> Result<bool> {
    source
        .query_one(
            "SELECT has_function_privilege('pg_catalog.pg_switch_wal()', 'EXECUTE')",
            &[],
        )
        .await
        .map(|r| r.get(0))
        .map_err(|e| Error::source_query("checking the pg_switch_wal permission", e))
}

/// Explains, once, that the archive fills only as fast as the source's
/// archiver stores full segments (or `archive_timeout` forces a switch),
/// how long walfill waits for it (`None`: not at all), and how to let
/// walfill switch segments itself.
pub async fn explain_slow_archive(source: &Client, max_wait: Option<Duration>) {
    let timeout = source
        .query_one("SELECT current_setting('archive_timeout')", &[])
        .await
        .map(|r| r.get::<_, String>(0))
        .unwrap_or_else(|_| "unknown".into());
    let user = source
        .query_one("SELECT current_user::text", &[])
        .await
        .map(|r| r.get::<_, String>(0))
        .unwrap_or_else(|_| "the source user".into());
    let waiting = match max_wait {
        Some(wait) => format!(
            "waiting at most {} s ([archive] wait_seconds)",
            wait.as_secs()
        ),
        None => "deciding with what the archive holds now".into(),
    };
    tracing::warn!(
        archive_timeout = %timeout,
        "the source user {user} may not call pg_switch_wal(), so the newest WAL reaches the \
         archive only when its segment is full or archive_timeout passes; {waiting}; fix: GRANT \
         EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() TO {user}"
    );
}

/// Waits until the archive holds every segment from `from` to the one
/// holding `boundary`, asking the source to switch to a new segment so the
/// one holding the boundary is archived without waiting for it to fill.
/// Fails after `wait`.
pub async fn wait_for_archive(
    source: &Client,
    archive: &Archive,
    from: Lsn,
    boundary: Lsn,
    wait: Duration,
    cancel: &CancellationToken,
) -> Result<()> {
    let started = Instant::now();
    let mut asked = false;
    let mut reported = started;
    // The segment switched to is usually archived within tens of
    // milliseconds: look again soon, then less and less often.
    let mut every = Duration::from_millis(10);
    loop {
        let Some(missing) = missing(archive, from, boundary).await? else {
            return Ok(());
        };
        if !asked {
            asked = true;
            if can_switch_wal(source).await? {
                source
                    .execute("SELECT pg_switch_wal()", &[])
                    .await
                    .map_err(|e| Error::source_query("switching WAL segments", e))?;
                tracing::debug!("asked the source to switch WAL segments");
            } else {
                explain_slow_archive(source, Some(wait)).await;
            }
        }
        let waited = started.elapsed();
        if waited > wait {
            return Err(Error::history(format!(
                "{missing}, and the replay needs WAL up to its boundary {boundary}; is WAL being \
                 archived (archive_command, or `walfill archive`)? [archive] wait_seconds (now \
                 {}) sets how long to wait",
                wait.as_secs()
            )));
        }
        if reported.elapsed() >= REPORT_EVERY {
            reported = Instant::now();
            tracing::info!(
                %missing,
                %boundary,
                waited = %format!("{} s of at most {} s", waited.as_secs(), wait.as_secs()),
                "waiting for the archive"
            );
        } else {
            tracing::debug!(%missing, %boundary, "waiting for the archive");
        }
        crate::retry::pause(every, cancel).await?;
        every = (every * 2).min(Duration::from_millis(500));
    }
}

/// What the archive lacks of `[from, boundary)`, if anything. A segment
/// missing before WAL the archive already holds will never come: an error.
async fn missing(archive: &Archive, from: Lsn, boundary: Lsn) -> Result<Option<String>> {
    let mut planned = archive
        .plan_read(from, Some(boundary), &ReadOptions::default())
        .await;
    if let Err(ArchiveError::SeveralTimelines { timelines, .. }) = &planned {
        // After a failover: the newest timeline is the source's, followed
        // through its history file when the archive has one.
        if let Some(newest) = timelines.iter().max() {
            let follow = ReadOptions::default().following(*newest);
            planned = archive.plan_read(from, Some(boundary), &follow).await;
        }
    }
    match planned {
        Ok(_) => Ok(None),
        Err(ArchiveError::MissingSegment { name, lsn, .. }) => {
            let list = archive.segments(None).await?;
            let size = u64::from(list.segment_size);
            let later = list
                .segments
                .iter()
                .any(|s| s.name.segno.start_lsn(size) > lsn);
            if later {
                return Err(Error::history(format!(
                    "segment {name} (WAL from {lsn}) is missing from the archive, which holds \
                     later WAL"
                )));
            }
            Ok(Some(format!(
                "segment {name} (WAL from {lsn}) is not archived yet"
            )))
        }
        Err(ArchiveError::NoSegments { .. }) => Ok(Some("the archive holds no WAL".into())),
        Err(e) => Err(Error::History(Gap::Archive(e))),
    }
}
