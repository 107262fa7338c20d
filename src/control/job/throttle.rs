//! The throttle: a backfill waits, between two stored batches, while the
//! source or the destination is under strain, and goes on once it eases.
//!
//! Three measures, each with its limit in `[throttle]`:
//!
//! - `max_replication_lag_mb`: the WAL a standby (or any other consumer
//!   streaming from the source) has not replayed yet, and the WAL the live
//!   versions of this destination have not applied yet (the slot of the
//!   version being built is left out: it waits by design until the fill
//!   ends);
//! - `max_retained_percent`: the WAL a replication slot keeps, as a share
//!   of `max_slot_wal_keep_size` (ignored when that is unlimited);
//! - `max_apply_lag_mb`: how far the live versions of this destination
//!   are behind (their slots' unconfirmed WAL).
//!
//! It engages when a measure goes over its limit and releases when every
//! measure is below 80% of its limit, so it does not flap. Each engagement
//! and release is logged, recorded as an event (`throttle_engaged`,
//! `throttle_released`, counted by `walfill_events_total`), and shown in
//! the version's state (`throttled`) while it lasts.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ThrottleSettings};
use crate::control::state;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, Cursor, HistorySource};

/// How often the measures are read while not engaged.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Release once every measure is below this share of its limit.
const RELEASE_BELOW: f64 = 0.8;

/// A history source that waits between batches while the throttle is engaged.
pub(crate) struct Throttled<'a, S> {
    inner: &'a mut S,
    throttle: Throttle,
}

impl<'a, S: HistorySource> Throttled<'a, S> {
    /// `inner`, throttled for the version `target`/`version` whose own slot
    /// is `own_slot`.
    pub(crate) fn new(
        inner: &'a mut S,
        config: &Config,
        target: &str,
        version: &str,
        own_slot: &str,
        cancel: &CancellationToken,
    ) -> Throttled<'a, S> {
        Throttled {
            inner,
            throttle: Throttle {
                settings: config.throttle.clone(),
                config: config.clone(),
                target: target.to_string(),
                version: version.to_string(),
                own_slot: own_slot.to_string(),
                cancel: cancel.clone(),
                source: None,
                dest: None,
                checked: None,
            },
        }
    }
}

impl<S: HistorySource> HistorySource for Throttled<'_, S> {
    async fn next(&mut self) -> Result<Option<Batch>> {
        self.inner.next().await
    }

    async fn stored(&mut self, cursor: &Cursor) -> Result<()> {
        self.inner.stored(cursor).await?;
        self.throttle.hold().await
    }

    fn confirms_upstream(&self) -> bool {
        self.inner.confirms_upstream()
    }
}

struct Throttle {
    settings: ThrottleSettings,
    config: Config,
    target: String,
    version: String,
    own_slot: String,
    cancel: CancellationToken,
    source: Option<Client>,
    dest: Option<Client>,
    checked: Option<Instant>,
}

impl Throttle {
    /// Returns at once while no measure is over its limit; otherwise waits
    /// until every one is back under 80% of it.
    async fn hold(&mut self) -> Result<()> {
        if !self.settings.any() || self.checked.is_some_and(|t| t.elapsed() < CHECK_EVERY) {
            return Ok(());
        }
        self.checked = Some(Instant::now());
        let Some(reason) = self.over(1.0).await else {
            return Ok(());
        };
        tracing::warn!(
            target = %self.target,
            version = %self.version,
            %reason,
            "throttle engaged: the backfill waits until it eases"
        );
        self.record("throttle_engaged", Some(&reason)).await;
        let started = Instant::now();
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => {
                    self.record("throttle_released", None).await;
                    return Err(Error::Interrupted);
                }
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
            if self.over(RELEASE_BELOW).await.is_none() {
                break;
            }
        }
        tracing::info!(
            target = %self.target,
            version = %self.version,
            waited_seconds = started.elapsed().as_secs(),
            "throttle released: the backfill goes on"
        );
        self.record("throttle_released", None).await;
        Ok(())
    }

    /// The first measure over `share` of its limit, described; `None` when
    /// all are under (or cannot be read: the throttle never stops a
    /// backfill because the source cannot be asked).
    async fn over(&mut self, share: f64) -> Option<String> {
        if self.source.as_ref().is_none_or(|c| c.is_closed()) {
            self.source = db::connect(&self.config.source, Role::Source).await.ok();
        }
        if self.dest.as_ref().is_none_or(|c| c.is_closed()) {
            self.dest = db::connect(&self.config.destination, Role::Destination)
                .await
                .ok();
        }
        // The live versions of this destination (others' are not ours to wait for).
        let live: Vec<String> = self
            .dest
            .as_ref()?
            .query(
                "SELECT slot_name FROM walfill.versions
                  WHERE phase = ANY($1) AND lost IS NULL",
                &[&state::Phase::names(&[
                    state::Phase::Ready,
                    state::Phase::Active,
                    state::Phase::Previous,
                ])],
            )
            .await
            .ok()?
            .iter()
            .map(|r| r.get(0))
            .filter(|s: &String| *s != self.own_slot)
            .collect();
        let source = self.source.as_ref()?;
        let row = source
            .query_one(
                "SELECT
                   (SELECT max(pg_current_wal_lsn() - coalesce(replay_lsn, flush_lsn))::float8
                      FROM pg_stat_replication
                     WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots s
                                        WHERE s.active_pid = pg_stat_replication.pid
                                          AND s.slot_name LIKE 'walfill\\_%')),
                   (SELECT max(pg_current_wal_lsn() - confirmed_flush_lsn)::float8
                      FROM pg_replication_slots WHERE slot_name = ANY($2)),
                   (SELECT max(pg_current_wal_lsn() - restart_lsn)::float8
                      FROM pg_replication_slots WHERE restart_lsn IS NOT NULL AND slot_name <> $1),
                   (SELECT setting::float8 FROM pg_settings
                     WHERE name = 'max_slot_wal_keep_size')",
                &[&self.own_slot, &live],
            )
            .await
            .ok()?;
        let mib = |v: Option<f64>| v.unwrap_or(0.0) / (1024.0 * 1024.0);
        let standby = mib(row.get(0));
        let apply = mib(row.get(1));
        let retained = mib(row.get(2));
        let keep: Option<f64> = row.get::<_, Option<f64>>(3).filter(|k| *k > 0.0);
        let s = &self.settings;
        if let Some(limit) = s.max_replication_lag_mb {
            let lag = standby.max(apply);
            if lag > limit as f64 * share {
                return Some(format!(
                    "replication lag {lag:.1} MiB over {} MiB",
                    limit as f64 * share
                ));
            }
        }
        if let Some(limit) = s.max_apply_lag_mb {
            if apply > limit as f64 * share {
                return Some(format!(
                    "apply lag of the live versions {apply:.1} MiB over {} MiB",
                    limit as f64 * share
                ));
            }
        }
        if let (Some(limit), Some(keep)) = (s.max_retained_percent, keep) {
            let percent = 100.0 * retained / keep;
            if percent > f64::from(limit) * share {
                return Some(format!(
                    "a slot retains {percent:.0}% of max_slot_wal_keep_size, over {:.0}%",
                    f64::from(limit) * share
                ));
            }
        }
        None
    }

    /// Logs the engagement or release in the state (best effort).
    async fn record(&self, kind: &str, reason: Option<&str>) {
        let Ok(dest) = db::connect(&self.config.destination, Role::Destination).await else {
            return;
        };
        let _ = dest
            .execute(
                "UPDATE walfill.versions SET throttled = $3 WHERE target = $1 AND version = $2",
                &[&self.target, &self.version, &reason],
            )
            .await;
        let _ = state::record_event(
            &dest,
            &self.target,
            Some(&self.version),
            kind,
            serde_json::json!({ "reason": reason }),
        )
        .await;
    }
}
