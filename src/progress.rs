//! Progress of long work: a bar on a terminal, structured logs otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often progress is logged when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Progress of a copy (rows) or a catch-up (bytes of WAL).
pub struct Progress {
    label: String,
    bar: Option<ProgressBar>,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_log: Instant,
    rate: f64,
}

impl Progress {
    /// Starts reporting `label`, out of `total` rows when known.
    pub fn new(label: impl Into<String>, total: Option<u64>, done: u64) -> Progress {
        Progress::with_template(
            label.into(),
            total,
            done,
            "{msg} [{bar:30}] {human_pos}/{human_len} rows, {per_sec}, ETA {eta}",
        )
    }

    /// Starts reporting `label`, out of `total` bytes (of WAL) when known.
    pub fn bytes(label: impl Into<String>, total: Option<u64>, done: u64) -> Progress {
        Progress::with_template(
            label.into(),
            total,
            done,
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes}, {binary_bytes_per_sec}, ETA {eta}",
        )
    }

    fn with_template(label: String, total: Option<u64>, done: u64, template: &str) -> Progress {
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
            bar.set_position(done);
            bar
        });
        Progress {
            label,
            bar,
            total,
            done,
            started: Instant::now(),
            last_log: Instant::now(),
            rate: 0.0,
        }
    }

    /// Records `n` more units done in `elapsed`; returns the smoothed rate.
    pub fn advance(&mut self, n: u64, elapsed: Duration) -> f64 {
        self.done += n;
        let instant = n as f64 / elapsed.as_secs_f64().max(1e-6);
        self.rate = if self.rate == 0.0 {
            instant
        } else {
            0.7 * self.rate + 0.3 * instant
        };
        if let Some(bar) = &self.bar {
            if let Some(t) = self.total {
                if self.done > t {
                    bar.set_length(self.done);
                }
            }
            bar.set_position(self.done);
        } else if self.last_log.elapsed() >= LOG_EVERY {
            self.last_log = Instant::now();
            self.log();
        }
        self.rate
    }

    fn log(&self) {
        let eta = self.eta().map(|d| format!("{}s", d.as_secs()));
        tracing::info!(
            task = %self.label,
            done = self.done,
            total = %self.total.map(|t| t.to_string()).unwrap_or_else(|| "unknown".into()),
            rate = format!("{:.0}/s", self.rate),
            eta = eta.as_deref().unwrap_or("unknown"),
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

    /// Ends the report with a summary line.
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        let secs = self.started.elapsed().as_secs_f64();
        tracing::info!(
            task = %self.label,
            done = self.done,
            seconds = format!("{secs:.1}"),
            "finished"
        );
    }
}
