//! The last hour of a few figures, for the status page's plots: a ring
//! buffer this process keeps in memory (empty after a restart).
//!
//! Every [`SAMPLE`] the sampler reads the status report and records:
//! - each running fill's rows per second (rows stored since the last
//!   sample, a copy's or a replay's);
//! - each published version's apply lag, in bytes of WAL and in seconds;
//! - the WAL each walfill slot keeps on the source.
//!
//! Points older than [`WINDOW`] are dropped, and so is a series with none
//! left. `GET /history` serves them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::control::state::Phase;
use crate::control::status::Report;

/// How often a point is taken.
pub(crate) const SAMPLE: Duration = Duration::from_secs(5);
/// How far back the plots go.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);

/// What a series measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A running fill's rows per second (`TARGET/VERSION`).
    FillRate,
    /// A published version's apply lag in bytes (`TARGET/VERSION`).
    ApplyLagBytes,
    /// A published version's apply lag in seconds (`TARGET/VERSION`).
    ApplyLagSeconds,
    /// The WAL a walfill slot keeps (the slot's name).
    SlotRetainedBytes,
}

/// One series, as `GET /history` serves it.
#[derive(Debug, Serialize)]
pub(crate) struct Series {
    /// What it measures.
    pub(crate) kind: Kind,
    /// Whose: `TARGET/VERSION`, or a slot's name.
    pub(crate) label: String,
    /// `[unix seconds, value]`, oldest first.
    pub(crate) points: Vec<(f64, f64)>,
}

/// The ring buffer.
#[derive(Debug, Default)]
pub(crate) struct History {
    series: BTreeMap<(Kind, String), VecDeque<(f64, f64)>>,
    /// Rows stored by each fill at the last sample, and when.
    rows_seen: HashMap<String, (f64, i64)>,
}

impl History {
    /// Adds the figures of `report`, taken at `now` (unix seconds).
    pub(crate) fn record(&mut self, report: &Report, now: f64) {
        let mut seen = HashMap::new();
        for v in &report.versions {
            let label = format!("{}/{}", v.target, v.version);
            let filling = matches!(v.phase.phase(), Some(Phase::Copying | Phase::Replaying));
            if filling && v.held_by_pid.is_some() {
                if let Some((then, rows)) = self.rows_seen.get(&label) {
                    let seconds = now - then;
                    if seconds > 0.0 {
                        let rate = (v.rows_copied - rows).max(0) as f64 / seconds;
                        self.push(Kind::FillRate, &label, now, rate);
                    }
                }
                seen.insert(label.clone(), (now, v.rows_copied));
            }
            if v.active {
                if let Some(bytes) = v.slot_lag_bytes {
                    self.push(Kind::ApplyLagBytes, &label, now, bytes as f64);
                }
                if let Some(seconds) = v.apply_lag_seconds {
                    self.push(Kind::ApplyLagSeconds, &label, now, seconds);
                }
            }
        }
        self.rows_seen = seen;
        for slot in &report.slots {
            self.push(
                Kind::SlotRetainedBytes,
                &slot.name,
                now,
                slot.retained_bytes as f64,
            );
        }
        let oldest = now - WINDOW.as_secs_f64();
        self.series.retain(|_, points| {
            while points.front().is_some_and(|(at, _)| *at < oldest) {
                points.pop_front();
            }
            !points.is_empty()
        });
    }

    fn push(&mut self, kind: Kind, label: &str, at: f64, value: f64) {
        self.series
            .entry((kind, label.to_string()))
            .or_default()
            .push_back((at, value));
    }

    /// Every series, by kind and label.
    pub(crate) fn series(&self) -> Vec<Series> {
        self.series
            .iter()
            .map(|((kind, label), points)| Series {
                kind: *kind,
                label: label.clone(),
                points: points.iter().copied().collect(),
            })
            .collect()
    }
}

/// Takes a sample every [`SAMPLE`] until stopped.
pub(super) async fn sample(
    shared: Arc<Shared>,
    history: Arc<Mutex<History>>,
    cancel: CancellationToken,
) {
    loop {
        match crate::control::status::report(&shared.config()).await {
            Ok(report) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or_default();
                if let Ok(mut h) = history.lock() {
                    h.record(&report, now);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e.describe(), "cannot sample the status for the plots")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(SAMPLE) => {}
        }
    }
}
