//! Each scheduled target's next due time and how its last scheduled run
//! went, for `status`, `/status` and the page.

use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::config::Config;
use crate::error::{Error, Result};

/// A target's schedule as `status` reports it (times in UTC).
#[derive(Debug, Serialize)]
pub struct ScheduleStatus {
    /// The target.
    pub target: String,
    /// The schedule as written, and the zone it is read in.
    pub schedule: String,
    /// `[serve] timezone`.
    pub timezone: String,
    /// The next time it is due.
    pub next_due: Option<String>,
    /// The due time of the last scheduled run, if any.
    pub last_due: Option<String>,
    /// Its version.
    pub last_version: Option<String>,
    /// Its state: queued, running, done, failed or cancelled; `skipped`
    /// when the last due time was skipped because a run still went on.
    pub last_state: Option<String>,
    /// Its error, when it failed.
    pub last_error: Option<String>,
}

impl ScheduleStatus {
    /// One line for `status`.
    pub fn describe(&self) -> String {
        let next = self.next_due.as_deref().unwrap_or("never");
        let last = match (&self.last_due, &self.last_state) {
            (Some(due), Some(state)) => format!(
                "; last run due {due}: {state}{}{}",
                self.last_version
                    .as_deref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default(),
                self.last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
            _ => "; no scheduled run yet".into(),
        };
        format!(
            "{} \"{}\" ({}): next due {next}{last}",
            self.target, self.schedule, self.timezone
        )
    }
}

const UTC_TEXT: &str = "YYYY-MM-DD HH24:MI:SS \"UTC\"";

/// The schedules of the configured targets.
pub async fn read(config: &Config, dest: &impl GenericClient) -> Result<Vec<ScheduleStatus>> {
    let now = chrono::Utc::now();
    let mut out = Vec::new();
    for target in &config.targets {
        let Some(schedule) = &target.schedule else {
            continue;
        };
        let zone = config.serve.timezone;
        let last = dest
            .query_opt(
                &format!(
                    "SELECT to_char(due_at AT TIME ZONE 'UTC', '{UTC_TEXT}'), version, state,
                            last_error
                       FROM walfill.requests
                      WHERE target = $1 AND origin = 'schedule'
                      ORDER BY due_at DESC, id DESC LIMIT 1"
                ),
                &[&target.name],
            )
            .await
            .map_err(|e| Error::destination("reading the scheduled runs", e))?;
        let skipped = dest
            .query_opt(
                &format!(
                    "SELECT to_char((detail->>'due_at')::timestamptz AT TIME ZONE 'UTC',
                                    '{UTC_TEXT}')
                       FROM walfill.events
                      WHERE target = $1 AND kind = 'schedule_skipped'
                      ORDER BY (detail->>'due_at')::timestamptz DESC LIMIT 1"
                ),
                &[&target.name],
            )
            .await
            .map_err(|e| Error::destination("reading the skipped scheduled runs", e))?
            .map(|r| r.get::<_, String>(0));
        let mut status = ScheduleStatus {
            target: target.name.clone(),
            schedule: schedule.text.clone(),
            timezone: zone.name().to_string(),
            next_due: schedule
                .next_due(zone, now)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string()),
            last_due: None,
            last_version: None,
            last_state: None,
            last_error: None,
        };
        if let Some(row) = last {
            status.last_due = row.get(0);
            status.last_version = row.get(1);
            status.last_state = row.get(2);
            status.last_error = row.get(3);
        }
        // The same text form orders as the times do.
        if let Some(due) = skipped.filter(|s| status.last_due.as_ref().is_none_or(|l| s > l)) {
            status.last_due = Some(due);
            status.last_version = None;
            status.last_state = Some("skipped (the run before still went on)".into());
            status.last_error = None;
        }
        out.push(status);
    }
    Ok(out)
}
