//! Following a version's slot: apply committed transactions in order, in
//! bounded batches, each batch committed with the position after it and only
//! then confirmed to the slot.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_replay::{Lsn, Transaction};
use walfill_snapshot::{LiveStream, ReplicationConnection, StreamEvent};

use crate::apply::Applier;
use crate::error::{Error, Result};
use crate::state::VersionState;

/// How long the stream may be silent before walfill treats it as idle.
const IDLE: Duration = Duration::from_millis(250);
/// Longest a batch waits before it is applied.
const BATCH_AGE: Duration = Duration::from_secs(1);
/// Most transactions in one batch.
const BATCH_TRANSACTIONS: usize = 2_000;
/// How long a slot still held by a dying process is waited for.
const SLOT_BUSY_WAIT: Duration = Duration::from_secs(60);

/// Why [`Follower::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Every transaction committed before the requested position is applied.
    Reached(Lsn),
    /// The cancellation token fired; everything received so far is applied.
    Cancelled(Lsn),
}

/// A version's live stream and its apply.
pub struct Follower {
    applier: Applier,
    state: VersionState,
    stream: LiveStream,
    batch_changes: usize,
}

impl Follower {
    /// Starts the version's slot at its last applied position. `conn` is the
    /// connection that created the slot, when this process just did; otherwise
    /// a new one is opened from `replication_url`.
    pub async fn start(
        applier: Applier,
        state: VersionState,
        conn: Option<ReplicationConnection>,
        replication_url: &str,
        publication: &str,
        batch_changes: u32,
    ) -> Result<Follower> {
        let from = state
            .applied_lsn
            .or(state.boundary_lsn)
            .unwrap_or(Lsn::INVALID);
        let stream = match conn {
            Some(conn) => LiveStream::start(conn, &state.slot_name, publication, from)?,
            None => start_with_retry(replication_url, &state.slot_name, publication, from).await?,
        };
        Ok(Follower {
            applier,
            state,
            stream,
            batch_changes: batch_changes as usize,
        })
    }

    /// The version being followed.
    pub fn state(&self) -> &VersionState {
        &self.state
    }

    /// Gives back the version's state.
    pub fn into_state(self) -> VersionState {
        self.state
    }

    /// Applies the stream until every transaction committed before `until`
    /// is applied (forever when `None`), or until `cancel` fires.
    pub async fn run(
        &mut self,
        dest: &mut Client,
        until: Option<Lsn>,
        cancel: &CancellationToken,
    ) -> Result<Stop> {
        let mut batch: Vec<Transaction> = Vec::new();
        let mut changes = 0usize;
        let mut oldest = Instant::now();
        loop {
            if cancel.is_cancelled() {
                self.flush(dest, &mut batch).await?;
                return Ok(Stop::Cancelled(self.stream.position()));
            }
            let event = self.stream.next(IDLE).await?;
            match event {
                StreamEvent::Transaction(txn) => {
                    let applied = self.state.applied_lsn.unwrap_or(Lsn::INVALID);
                    if txn.end_lsn > applied {
                        if batch.is_empty() {
                            oldest = Instant::now();
                        }
                        changes += txn.changes.len();
                        batch.push(txn);
                    }
                    if changes >= self.batch_changes
                        || batch.len() >= BATCH_TRANSACTIONS
                        || oldest.elapsed() >= BATCH_AGE
                    {
                        self.flush(dest, &mut batch).await?;
                        changes = 0;
                    }
                }
                StreamEvent::Idle { position } => {
                    self.flush(dest, &mut batch).await?;
                    changes = 0;
                    self.record_idle(dest, position).await?;
                }
            }
            let position = self.stream.position();
            if let Some(until) = until {
                if position >= until {
                    self.flush(dest, &mut batch).await?;
                    return Ok(Stop::Reached(position));
                }
            }
        }
    }

    async fn flush(&mut self, dest: &mut Client, batch: &mut Vec<Transaction>) -> Result<()> {
        let Some(last) = batch.last() else {
            return Ok(());
        };
        let end = last.end_lsn;
        let tx = dest
            .transaction()
            .await
            .map_err(|e| Error::destination("starting a batch", e))?;
        let outcome = self.applier.apply(&tx, batch, self.state.truncated).await?;
        self.state
            .record_applied(&tx, end, outcome.changes, outcome.truncated)
            .await?;
        tx.commit()
            .await
            .map_err(|e| Error::destination("committing a batch", e))?;
        self.stream.confirm(end).await?;
        tracing::debug!(
            target = %self.state.target,
            version = %self.state.version,
            transactions = batch.len(),
            changes = outcome.changes,
            applied = %end,
            "applied batch"
        );
        batch.clear();
        Ok(())
    }

    /// With nothing pending, everything before `position` is applied: record
    /// it and let the slot release the WAL before it.
    async fn record_idle(&mut self, dest: &Client, position: Lsn) -> Result<()> {
        if self.state.applied_lsn.is_some_and(|a| a >= position) {
            return Ok(());
        }
        self.state.record_applied(dest, position, 0, None).await?;
        self.stream.confirm(position).await?;
        Ok(())
    }
}

/// Opens the slot's stream, waiting while a killed predecessor's walsender
/// still holds the slot.
async fn start_with_retry(
    url: &str,
    slot: &str,
    publication: &str,
    from: Lsn,
) -> Result<LiveStream> {
    let started = Instant::now();
    loop {
        let conn = ReplicationConnection::connect(url)?;
        match LiveStream::start(conn, slot, publication, from) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.to_string().contains("55006") && started.elapsed() < SLOT_BUSY_WAIT => {
                tracing::info!(slot, "slot still held by a previous process; waiting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
