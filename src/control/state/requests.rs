//! Backfill requests in the state schema: how they are made (from every
//! entry point), claimed by one worker under a lease, and finished.
//!
//! A request is a row of `walfill.requests`. `queued` rows wait for a
//! worker; a worker claims one by turning it `running` with a lease
//! (`lease_until`) that it renews while the job runs. A claim skips rows
//! another worker is claiming at the same moment (`FOR UPDATE SKIP
//! LOCKED`), and takes over a `running` row whose lease ran out: its worker
//! died or was cut off, and the backfill resumes from the version's recorded
//! phase. Every change of a request's state notifies channel `walfill`, so
//! the services wake at once instead of at their next poll.

use std::time::Duration;

use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::{Error, Refusal, Result};
use crate::retry::Backoff;

/// The channel every request, cancel, pause and resume is announced on.
pub const CHANNEL: &str = "walfill";

/// A request as `status` and `GET /requests/ID` show it.
#[derive(Clone, Debug, Serialize)]
pub struct Request {
    /// Its id.
    pub id: i64,
    /// The target.
    pub target: String,
    /// Where it came from: cli, sql, http, schedule, config, recovery.
    pub origin: String,
    /// The version it builds (decided when first claimed); for a scoped
    /// refresh, the version it refreshed.
    pub version: Option<String>,
    /// A scoped refresh's condition on the source rows (`--where`); none:
    /// a rebuild from empty into a new version.
    pub scope: Option<String>,
    /// A schedule's due time.
    pub due_at: Option<String>,
    /// queued, running, done, failed or cancelled.
    pub state: String,
    /// Who asked (the database role).
    pub requested_by: String,
    /// When it was made.
    pub created_at: String,
    /// When a worker first started it.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// The worker running it (or that ran it last).
    pub worker: Option<String>,
    /// How many times a worker started it.
    pub attempts: i32,
    /// When it is tried again, for a request waiting after a failure.
    pub next_attempt_at: Option<String>,
    /// The error of its last attempt.
    pub last_error: Option<String>,
    /// What the finished job did: path, why, rows.
    pub outcome: Option<serde_json::Value>,
    /// Its cut-over gate.
    #[serde(flatten)]
    pub gate: Gate,
}

/// A request's cut-over gate: whether and when the version it builds is
/// published, and whether it is verified first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Gate {
    /// Build it and keep it caught up, but publish it only on `walfill swap`.
    pub no_swap: bool,
    /// Publish it at this time (RFC 3339), once caught up.
    pub swap_at: Option<String>,
    /// Compare it with the transform of its source before publishing it
    /// (none: the target's or `[backfill]`'s `verify_before_swap`).
    pub verify_before_swap: Option<bool>,
}

impl Gate {
    /// Whether the version is held back from publication when built.
    pub fn holds(&self) -> bool {
        self.no_swap || self.swap_at.is_some()
    }
}

const COLUMNS: &str = "id, target, origin, version, due_at::text, state, requested_by, \
     created_at::text, started_at::text, finished_at::text, worker, attempts, \
     CASE WHEN state = 'queued' AND next_attempt_at > now() THEN next_attempt_at::text END, \
     last_error, outcome, scope, no_swap, \
     to_char(swap_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), verify_before_swap";

fn from_row(r: &tokio_postgres::Row) -> Request {
    Request {
        id: r.get(0),
        target: r.get(1),
        origin: r.get(2),
        version: r.get(3),
        due_at: r.get(4),
        state: r.get(5),
        requested_by: r.get(6),
        created_at: r.get(7),
        started_at: r.get(8),
        finished_at: r.get(9),
        worker: r.get(10),
        attempts: r.get(11),
        next_attempt_at: r.get(12),
        last_error: r.get(13),
        outcome: r.get(14),
        scope: r.get(15),
        gate: Gate {
            no_swap: r.get(16),
            swap_at: r.get(17),
            verify_before_swap: r.get(18),
        },
    }
}

/// Queues a request for `target` (`version`: a given version to build; none:
/// decided when it runs) and wakes the services; returns its id.
pub async fn enqueue(
    client: &impl GenericClient,
    target: &str,
    origin: &str,
    version: Option<&str>,
) -> Result<i64> {
    enqueue_scoped(client, target, origin, version, None).await
}

/// [`enqueue_scoped`] on behalf of `who` (a token's name; `None`: the
/// session's role, as for every other request), with its cut-over gate.
pub async fn enqueue_by(
    client: &impl GenericClient,
    target: &str,
    origin: &str,
    scope: Option<&str>,
    who: Option<&str>,
    gate: &Gate,
) -> Result<i64> {
    if scope.is_some() && gate.holds() {
        return Err(Error::refused(
            "a scoped refresh (--where) changes the published version in place: it has no swap \
             to hold",
            "drop --no-swap and --swap-at, or --where",
        ));
    }
    let row = client
        .query_one(
            "WITH r AS (INSERT INTO walfill.requests (target, origin, scope, requested_by,
                                                     no_swap, swap_at, verify_before_swap)
                        VALUES ($1, $2, $3, coalesce($4, current_user), $5,
                                $6::text::timestamptz, $7)
                        RETURNING id)
             SELECT r.id FROM r, LATERAL pg_notify('walfill', 'request ' || r.id) n",
            &[
                &target,
                &origin,
                &scope,
                &who,
                &gate.no_swap,
                &gate.swap_at,
                &gate.verify_before_swap,
            ],
        )
        .await
        .map_err(|e| Error::destination("recording the request", e))?;
    Ok(row.get(0))
}

/// [`enqueue`], for a scoped refresh of the rows matching `scope` when it is
/// set.
pub async fn enqueue_scoped(
    client: &impl GenericClient,
    target: &str,
    origin: &str,
    version: Option<&str>,
    scope: Option<&str>,
) -> Result<i64> {
    let row = client
        .query_one(
            "WITH r AS (INSERT INTO walfill.requests (target, origin, version, scope)
                        VALUES ($1, $2, $3, $4) RETURNING id)
             SELECT r.id FROM r, LATERAL pg_notify('walfill', 'request ' || r.id) n",
            &[&target, &origin, &version, &scope],
        )
        .await
        .map_err(|e| Error::destination("recording the request", e))?;
    Ok(row.get(0))
}

/// Holds a built version back from publication by its request's `gate`:
/// until `walfill swap`, or until the gate's `swap_at`.
pub async fn hold(
    client: &impl GenericClient,
    target: &str,
    version: &str,
    gate: &Gate,
) -> Result<()> {
    client
        .execute(
            "UPDATE walfill.versions
                SET held = true, swap_at = $3::text::timestamptz, verify_before_swap = $4,
                    swap_error = NULL
              WHERE target = $1 AND version = $2 AND phase = 'ready'",
            &[&target, &version, &gate.swap_at, &gate.verify_before_swap],
        )
        .await
        .map_err(|e| Error::destination("holding the version back from its swap", e))?;
    Ok(())
}

/// One request, if it exists.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Request>> {
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM walfill.requests WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(|e| Error::destination("reading the request", e))?;
    Ok(row.as_ref().map(from_row))
}

/// Open requests and the most recent finished ones, newest first.
pub async fn recent(client: &impl GenericClient, finished: i64) -> Result<Vec<Request>> {
    let rows = client
        .query(
            &format!(
                "(SELECT {COLUMNS} FROM walfill.requests WHERE state IN ('queued', 'running'))
                 UNION ALL
                 (SELECT {COLUMNS} FROM walfill.requests
                   WHERE state NOT IN ('queued', 'running') ORDER BY id DESC LIMIT $1)
                 ORDER BY id DESC"
            ),
            &[&finished],
        )
        .await
        .map_err(|e| Error::destination("reading the requests", e))?;
    Ok(rows.iter().map(from_row).collect())
}

/// Withdraws a queued request, or a failed one (so that the version it
/// began is retired). A running one is not stopped (pause its target for
/// that); a done one stays as it ended.
pub async fn cancel(client: &impl GenericClient, id: i64) -> Result<Request> {
    let row = client
        .query_opt(
            "UPDATE walfill.requests SET state = 'cancelled', finished_at = now()
              WHERE id = $1 AND state IN ('queued', 'failed') RETURNING id",
            &[&id],
        )
        .await
        .map_err(|e| Error::destination("cancelling the request", e))?;
    let request = get(client, id)
        .await?
        .ok_or_else(|| Error::refused_no_fix(format!("there is no request {id}")))?;
    if row.is_none() {
        return Err(Error::Refused(Refusal {
            problem: format!(
                "request {id} is {}: only a queued or failed request can be cancelled",
                request.state
            ),
            fix: (request.state == "running").then(|| {
                format!(
                    "`walfill pause {}` stops its job where it is",
                    request.target
                )
            }),
        }));
    }
    notify(client, &format!("cancel {id}")).await;
    Ok(request)
}

/// Announces `payload` on the channel (best effort: services poll too).
pub async fn notify(client: &impl GenericClient, payload: &str) {
    let _ = client
        .execute("SELECT pg_notify('walfill', $1)", &[&payload])
        .await;
}

/// Pauses the backfills of `target` (`None`: all targets).
pub async fn pause(client: &impl GenericClient, target: Option<&str>) -> Result<()> {
    let key = target.unwrap_or("*");
    client
        .execute(
            "INSERT INTO walfill.paused (target) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&key],
        )
        .await
        .map_err(|e| Error::destination("recording the pause", e))?;
    notify(client, &format!("pause {key}")).await;
    Ok(())
}

/// Resumes the backfills of `target` (`None`: all targets, every pause).
pub async fn resume(client: &impl GenericClient, target: Option<&str>) -> Result<()> {
    client
        .execute(
            "DELETE FROM walfill.paused WHERE $1::text IS NULL OR target = $1",
            &[&target],
        )
        .await
        .map_err(|e| Error::destination("removing the pause", e))?;
    notify(client, &format!("resume {}", target.unwrap_or("*"))).await;
    Ok(())
}

/// The paused targets (`*` for all).
pub async fn paused(client: &impl GenericClient) -> Result<Vec<String>> {
    let rows = client
        .query("SELECT target FROM walfill.paused ORDER BY target", &[])
        .await
        .map_err(|e| Error::destination("reading the pauses", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Whether `target`'s backfills are paused.
pub async fn is_paused(client: &impl GenericClient, target: &str) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM walfill.paused WHERE target IN ($1, '*'))",
            &[&target],
        )
        .await
        .map_err(|e| Error::destination("reading the pauses", e))?;
    Ok(row.get(0))
}

/// Claims the oldest request that is due, whose target is not paused and
/// has no other job running, for `worker` with a lease of `lease`: a
/// queued one, or a running one whose worker's lease ran out.
pub async fn claim(
    client: &impl GenericClient,
    worker: &str,
    lease: Duration,
) -> Result<Option<Request>> {
    let seconds = lease.as_secs_f64();
    let row = client
        .query_opt(
            &format!(
                "UPDATE walfill.requests r
                    SET state = 'running', worker = $1, attempts = r.attempts + 1,
                        last_error = NULL,
                        lease_until = now() + make_interval(secs => $2),
                        started_at = coalesce(r.started_at, now())
                  WHERE r.id = (
                        SELECT q.id FROM walfill.requests q
                         WHERE (q.state = 'queued' AND q.next_attempt_at <= now()
                                OR q.state = 'running' AND q.lease_until < now())
                           AND NOT EXISTS (SELECT 1 FROM walfill.paused p
                                            WHERE p.target IN (q.target, '*'))
                           AND NOT EXISTS (SELECT 1 FROM walfill.requests o
                                            WHERE o.target = q.target AND o.id <> q.id
                                              AND o.state = 'running'
                                              AND o.lease_until >= now())
                         ORDER BY q.id
                         FOR UPDATE SKIP LOCKED
                         LIMIT 1)
                 RETURNING {}",
                COLUMNS.replace("id, target", "r.id, r.target")
            ),
            &[&worker, &seconds],
        )
        .await
        .map_err(|e| Error::destination("claiming a request", e))?;
    Ok(row.as_ref().map(from_row))
}

/// Records the version a claimed request builds (kept for takeovers).
pub async fn set_version(client: &impl GenericClient, id: i64, version: &str) -> Result<()> {
    client
        .execute(
            "UPDATE walfill.requests SET version = $2 WHERE id = $1",
            &[&id, &version],
        )
        .await
        .map_err(|e| Error::destination("recording the request's version", e))?;
    Ok(())
}

/// Renews `worker`'s lease on request `id`; false when the worker lost it
/// (another took the request over, or it was cancelled).
pub async fn renew(
    client: &impl GenericClient,
    id: i64,
    worker: &str,
    lease: Duration,
) -> Result<bool> {
    let n = client
        .execute(
            "UPDATE walfill.requests SET lease_until = now() + make_interval(secs => $3)
              WHERE id = $1 AND worker = $2 AND state = 'running'",
            &[&id, &worker, &lease.as_secs_f64()],
        )
        .await
        .map_err(|e| Error::destination("renewing the request's lease", e))?;
    Ok(n == 1)
}

/// How a job ended, for its request.
pub enum Ending {
    /// Built (and published): the outcome recorded.
    Done(serde_json::Value),
    /// Stopped by a pause or a shutdown: queued again, to resume.
    Requeue,
    /// Failed; tried again after the pause `retry` gives for the
    /// request's attempts so far, or never (`None`).
    Failed {
        /// The error.
        error: String,
        /// The pauses between attempts.
        retry: Option<Backoff>,
    },
}

/// Records how `worker`'s job on request `id` ended (nothing if the worker
/// lost the request meanwhile).
pub async fn finish(
    client: &impl GenericClient,
    id: i64,
    worker: &str,
    ending: &Ending,
) -> Result<()> {
    let result = match ending {
        Ending::Done(outcome) => {
            client
                .execute(
                    "UPDATE walfill.requests
                        SET state = 'done', finished_at = now(), lease_until = NULL,
                            outcome = $3, last_error = NULL
                      WHERE id = $1 AND worker = $2 AND state = 'running'",
                    &[&id, &worker, outcome],
                )
                .await
        }
        Ending::Requeue => {
            client
                .execute(
                    "UPDATE walfill.requests SET state = 'queued', lease_until = NULL
                      WHERE id = $1 AND worker = $2 AND state = 'running'",
                    &[&id, &worker],
                )
                .await
        }
        Ending::Failed {
            error,
            retry: Some(backoff),
        } => {
            let attempts: i32 = client
                .query_opt(
                    "SELECT attempts FROM walfill.requests WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(|e| Error::destination("reading the request's attempts", e))?
                .map_or(1, |row| row.get(0));
            let wait = backoff.after(u32::try_from(attempts).unwrap_or(1));
            tracing::info!(
                request = id,
                attempt = attempts,
                retry_in_seconds = wait.as_secs(),
                "the request is tried again after a pause"
            );
            client
                .execute(
                    "UPDATE walfill.requests
                        SET state = 'queued', lease_until = NULL, last_error = $3,
                            next_attempt_at = now() + make_interval(secs => $4)
                      WHERE id = $1 AND worker = $2 AND state = 'running'",
                    &[&id, &worker, error, &wait.as_secs_f64()],
                )
                .await
        }
        Ending::Failed { error, retry: None } => {
            client
                .execute(
                    "UPDATE walfill.requests
                        SET state = 'failed', finished_at = now(), lease_until = NULL,
                            last_error = $3
                      WHERE id = $1 AND worker = $2 AND state = 'running'",
                    &[&id, &worker, error],
                )
                .await
        }
    };
    result.map_err(|e| Error::destination("recording how the request ended", e))?;
    notify(client, &format!("finished {id}")).await;
    Ok(())
}
