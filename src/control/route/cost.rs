//! What each path would cost: a replay's time from the WAL it decodes and
//! the base it loads, a snapshot's from the table's rows, both scaled by
//! the rates this deployment's own fills have shown (the state's finished
//! versions), with defaults until there are some.
//!
//! `path = auto` takes replay unless its estimate exceeds the snapshot's by
//! more than `[backfill] replay_max_slowdown`: replay spares the source, so
//! it is worth some time, but not any.

use serde::Serialize;
use tokio_postgres::Client;

use crate::error::{Error, Result};

/// A replay's decoding rate before this deployment has measured one (MiB of
/// archived WAL per second, whole command: this project's 2-core benchmark
/// decodes, folds and loads about 42).
const DEFAULT_REPLAY_MIB_PER_SECOND: f64 = 40.0;
/// A snapshot copy's rate before this deployment has measured one (rows per
/// second: this project's 2-core benchmark copies about 650k narrow rows a
/// second; production rows are wider).
const DEFAULT_SNAPSHOT_ROWS_PER_SECOND: f64 = 200_000.0;

/// What either path costs however small the table: a slot's creation
/// (which waits for the transactions running), the version's table and
/// key, the hand-off to the stream. A replay estimated below it is taken:
/// the estimate counts WAL by position, and an idle cluster's segments,
/// switched by `archive_timeout`, are mostly padding that decodes at once.
const FIXED_SECONDS: f64 = 2.0;

/// Fills smaller than this say more about fixed costs (a slot, a table)
/// than about a rate, and are not counted.
const MIN_SAMPLE_WAL_BYTES: f64 = 64.0 * 1048576.0;
const MIN_SAMPLE_ROWS: f64 = 50_000.0;
/// Finished fills of each path a rate is the median of.
const SAMPLES: i64 = 5;

/// The rates estimates are scaled by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rates {
    /// Archived WAL a replay decodes per second (MiB).
    pub replay_mib_per_second: f64,
    /// Replays the rate is the median of (0: the default).
    pub replay_samples: usize,
    /// Rows a snapshot copies (or a replay loads from a base) per second.
    pub snapshot_rows_per_second: f64,
    /// Snapshots the rate is the median of (0: the default).
    pub snapshot_samples: usize,
}

impl Default for Rates {
    fn default() -> Rates {
        Rates {
            replay_mib_per_second: DEFAULT_REPLAY_MIB_PER_SECOND,
            replay_samples: 0,
            snapshot_rows_per_second: DEFAULT_SNAPSHOT_ROWS_PER_SECOND,
            snapshot_samples: 0,
        }
    }
}

impl Rates {
    /// The rates the last finished fills in the destination's state showed
    /// (defaults where there are none, or no state yet).
    pub async fn measured(dest: &Client) -> Result<Rates> {
        if crate::control::state::require(dest).await.is_err() {
            return Ok(Rates::default());
        }
        let rows = dest
            .query(
                "SELECT path, rows_copied::float8,
                        extract(epoch FROM copy_finished_at - copy_started_at)::float8,
                        coalesce(wal_read_bytes::float8, (boundary_lsn - restart_lsn)::float8, 0),
                        coalesce((replay_base #>> '{manifest,rows}')::float8, 0)
                   FROM walfill.versions
                  WHERE copy_finished_at IS NOT NULL AND copy_started_at IS NOT NULL
                    AND copy_finished_at > copy_started_at
                  ORDER BY copy_finished_at DESC
                  LIMIT 200",
                &[],
            )
            .await
            .map_err(|e| Error::destination("reading the rates of earlier fills", e))?;
        let samples = rows.iter().map(|r| Sample {
            replay: r.get::<_, String>(0) == "replay",
            rows: r.get(1),
            seconds: r.get(2),
            wal_bytes: r.get(3),
            base_rows: r.get(4),
        });
        Ok(Rates::from_samples(samples))
    }

    fn from_samples(samples: impl Iterator<Item = Sample>) -> Rates {
        let samples: Vec<Sample> = samples.collect();
        let mut snapshot: Vec<f64> = samples
            .iter()
            .filter(|s| !s.replay && s.rows >= MIN_SAMPLE_ROWS)
            .map(|s| s.rows / s.seconds)
            .take(SAMPLES as usize)
            .collect();
        let snapshot_rate = median(&mut snapshot).unwrap_or(DEFAULT_SNAPSHOT_ROWS_PER_SECOND);
        // A replay from a base also loaded the base's rows: take the time
        // that costs at the snapshot rate off, keeping at least a tenth.
        let mut replay: Vec<f64> = samples
            .iter()
            .filter(|s| s.replay && s.wal_bytes >= MIN_SAMPLE_WAL_BYTES)
            .map(|s| {
                let decoding = (s.seconds - s.base_rows / snapshot_rate).max(s.seconds / 10.0);
                s.wal_bytes / 1048576.0 / decoding
            })
            .take(SAMPLES as usize)
            .collect();
        Rates {
            replay_samples: replay.len(),
            replay_mib_per_second: median(&mut replay).unwrap_or(DEFAULT_REPLAY_MIB_PER_SECOND),
            snapshot_samples: snapshot.len(),
            snapshot_rows_per_second: snapshot_rate,
        }
    }

    /// Where the rates come from, for `plan`.
    pub fn describe(&self) -> String {
        let one = |samples: usize, what: &str| match samples {
            0 => format!("{what}: the default"),
            n => format!("{what}: the median of the last {n} here"),
        };
        format!(
            "replay {:.0} MiB of WAL/s ({}), snapshot {:.0} rows/s ({})",
            self.replay_mib_per_second,
            one(self.replay_samples, "replays"),
            self.snapshot_rows_per_second,
            one(self.snapshot_samples, "snapshots")
        )
    }
}

struct Sample {
    replay: bool,
    rows: f64,
    seconds: f64,
    wal_bytes: f64,
    base_rows: f64,
}

fn median(values: &mut Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite() && *v > 0.0);
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// Both paths' estimated times, and the rule that weighed them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimates {
    /// Seconds a replay would take: its WAL and its base's rows.
    pub replay_seconds: f64,
    /// Seconds a snapshot would take: the table's rows.
    pub snapshot_seconds: f64,
    /// Archived WAL the replay would decode, read whole.
    pub replay_wal_bytes: u64,
    /// Archived WAL it would take from segment summaries instead (not in
    /// `replay_wal_bytes`).
    pub replay_summarized_bytes: u64,
    /// Rows the replay would load from its base.
    pub replay_base_rows: u64,
    /// Rows a snapshot would copy.
    pub snapshot_rows: u64,
    /// `[backfill] replay_max_slowdown`.
    pub replay_max_slowdown: f64,
    /// The rates both are scaled by.
    pub rates: Rates,
    /// What the rule decided, in words.
    pub rule: String,
}

impl Estimates {
    /// Weighs a replay of `wal_bytes` from a base of `base_rows` against a
    /// snapshot of `rows`.
    pub fn weigh(
        wal_bytes: u64,
        base_rows: u64,
        rows: u64,
        rates: Rates,
        replay_max_slowdown: f64,
    ) -> Estimates {
        let replay_seconds = wal_bytes as f64 / 1048576.0 / rates.replay_mib_per_second
            + base_rows as f64 / rates.snapshot_rows_per_second;
        let snapshot_seconds = rows as f64 / rates.snapshot_rows_per_second;
        let mut estimates = Estimates {
            replay_seconds,
            snapshot_seconds,
            replay_wal_bytes: wal_bytes,
            replay_summarized_bytes: 0,
            replay_base_rows: base_rows,
            snapshot_rows: rows,
            replay_max_slowdown,
            rates,
            rule: String::new(),
        };
        estimates.rule = if estimates.replay_wins() {
            format!(
                "replay: its estimate ({}) is within {}x the snapshot's ({}), \
                 [backfill] replay_max_slowdown",
                seconds(replay_seconds),
                replay_max_slowdown,
                seconds(snapshot_seconds)
            )
        } else {
            format!(
                "snapshot: a replay would decode {:.0} MiB of WAL, about {} against {} for \
                 copying about {rows} rows, {:.1}x slower, more than [backfill] \
                 replay_max_slowdown = {replay_max_slowdown} allows; raise it or pass \
                 --path replay to spare the source, or run `walfill compact` so that a replay \
                 starts from a recent base",
                wal_bytes as f64 / 1048576.0,
                seconds(replay_seconds),
                seconds(snapshot_seconds),
                replay_seconds / snapshot_seconds.max(f64::MIN_POSITIVE),
            )
        };
        estimates
    }

    /// Whether the replay's estimate is within the allowed slowdown of the
    /// snapshot's. Below [`FIXED_SECONDS`] both are fixed costs, and
    /// replay, which spares the source, wins.
    pub fn replay_wins(&self) -> bool {
        self.replay_seconds <= FIXED_SECONDS
            || self.replay_seconds <= self.snapshot_seconds * self.replay_max_slowdown
    }
}

/// Seconds for people: `0.4 s`, `12 s`, `3 min 5 s`.
fn seconds(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else {
        format!("{} min {} s", (s / 60.0) as u64, (s % 60.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(replay: bool, rows: f64, seconds: f64, wal_mib: f64, base_rows: f64) -> Sample {
        Sample {
            replay,
            rows,
            seconds,
            wal_bytes: wal_mib * 1048576.0,
            base_rows,
        }
    }

    #[test]
    fn rates_are_the_medians_of_fills_large_enough_to_measure() {
        let rates = Rates::from_samples(
            [
                sample(false, 1_000_000.0, 2.0, 0.0, 0.0),
                sample(false, 1_000_000.0, 4.0, 0.0, 0.0),
                sample(false, 1_000_000.0, 5.0, 0.0, 0.0),
                // Too small to say anything about a rate.
                sample(false, 100.0, 0.001, 0.0, 0.0),
                sample(true, 0.0, 10.0, 200.0, 0.0),
                sample(true, 0.0, 1.0, 1.0, 0.0),
            ]
            .into_iter(),
        );
        assert_eq!(rates.snapshot_samples, 3);
        assert_eq!(rates.snapshot_rows_per_second, 250_000.0);
        assert_eq!(rates.replay_samples, 1);
        assert_eq!(rates.replay_mib_per_second, 20.0);
    }

    #[test]
    fn a_replay_from_a_base_is_measured_without_loading_the_base() {
        // 250k rows/s: the base's 500k rows took 2 of the 6 seconds.
        let rates = Rates::from_samples(
            [
                sample(false, 1_000_000.0, 4.0, 0.0, 0.0),
                sample(true, 0.0, 6.0, 100.0, 500_000.0),
            ]
            .into_iter(),
        );
        assert_eq!(rates.replay_mib_per_second, 25.0);
    }

    #[test]
    fn no_fills_give_the_defaults() {
        assert_eq!(Rates::from_samples(std::iter::empty()), Rates::default());
    }

    #[test]
    fn a_small_table_in_a_large_wal_range_takes_a_snapshot() {
        // 4 GiB of WAL at 40 MiB/s against 10k rows.
        let e = Estimates::weigh(4 << 30, 0, 10_000, Rates::default(), 2.0);
        assert!(!e.replay_wins(), "{e:?}");
        assert!(e.rule.starts_with("snapshot: "), "{}", e.rule);
        // Raised, the same replay is taken.
        assert!(Estimates::weigh(4 << 30, 0, 10_000, Rates::default(), 1e6).replay_wins());
    }

    #[test]
    fn a_recent_base_makes_the_replay_cheap_again() {
        // 1M rows in the base, 16 MiB of WAL since: about as dear as the copy.
        let e = Estimates::weigh(16 << 20, 1_000_000, 1_000_000, Rates::default(), 2.0);
        assert!(e.replay_wins(), "{e:?}");
        assert!(e.replay_seconds < e.snapshot_seconds * 1.1);
    }

    #[test]
    fn replays_under_the_fixed_cost_are_taken_whatever_the_ratio() {
        let e = Estimates::weigh(64 << 20, 0, 10, Rates::default(), 2.0);
        assert!(e.replay_wins());
        let e = Estimates::weigh(128 << 20, 0, 10, Rates::default(), 2.0);
        assert!(!e.replay_wins());
    }
}
