//! One streaming session: from START_REPLICATION until a stop, the target
//! LSN, or an error.
//!
//! The loop reads the stream, cuts it into segments (complete ones go to the
//! writer at once), and between messages does its housekeeping: the tail as
//! `.partial` every flush interval, a status update whenever the archive's
//! durable position moved (and at least every [`STATUS_INTERVAL`]), a progress
//! line every [`LOG_INTERVAL`]. Reads wait with a token that a small timer task
//! cancels at the next deadline or when the writer publishes progress, so an
//! idle stream still does its housekeeping on time.
//!
//! The status update's flush position is the archive's durable position,
//! never beyond, so the slot keeps every byte the archive may still lack.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_walstream::PgReplicationConnection;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use walfill_replay::{Lsn, TimelineId};

use crate::config::PgUrl;

use super::error::ArchiverError;
use super::frame::Frame;
use super::segment::SegmentAssembler;
use super::writer::{Progress, Writer};

/// Longest time without a status update to the server.
pub(crate) const STATUS_INTERVAL: Duration = Duration::from_secs(10);
/// Time between progress lines in the log.
const LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Why a session ended without an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// A stop was requested.
    Stopped,
    /// Everything up to the requested LSN is in the archive.
    Reached,
}

/// What stays the same from one session to the next.
pub(crate) struct Settings<'a> {
    /// The source database.
    pub(crate) source: &'a PgUrl,
    /// The slot streamed through.
    pub(crate) slot: &'a str,
    /// The timeline streamed.
    pub(crate) timeline: TimelineId,
    /// The segment size.
    pub(crate) segment_size: u32,
    /// How often the tail is stored.
    pub(crate) flush_interval: Duration,
    /// Stop once the archive has everything before this LSN.
    pub(crate) until: Option<Lsn>,
    /// Asks the session to stop.
    pub(crate) cancel: &'a CancellationToken,
    /// How far the server has WAL, shared with the writer for its log lines.
    pub(crate) server_end: Arc<AtomicU64>,
}

/// The flush position last confirmed to the server: the slot never moves
/// back, and only moves to positions the archive holds.
pub(crate) struct Confirmed(pub(crate) Lsn);

/// One connection's stream.
pub(crate) struct Session<'a> {
    settings: &'a Settings<'a>,
    conn: PgReplicationConnection,
    assembler: SegmentAssembler,
    /// No tail is stored before the stream reaches this LSN (the server's
    /// WAL end when the session started), so a tail stored by an earlier
    /// session is never replaced by a shorter one.
    floor: Lsn,
    tail_stored: Lsn,
    last_status: Instant,
    last_log: Instant,
    next_tail: Instant,
}

impl<'a> Session<'a> {
    /// A session on a connection already streaming from `start` (a segment
    /// boundary). `floor` is the server's WAL end when it started.
    pub(crate) fn new(
        settings: &'a Settings<'a>,
        conn: PgReplicationConnection,
        start: Lsn,
        floor: Lsn,
    ) -> Result<Session<'a>, ArchiverError> {
        let assembler = SegmentAssembler::new(settings.timeline, settings.segment_size, start)
            .map_err(ArchiverError::Protocol)?;
        let now = Instant::now();
        Ok(Session {
            settings,
            conn,
            assembler,
            floor,
            tail_stored: Lsn(0),
            last_status: now,
            last_log: now,
            next_tail: now + settings.flush_interval,
        })
    }

    /// Where a new session must start to lose nothing: the start of the
    /// segment being filled (complete segments are all with the writer).
    pub(crate) fn resume_point(&self) -> Lsn {
        self.assembler.segment_start()
    }

    /// Streams until a stop, the target, or an error. On every end the tail
    /// received so far is handed to the writer; on a clean end the writer is
    /// drained and a last status update sent.
    pub(crate) async fn run(
        &mut self,
        writer: &mut Writer,
        confirmed: &mut Confirmed,
    ) -> Result<SessionEnd, ArchiverError> {
        let outcome = self.stream(writer, confirmed).await;
        // Whatever ended the stream, the WAL received is good: store it.
        let stored = self.store_tail(writer, true).await;
        let end = outcome?;
        stored?;
        let progress = writer.drain().await?;
        self.send_status(progress.durable, confirmed).await?;
        Ok(end)
    }

    async fn stream(
        &mut self,
        writer: &mut Writer,
        confirmed: &mut Confirmed,
    ) -> Result<SessionEnd, ArchiverError> {
        let settings = self.settings;
        let mut progress = writer.progress();
        let mut waiter: Option<Waiter> = None;
        loop {
            if settings.cancel.is_cancelled() {
                return Ok(SessionEnd::Stopped);
            }
            if writer.has_stopped() {
                return Err(writer.failure().await);
            }
            let now_progress: Progress = *progress.borrow_and_update();
            if settings.until.is_some_and(|u| now_progress.durable >= u) {
                return Ok(SessionEnd::Reached);
            }
            self.housekeeping(writer, confirmed, now_progress).await?;

            let token = match &waiter {
                Some(w) if !w.token.is_cancelled() => w.token.clone(),
                _ => {
                    let deadline = self
                        .next_tail
                        .min(self.last_status + STATUS_INTERVAL)
                        .min(self.last_log + LOG_INTERVAL);
                    let w = Waiter::start(settings.cancel, deadline, progress.clone());
                    let token = w.token.clone();
                    waiter = Some(w);
                    token
                }
            };
            let message = match self.conn.get_copy_data_async(&token).await {
                Ok(message) => message,
                Err(e) if e.is_cancelled() => {
                    waiter = None;
                    continue;
                }
                Err(e) => {
                    return Err(ArchiverError::replication(
                        format!("streaming WAL through slot {}", settings.slot),
                        e,
                    ))
                }
            };
            match Frame::parse(&message).map_err(ArchiverError::Protocol)? {
                Frame::Wal {
                    start,
                    server_end,
                    data,
                } => {
                    self.saw_server_end(server_end);
                    let completed = self
                        .assembler
                        .push(start, &data)
                        .map_err(ArchiverError::Protocol)?;
                    for segment in completed {
                        writer.send(segment, false).await?;
                    }
                }
                Frame::Keepalive {
                    server_end,
                    reply_requested,
                } => {
                    self.saw_server_end(server_end);
                    if reply_requested {
                        let durable = progress.borrow().durable;
                        self.send_status(durable, confirmed).await?;
                    }
                }
            }
        }
    }

    /// The periodic work between messages.
    async fn housekeeping(
        &mut self,
        writer: &mut Writer,
        confirmed: &mut Confirmed,
        progress: Progress,
    ) -> Result<(), ArchiverError> {
        let now = Instant::now();
        let position = self.assembler.position();
        let target_received = self.settings.until.is_some_and(|u| position >= u);
        if now >= self.next_tail || target_received {
            self.store_tail(writer, false).await?;
            if now >= self.next_tail {
                self.next_tail = now + self.settings.flush_interval;
            }
        }
        if progress.durable > confirmed.0 || now >= self.last_status + STATUS_INTERVAL {
            self.send_status(progress.durable, confirmed).await?;
        }
        if now >= self.last_log + LOG_INTERVAL {
            self.last_log = now;
            let server_end = Lsn(self.settings.server_end.load(Ordering::Relaxed));
            tracing::info!(
                archived_to = %progress.durable,
                received_to = %position,
                server_end = %server_end,
                lag_bytes = server_end.0.saturating_sub(progress.durable.0),
                segments = progress.segments,
                "archiving"
            );
        }
        Ok(())
    }

    /// Hands the unfinished segment to the writer as `.partial`, unless it
    /// holds nothing new or the stream is still below the floor. `wait`
    /// waits for room in the queue; otherwise a full queue skips this turn.
    async fn store_tail(&mut self, writer: &mut Writer, wait: bool) -> Result<(), ArchiverError> {
        let position = self.assembler.position();
        if position <= self.tail_stored || position < self.floor {
            return Ok(());
        }
        let Some(tail) = self.assembler.tail() else {
            return Ok(());
        };
        let queued = if wait {
            writer.send(tail, true).await.map(|()| true)?
        } else {
            writer.try_send_partial(tail).await?
        };
        if queued {
            self.tail_stored = position;
        }
        Ok(())
    }

    /// Tells the server how far WAL was received and how far the archive
    /// has it (the flush position, which moves the slot).
    async fn send_status(
        &mut self,
        durable: Lsn,
        confirmed: &mut Confirmed,
    ) -> Result<(), ArchiverError> {
        // 0/0 leaves the slot where it is: nothing new is in the archive.
        let flush = if durable > confirmed.0 {
            durable
        } else {
            Lsn(0)
        };
        let write = self.assembler.position().max(durable);
        self.conn
            .send_standby_status_update(write.0, flush.0, flush.0, false)
            .await
            .map_err(|e| ArchiverError::replication("sending a status update", e))?;
        if flush > confirmed.0 {
            confirmed.0 = flush;
        }
        self.last_status = Instant::now();
        Ok(())
    }

    fn saw_server_end(&self, server_end: Lsn) {
        self.settings
            .server_end
            .fetch_max(server_end.0, Ordering::Relaxed);
    }
}

/// A token for one wait on the stream, cancelled at a deadline, when the
/// writer publishes progress, or on a stop; its timer task ends with it.
struct Waiter {
    token: CancellationToken,
    task: JoinHandle<()>,
}

impl Waiter {
    fn start(
        cancel: &CancellationToken,
        deadline: Instant,
        mut progress: watch::Receiver<Progress>,
    ) -> Waiter {
        let token = cancel.child_token();
        let fire = token.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {}
                _ = progress.changed() => {}
                _ = fire.cancelled() => {}
            }
            fire.cancel();
        });
        Waiter { token, task }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.task.abort();
    }
}
