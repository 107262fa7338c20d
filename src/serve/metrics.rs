//! `GET /metrics`: the status in Prometheus's text format, every name
//! prefixed `walfill_`. Gauges are read from the state database at each
//! scrape, so every worker reports the same figures; counters count events
//! recorded in `walfill.events`.

use std::fmt::Write;

use tokio_postgres::Client;

use crate::control::status::Report;
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
    .sample("leader", &[], if leader { 1.0 } else { 0.0 });

    let mut f = Family::new(
        &mut out,
        "view_stale",
        "gauge",
        "1 when a target's view shows a version that does not follow its source (published \
         with --force).",
    );
    for v in report.versions.iter().filter(|v| v.active) {
        f.sample(
            "view_stale",
            &[("target", &v.target), ("version", &v.version)],
            if v.stale.is_some() { 1.0 } else { 0.0 },
        );
    }
    let mut f = Family::new(
        &mut out,
        "version_following",
        "gauge",
        "For each built version that should follow the live stream (ready, active, previous; \
         not published stale): 1 while a process follows it.",
    );
    for v in &report.versions {
        if let Some(following) = v.following {
            f.sample(
                "version_following",
                &[("target", &v.target), ("version", &v.version)],
                if following { 1.0 } else { 0.0 },
            );
        }
    }
    let mut f = Family::new(
        &mut out,
        "version_error",
        "gauge",
        "1 for each version whose last run stopped on an error, the error as a label.",
    );
    for v in &report.versions {
        if let Some(error) = &v.last_error {
            let error: String = error.chars().take(200).collect();
            f.sample(
                "version_error",
                &[
                    ("target", &v.target),
                    ("version", &v.version),
                    ("error", &error),
                ],
                1.0,
            );
        }
    }
    let mut f = Family::new(
        &mut out,
        "ready",
        "gauge",
        "1 when every built version that should follow the live stream does (GET /ready also \
         counts failing parts and requests).",
    );
    f.sample(
        "ready",
        &[],
        if report.not_ready.is_empty() {
            1.0
        } else {
            0.0
        },
    );
    let mut f = Family::new(
        &mut out,
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
    let mut f = Family::new(
        &mut out,
        "rows_copied",
        "gauge",
        "Rows stored by a version's snapshot copy.",
    );
    for v in report
        .versions
        .iter()
        .filter(|v| v.path.as_deref() == Some("snapshot"))
    {
        f.sample(
            "rows_copied",
            &[("target", &v.target), ("version", &v.version)],
            v.rows_copied as f64,
        );
    }
    let mut f = Family::new(
        &mut out,
        "rows_replayed",
        "gauge",
        "Rows written by a version's replay of archived WAL.",
    );
    for v in report
        .versions
        .iter()
        .filter(|v| v.path.as_deref() == Some("replay"))
    {
        f.sample(
            "rows_replayed",
            &[("target", &v.target), ("version", &v.version)],
            v.rows_copied as f64,
        );
    }
    let mut f = Family::new(
        &mut out,
        "rows_estimated",
        "gauge",
        "The planner's estimate of a version's source rows.",
    );
    for v in report.versions.iter().filter(|v| v.phase != "unbuilt") {
        f.sample(
            "rows_estimated",
            &[("target", &v.target), ("version", &v.version)],
            v.rows_estimated as f64,
        );
    }
    let mut f = Family::new(
        &mut out,
        "fill_rate",
        "gauge",
        "A running fill's rate: rows per second (copy) or WAL bytes per second (replay).",
    );
    for v in &report.versions {
        if let Some(rate) = v.rate {
            f.sample(
                "fill_rate",
                &[("target", &v.target), ("version", &v.version)],
                rate,
            );
        }
    }
    let mut f = Family::new(
        &mut out,
        "version_phase",
        "gauge",
        "1 for each version's phase (active, ready, copying, replaying...).",
    );
    for v in &report.versions {
        f.sample(
            "version_phase",
            &[
                ("target", &v.target),
                ("version", &v.version),
                ("phase", &v.phase),
            ],
            1.0,
        );
    }
    let mut f = Family::new(
        &mut out,
        "version_lost",
        "gauge",
        "1 for a version that lost changes (its table dropped, its slot gone) until rebuilt.",
    );
    for v in report.versions.iter().filter(|v| v.phase != "unbuilt") {
        f.sample(
            "version_lost",
            &[("target", &v.target), ("version", &v.version)],
            if v.lost.is_some() { 1.0 } else { 0.0 },
        );
    }
    let mut f = Family::new(
        &mut out,
        "throttled",
        "gauge",
        "1 while the throttle holds a version's fill.",
    );
    for v in report.versions.iter().filter(|v| v.phase != "unbuilt") {
        f.sample(
            "throttled",
            &[("target", &v.target), ("version", &v.version)],
            if v.throttled.is_some() { 1.0 } else { 0.0 },
        );
    }
    let mut f = Family::new(
        &mut out,
        "dead_letters",
        "gauge",
        "Rows of a version set aside because their transform failed.",
    );
    for v in report.versions.iter().filter(|v| v.phase != "unbuilt") {
        f.sample(
            "dead_letters",
            &[("target", &v.target), ("version", &v.version)],
            v.dead_letters as f64,
        );
    }
    let mut f = Family::new(
        &mut out,
        "apply_lag_bytes",
        "gauge",
        "WAL a version's slot has not confirmed: how far its live apply is behind the source.",
    );
    for v in &report.versions {
        if let Some(lag) = v.slot_lag_bytes {
            f.sample(
                "apply_lag_bytes",
                &[("target", &v.target), ("version", &v.version)],
                lag as f64,
            );
        }
    }
    let mut f = Family::new(
        &mut out,
        "apply_lag_seconds",
        "gauge",
        "Seconds between a source commit and its apply to a version, as of the last batch of \
         its live stream (stays at its last value while the source is idle).",
    );
    for v in &report.versions {
        if let Some(lag) = v.apply_lag_seconds {
            f.sample(
                "apply_lag_seconds",
                &[("target", &v.target), ("version", &v.version)],
                lag,
            );
        }
    }
    let mut f = Family::new(
        &mut out,
        "changes_applied",
        "gauge",
        "Changes of the live stream applied to a version.",
    );
    for v in report.versions.iter().filter(|v| v.phase != "unbuilt") {
        f.sample(
            "changes_applied",
            &[("target", &v.target), ("version", &v.version)],
            v.changes_applied as f64,
        );
    }
    let mut f = Family::new(
        &mut out,
        "slot_retained_bytes",
        "gauge",
        "WAL the source keeps for a walfill slot.",
    );
    for s in &report.slots {
        f.sample(
            "slot_retained_bytes",
            &[("slot", &s.name), ("kind", &s.kind)],
            s.retained_bytes as f64,
        );
    }
    if let Some(age) = report
        .archive
        .as_ref()
        .and_then(|a| a.last_segment_age_seconds)
    {
        let mut f = Family::new(
            &mut out,
            "archive_last_segment_age_seconds",
            "gauge",
            "Seconds since the newest complete WAL segment was written to the archive.",
        );
        f.sample("archive_last_segment_age_seconds", &[], age as f64);
    }
    let mut f = Family::new(
        &mut out,
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
        &mut out,
        "paused",
        "gauge",
        "1 for each paused target ('*': all).",
    );
    for target in &report.paused {
        f.sample("paused", &[("target", target)], 1.0);
    }
    let mut f = Family::new(
        &mut out,
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
    Ok(out)
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
