//! `GET /metrics`: the status in Prometheus's text format, every name
//! prefixed `walfill_`. Gauges are read from the state database at each
//! scrape, so every worker reports the same figures; counters count events
//! recorded in `walfill.events`.

use std::fmt::Write;

use tokio_postgres::Client;

use crate::control::state::{Path, Stage};
use crate::control::status::{Report, VersionStatus};
use crate::error::{Error, Result};

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP walfill_{name} {help}");
        let _ = writeln!(out, "# TYPE walfill_{name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.out, "walfill_{name}");
        if !labels.is_empty() {
            let text: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(self.out, "{{{}}}", text.join(","));
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A gauge with a sample per version: its name, its help, and its value
/// for a version (`None`: no sample for that version).
struct VersionGauge {
    name: &'static str,
    help: &'static str,
    value: fn(&VersionStatus) -> Option<f64>,
}

fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}

/// The value for a version that has a row (is not `unbuilt`).
fn recorded(v: &VersionStatus, value: f64) -> Option<f64> {
    (v.phase != Stage::Unbuilt).then_some(value)
}

const VERSION_GAUGES: &[VersionGauge] = &[
    VersionGauge {
        name: "view_stale",
        help: "1 when a target's view shows a version that does not follow its source \
               (published with --force).",
        value: |v| v.active.then_some(flag(v.stale.is_some())),
    },
    VersionGauge {
        name: "version_following",
        help: "For each built version that should follow the live stream (ready, active, \
               previous; not published stale): 1 while a process follows it.",
        value: |v| v.following.map(flag),
    },
    VersionGauge {
        name: "rows_copied",
        help: "Rows stored by a version's snapshot copy.",
        value: |v| (v.path == Some(Path::Snapshot)).then_some(v.rows_copied as f64),
    },
    VersionGauge {
        name: "rows_replayed",
        help: "Rows written by a version's replay of archived WAL.",
        value: |v| (v.path == Some(Path::Replay)).then_some(v.rows_copied as f64),
    },
    VersionGauge {
        name: "rows_estimated",
        help: "The planner's estimate of a version's source rows.",
        value: |v| recorded(v, v.rows_estimated as f64),
    },
    VersionGauge {
        name: "fill_rate",
        help: "A running fill's rate: rows per second (copy) or WAL bytes per second (replay).",
        value: |v| v.rate,
    },
    VersionGauge {
        name: "version_lost",
        help: "1 for a version that lost changes (its table dropped, its slot gone) until \
               rebuilt.",
        value: |v| recorded(v, flag(v.lost.is_some())),
    },
    VersionGauge {
        name: "throttled",
        help: "1 while the throttle holds a version's fill.",
        value: |v| recorded(v, flag(v.throttled.is_some())),
    },
    VersionGauge {
        name: "dead_letters",
        help: "Rows of a version set aside because their transform failed.",
        value: |v| recorded(v, v.dead_letters as f64),
    },
    VersionGauge {
        name: "apply_lag_bytes",
        help: "WAL a version's slot has not confirmed: how far its live apply is behind the \
               source.",
        value: |v| v.slot_lag_bytes.map(|lag| lag as f64),
    },
    VersionGauge {
        name: "apply_lag_seconds",
        help: "Seconds between a source commit and its apply to a version, as of the last \
               batch of its live stream (stays at its last value while the source is idle).",
        value: |v| v.apply_lag_seconds,
    },
    VersionGauge {
        name: "changes_applied",
        help: "Changes of the live stream applied to a version.",
        value: |v| recorded(v, v.changes_applied as f64),
    },
];

/// Renders the metrics from `report` and the event counts in `dest`.
pub(super) async fn render(report: &Report, dest: &Client, leader: bool) -> Result<String> {
    let mut out = String::new();
    Family::new(&mut out, "up", "gauge", "1 while this walfill serve runs.").sample("up", &[], 1.0);
    Family::new(
        &mut out,
        "leader",
        "gauge",
        "1 when this process leads the workers.",
    )
    .sample("leader", &[], flag(leader));
    Family::new(
        &mut out,
        "ready",
        "gauge",
        "1 when every built version that should follow the live stream does (GET /ready also \
         counts failing parts and requests).",
    )
    .sample("ready", &[], flag(report.not_ready.is_empty()));
    versions(&mut out, report);
    built(&mut out, dest).await?;
    sources(&mut out, report);
    requests(&mut out, report, dest).await?;
    Ok(out)
}

/// The per-version families.
fn versions(out: &mut String, report: &Report) {
    for gauge in VERSION_GAUGES {
        let mut f = Family::new(out, gauge.name, "gauge", gauge.help);
        for v in &report.versions {
            if let Some(value) = (gauge.value)(v) {
                let labels = [("target", &v.target[..]), ("version", &v.version[..])];
                f.sample(gauge.name, &labels, value);
            }
        }
    }
    let mut f = Family::new(
        out,
        "version_error",
        "gauge",
        "1 for each version whose last run stopped on an error, the error as a label.",
    );
    for v in &report.versions {
        if let Some(error) = &v.last_error {
            let error: String = error.chars().take(200).collect();
            let labels = [
                ("target", &v.target[..]),
                ("version", &v.version),
                ("error", &error),
            ];
            f.sample("version_error", &labels, 1.0);
        }
    }
    let mut f = Family::new(
        out,
        "version_phase",
        "gauge",
        "1 for each version's phase (active, ready, copying, replaying...).",
    );
    for v in &report.versions {
        let phase = v.phase.as_str();
        let labels = [
            ("target", &v.target[..]),
            ("version", &v.version),
            ("phase", phase),
        ];
        f.sample("version_phase", &labels, 1.0);
    }
}

/// When each target's newest version finished building.
async fn built(out: &mut String, dest: &Client) -> Result<()> {
    let mut f = Family::new(
        out,
        "last_successful_build_timestamp",
        "gauge",
        "Unix time at which the newest version of each target finished building (caught up \
         with its source); alert when it is older than the schedule allows.",
    );
    let built = dest
        .query(
            "SELECT target, extract(epoch FROM max(caught_up_at))::float8
               FROM walfill.versions WHERE caught_up_at IS NOT NULL
              GROUP BY target ORDER BY target",
            &[],
        )
        .await
        .map_err(|e| Error::destination("reading when versions were built", e))?;
    for row in &built {
        let target: String = row.get(0);
        f.sample(
            "last_successful_build_timestamp",
            &[("target", &target)],
            row.get(1),
        );
    }
    Ok(())
}

/// The source's slots and the archive.
fn sources(out: &mut String, report: &Report) {
    let mut f = Family::new(
        out,
        "slot_retained_bytes",
        "gauge",
        "WAL the source keeps for a walfill slot.",
    );
    for s in &report.slots {
        let labels = [("slot", &s.name[..]), ("kind", &s.kind)];
        f.sample("slot_retained_bytes", &labels, s.retained_bytes as f64);
    }
    let archive = report.archive.as_ref();
    if let Some(age) = archive.and_then(|a| a.last_segment_age_seconds) {
        let mut f = Family::new(
            out,
            "archive_last_segment_age_seconds",
            "gauge",
            "Seconds since the newest complete WAL segment was written to the archive.",
        );
        f.sample("archive_last_segment_age_seconds", &[], age as f64);
    }
}

/// Requests by state, paused targets, and the events recorded.
async fn requests(out: &mut String, report: &Report, dest: &Client) -> Result<()> {
    let mut f = Family::new(
        out,
        "backfills",
        "gauge",
        "Backfill requests by state (queued, running; failed: failed for good).",
    );
    let states = dest
        .query(
            "SELECT s, count(r.id)::float8 FROM unnest(ARRAY['queued', 'running', 'failed']) s
               LEFT JOIN walfill.requests r ON r.state = s GROUP BY s ORDER BY s",
            &[],
        )
        .await
        .map_err(|e| Error::destination("counting the requests", e))?;
    for row in &states {
        let state: String = row.get(0);
        f.sample("backfills", &[("state", &state)], row.get(1));
    }
    let mut f = Family::new(
        out,
        "paused",
        "gauge",
        "1 for each paused target ('*': all).",
    );
    for target in &report.paused {
        f.sample("paused", &[("target", target)], 1.0);
    }
    let mut f = Family::new(
        out,
        "events_total",
        "counter",
        "Events recorded per kind: swaps, rollbacks, losses, rebuilds, skipped schedules...",
    );
    let events = dest
        .query(
            "SELECT kind, count(*)::float8 FROM walfill.events GROUP BY kind ORDER BY kind",
            &[],
        )
        .await
        .map_err(|e| Error::destination("counting the events", e))?;
    for row in &events {
        let kind: String = row.get(0);
        f.sample("events_total", &[("kind", &kind)], row.get(1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut out = String::new();
        Family::new(&mut out, "x", "gauge", "X.").sample("x", &[("t", "a\"b")], 1.5);
        assert_eq!(
            out,
            "# HELP walfill_x X.\n# TYPE walfill_x gauge\nwalfill_x{t=\"a\\\"b\"} 1.5\n"
        );
    }
}
