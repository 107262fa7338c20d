//! Schedules: when a target's cron schedule is due, by which clock.
//!
//! The service handles each due time once: it remembers the last due time
//! it handled per target (`walfill.schedules`), and at each look finds the
//! latest due time at or before now. A later one than remembered is run
//! once, however many were missed while no service ran; one not later is
//! nothing to do. A schedule seen for the first time starts from now: it
//! does not run for times before it was configured.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::config::Schedule;

/// The variable naming a file whose content (an RFC 3339 time) is the
/// service's "now" for schedules, read at every look: tests move time with
/// it instead of waiting for it.
pub const CLOCK_VARIABLE: &str = "WALFILL_CLOCK_FILE";

/// Where the service reads the time for schedules.
#[derive(Clone, Debug)]
pub enum Clock {
    /// The system's clock.
    System,
    /// The time written in this file.
    File(PathBuf),
}

impl Clock {
    /// The clock the environment asks for: [`CLOCK_VARIABLE`], or the system's.
    pub fn from_env() -> Clock {
        match std::env::var_os(CLOCK_VARIABLE) {
            Some(path) => Clock::File(path.into()),
            None => Clock::System,
        }
    }

    /// Now, by this clock (the system's when the file cannot be read).
    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::File(path) => std::fs::read_to_string(path)
                .ok()
                .and_then(|text| DateTime::parse_from_rfc3339(text.trim()).ok())
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or_else(|| {
                    tracing::warn!(file = %path.display(), "cannot read the clock file; using the system's clock");
                    Utc::now()
                }),
        }
    }
}

/// The latest time at or before `now` that `schedule` is due, in `zone`.
pub fn latest_due(
    schedule: &Schedule,
    zone: chrono_tz::Tz,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let local = now.with_timezone(&zone);
    schedule
        .cron
        .find_previous_occurrence(&local, true)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// What to do about a schedule at `now`, given the last due time handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is due since the last one handled.
    Wait,
    /// First seen: remember this due time without running it.
    Start(DateTime<Utc>),
    /// Due: run once for this due time (the latest, if several were missed).
    Run(DateTime<Utc>),
}

/// Decides what a schedule asks for at `now`.
pub fn decide(
    schedule: &Schedule,
    zone: chrono_tz::Tz,
    last_handled: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Decision {
    let Some(due) = latest_due(schedule, zone, now) else {
        return Decision::Wait;
    };
    match last_handled {
        None => Decision::Start(due),
        Some(last) if due > last => Decision::Run(due),
        Some(_) => Decision::Wait,
    }
}

/// The name of the version a run due at `due` builds from `version`:
/// `v1_s202612020300`, the due time in the schedule's zone (the time the
/// operator wrote in the schedule), so `status` shows when it was made.
pub fn version_name(version: &str, due: DateTime<Utc>, zone: chrono_tz::Tz) -> String {
    format!(
        "{version}_s{}",
        due.with_timezone(&zone).format("%Y%m%d%H%M")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(text: &str) -> Schedule {
        Schedule {
            text: text.into(),
            cron: text.parse().expect("cron"),
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn each_due_time_runs_once_and_missed_ones_once() {
        let daily = schedule("0 3 * * *");
        let utc = chrono_tz::UTC;
        let first = decide(&daily, utc, None, at("2026-12-01T10:00:00Z"));
        assert_eq!(first, Decision::Start(at("2026-12-01T03:00:00Z")));
        let last = Some(at("2026-12-01T03:00:00Z"));
        assert_eq!(
            decide(&daily, utc, last, at("2026-12-02T02:59:59Z")),
            Decision::Wait
        );
        assert_eq!(
            decide(&daily, utc, last, at("2026-12-02T03:00:00Z")),
            Decision::Run(at("2026-12-02T03:00:00Z"))
        );
        // Three days missed: one run, for the latest.
        assert_eq!(
            decide(&daily, utc, last, at("2026-12-04T05:00:00Z")),
            Decision::Run(at("2026-12-04T03:00:00Z"))
        );
    }

    #[test]
    fn schedules_follow_the_configured_time_zone() {
        let daily = schedule("0 3 * * *");
        let paris: chrono_tz::Tz = "Europe/Paris".parse().unwrap();
        // 03:00 in Paris in December is 02:00 UTC.
        assert_eq!(
            latest_due(&daily, paris, at("2026-12-02T02:30:00Z")),
            Some(at("2026-12-02T02:00:00Z"))
        );
        // Named by the time the schedule says, not UTC's.
        assert_eq!(
            version_name("v1", at("2026-12-02T02:00:00Z"), paris),
            "v1_s202612020300"
        );
        assert_eq!(
            version_name("v1", at("2026-12-02T02:00:00Z"), chrono_tz::UTC),
            "v1_s202612020200"
        );
    }
}
