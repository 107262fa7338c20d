//! Following a version's slot: the live stream through the apply loop, for
//! a catch-up (until the version is close enough to the source), `sync
//! --once` (until what is committed now) or `sync` (until stopped).

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;
use walfill_snapshot::{
    LiveStream, ReplicationConnection, ReplicationUrl, SlotProblem, SnapshotError,
};

use super::Context;
use crate::control::state::VersionState;
use crate::db;
use crate::error::{Error, Loss, LostVersion, Result};
use crate::failpoint;
use crate::pipeline::apply::{run, Applied, Store, StreamDesc};
use crate::pipeline::source::live::{LiveOptions, LiveSource};
use crate::pipeline::version_sql::Plan;
use crate::retry::Backoff;
use crate::upstream::{current_wal_lsn, slot_health, SlotHealth};

/// How long a slot still held by a dying process is waited for.
const SLOT_BUSY_WAIT: Duration = Duration::from_secs(60);
/// How often it is tried meanwhile.
const SLOT_BUSY_RETRY: Backoff =
    Backoff::new(Duration::from_millis(500), Duration::from_millis(500));

/// A version's stream, ready to apply.
pub(crate) struct Follower {
    live: LiveSource,
    store: Store,
}

impl Follower {
    /// Opens the version's slot at its last applied position. `conn` is the
    /// connection that created the slot, when this process just did.
    /// `source` is a source session (for the slot's health), `catalog`
    /// another one the stream keeps for its checks.
    pub(crate) async fn open(
        cx: &Context<'_>,
        catalog: Client,
        state: &mut VersionState,
        plan: &Plan,
        conn: Option<ReplicationConnection>,
        until: Option<Lsn>,
    ) -> Result<Follower> {
        let (config, source, cancel) = (cx.config, cx.source, cx.cancel);
        let from = state
            .applied_lsn
            .or(state.boundary_lsn)
            .unwrap_or(Lsn::INVALID);
        let slot = state.slot_name.clone();
        let lost = |reason: String| -> Error {
            LostVersion {
                target: state.target.clone(),
                version: state.version.clone(),
                loss: Loss::Changes,
                reason,
                fix: None,
            }
            .into()
        };
        match slot_health(source, &slot).await? {
            SlotHealth::Kept => {}
            SlotHealth::Missing => {
                return Err(lost(format!(
                    "its replication slot {slot} is gone, so the changes after {from} can never \
                     reach it"
                )))
            }
            SlotHealth::Invalidated => {
                return Err(lost(format!(
                    "the source removed WAL its replication slot {slot} still needed \
                     (max_slot_wal_keep_size), so the changes after {from} can never reach it"
                )))
            }
        }
        let publication = &config.backfill.publication;
        let stream = match conn {
            Some(conn) => LiveStream::start(conn, &slot, publication, from)?,
            None => {
                start_with_retry(
                    &db::replication_url(&config.source),
                    &slot,
                    publication,
                    from,
                )
                .await?
            }
        };
        let desc = match &state.stream_desc {
            Some(desc) => desc.clone(),
            // Recorded by an older walfill: the catalog now, checked as the
            // stream goes.
            None => StreamDesc::from_catalog(source, plan.source.oid).await?,
        };
        let options = LiveOptions {
            batch_changes: config.backfill.apply_batch_changes as usize,
            memory_bytes: config.backfill.apply_memory_mb as usize * (1 << 20),
            until,
        };
        let live = LiveSource::new(
            stream,
            catalog,
            plan.clone(),
            desc,
            from,
            options,
            cancel.clone(),
        )
        .await?;
        Ok(Follower {
            live,
            store: Store::new(plan.clone())
                .with_dead_letter_limit(config.backfill.max_dead_letter_percent),
        })
    }

    /// Applies the stream until every transaction committed before the
    /// target position is stored (forever without one), or until stopped.
    pub(crate) async fn run(
        &mut self,
        dest: &mut Client,
        state: &mut VersionState,
        cancel: &CancellationToken,
        failpoints: &str,
    ) -> Result<Applied> {
        let applied = run(dest, &self.store, state, &mut self.live, cancel, failpoints).await?;
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        Ok(applied)
    }

    /// Moves the target position to `until`.
    pub(crate) fn extend(&mut self, until: Lsn) {
        self.live.extend(until);
    }
}

/// Applies the stream to `state`'s version until it is at most
/// `swap_max_lag_bytes` behind the source. `failpoints` names the step
/// (`catchup` in a backfill, `swap.catchup` before a swap).
pub(crate) async fn catch_up(
    cx: &Context<'_>,
    dest: &mut Client,
    state: &mut VersionState,
    follower: &mut Follower,
    failpoints: &str,
) -> Result<()> {
    let (config, source, cancel) = (cx.config, cx.source, cx.cancel);
    let max_lag = config.backfill.swap_max_lag_bytes;
    failpoint::hit(&format!("{failpoints}.start"));
    loop {
        let until = current_wal_lsn(source).await?;
        follower.extend(until);
        tracing::info!(
            target = %state.target,
            version = %state.version,
            applied = %state.applied_lsn.unwrap_or_default(),
            %until,
            "catching up"
        );
        follower.run(dest, state, cancel, failpoints).await?;
        let applied = state.applied_lsn.unwrap_or_default();
        let lag = current_wal_lsn(source)
            .await?
            .checked_sub(applied)
            .unwrap_or(0);
        if lag <= max_lag {
            tracing::info!(
                target = %state.target,
                version = %state.version,
                %applied,
                lag_bytes = lag,
                "caught up"
            );
            failpoint::hit(&format!("{failpoints}.end"));
            return Ok(());
        }
    }
}

/// Opens the slot's stream, waiting while a killed predecessor's walsender
/// still holds the slot.
async fn start_with_retry(
    url: &ReplicationUrl,
    slot: &str,
    publication: &str,
    from: Lsn,
) -> Result<LiveStream> {
    let started = Instant::now();
    let mut told = false;
    loop {
        let conn = ReplicationConnection::connect(url)?;
        match LiveStream::start(conn, slot, publication, from) {
            Ok(stream) => return Ok(stream),
            Err(e) if slot_busy(&e) && started.elapsed() < SLOT_BUSY_WAIT => {
                if !told {
                    told = true;
                    tracing::info!(
                        slot,
                        "the slot is still held by a previous process; waiting for it to let go"
                    );
                }
                tokio::time::sleep(SLOT_BUSY_RETRY.after(1)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether starting replication failed because another walsender has the
/// slot (SQLSTATE 55006, object in use).
fn slot_busy(e: &SnapshotError) -> bool {
    e.slot_problem() == Some(SlotProblem::InUse)
}
