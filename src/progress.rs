//! Progress of long work: a bar on a terminal, structured logs otherwise.
//!
//! The rate is what was done over the last few seconds of wall-clock time,
//! pauses included (a rate cap, a slow destination), so the ETA it gives is
//! one the work can keep.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often progress is logged when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The rate is what was done over about this long.
const WINDOW: Duration = Duration::from_secs(10);

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Rows,
    Bytes,
}

impl Unit {
    fn amount(self, n: f64) -> String {
        match self {
            Unit::Rows => format!("{n:.0} rows"),
            Unit::Bytes => format!("{:.1} MiB", n / 1048576.0),
        }
    }
}

/// Progress of a copy (rows) or a replay (bytes of WAL).
pub struct Progress {
    label: String,
    unit: Unit,
    bar: Option<ProgressBar>,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_log: Instant,
    /// (when, done) at recent advances, oldest first, spanning [`WINDOW`].
    samples: VecDeque<(Instant, u64)>,
    rate: f64,
    /// What else the work has done, for people ("5300 rows written").
    detail: Option<String>,
}

impl Progress {
    /// Starts reporting `label`, out of `total` rows when known.
    pub fn new(label: impl Into<String>, total: Option<u64>, done: u64) -> Progress {
        Progress::start(
            label.into(),
            Unit::Rows,
            total,
            done,
            "{msg} [{bar:30}] {human_pos}/{human_len} rows, {prefix}",
        )
    }

    /// Starts reporting `label`, out of `total` bytes (of WAL) when known.
    pub fn bytes(label: impl Into<String>, total: Option<u64>, done: u64) -> Progress {
        Progress::start(
            label.into(),
            Unit::Bytes,
            total,
            done,
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} of WAL, {prefix}",
        )
    }

    fn start(label: String, unit: Unit, total: Option<u64>, done: u64, template: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = match total {
                Some(t) => ProgressBar::new(t.max(done)),
                None => ProgressBar::new_spinner(),
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_message(label.clone());
            bar.set_prefix("starting");
            bar.set_position(done);
            bar
        });
        let now = Instant::now();
        Progress {
            label,
            unit,
            bar,
            total,
            done,
            started: now,
            last_log: now,
            samples: VecDeque::from([(now, done)]),
            rate: 0.0,
            detail: None,
        }
    }

    /// Records `n` more units done; returns the rate per second over the
    /// last [`WINDOW`] (or since the start, when that is shorter).
    pub fn advance(&mut self, n: u64) -> f64 {
        self.done += n;
        let now = Instant::now();
        self.samples.push_back((now, self.done));
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(at, _)| now.duration_since(*at) >= WINDOW)
        {
            self.samples.pop_front();
        }
        if let Some((since, from)) = self.samples.front() {
            let secs = now.duration_since(*since).as_secs_f64();
            if secs > 0.0 {
                self.rate = (self.done - from) as f64 / secs;
            }
        }
        if let Some(bar) = &self.bar {
            if self.total.is_some_and(|t| self.done > t) {
                bar.set_length(self.done);
            }
            bar.set_prefix(self.rate_and_eta());
            bar.set_position(self.done);
        } else if self.last_log.elapsed() >= LOG_EVERY {
            self.last_log = now;
            self.log();
        }
        self.rate
    }

    /// Sets what else the work has done, shown beside the label.
    pub fn set_detail(&mut self, detail: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{} ({detail})", self.label));
        }
        self.detail = Some(detail);
    }

    /// "1234 rows/s, ETA 12 s".
    fn rate_and_eta(&self) -> String {
        let eta = self
            .eta()
            .map(|d| format!("{} s", d.as_secs()))
            .unwrap_or_else(|| "unknown".into());
        format!("{}/s, ETA {eta}", self.unit.amount(self.rate))
    }

    fn log(&self) {
        tracing::info!(
            task = %self.label,
            done = %self.unit.amount(self.done as f64),
            total = %self
                .total
                .map(|t| self.unit.amount(t as f64))
                .unwrap_or_else(|| "unknown".into()),
            rate = %format!("{}/s", self.unit.amount(self.rate)),
            eta = %self
                .eta()
                .map(|d| format!("{} s", d.as_secs()))
                .unwrap_or_else(|| "unknown".into()),
            detail = self.detail.as_deref(),
            "progress"
        );
    }

    /// Time left at the current rate, when the total is known.
    pub fn eta(&self) -> Option<Duration> {
        let total = self.total?;
        if self.rate <= 0.0 {
            return None;
        }
        Some(Duration::from_secs_f64(
            total.saturating_sub(self.done) as f64 / self.rate,
        ))
    }

    /// What was done so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Ends the report with a summary line.
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        let secs = self.started.elapsed().as_secs_f64();
        tracing::info!(
            task = %self.label,
            done = %self.unit.amount(self.done as f64),
            seconds = format!("{secs:.1}"),
            detail = self.detail.as_deref(),
            "finished"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pause (a rate cap's sleep) counts: the rate is what was done over
    /// the wall-clock time, not over the time spent working.
    #[test]
    fn pauses_lower_the_rate() {
        let mut p = Progress::new("t", Some(1000), 0);
        std::thread::sleep(Duration::from_millis(200));
        let rate = p.advance(100);
        assert!(rate < 600.0, "100 rows in 200 ms gave {rate}/s");
        assert!(rate > 200.0, "100 rows in 200 ms gave {rate}/s");
        let eta = p.eta().expect("an ETA");
        assert!(eta >= Duration::from_millis(1200), "{eta:?}");
    }
}
