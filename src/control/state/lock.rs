//! Who works on a version: a session-level advisory lock in the destination,
//! taken with patience for a holder that is going away.
//!
//! The lock is released when its session ends, so a killed walfill never
//! leaves it behind for good. Its server backend may outlive the client for
//! a moment, though (longer when it was in the middle of a statement;
//! walfill's sessions set `client_connection_check_interval` so a dead
//! client's statement is cut short). So a new run waits for the holder,
//! saying who it is. A paused live holder on another host cannot be told
//! from a dead one: safety does not depend on the wait, but on the version's
//! fencing token ([`super::VersionState::take_lease`]).

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::error::{Error, Result};

/// How long to wait for a version's lock by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The lock's key: `walfill:<name>` hashed into the advisory lock space.
fn key_sql() -> &'static str {
    "hashtextextended($1, 7472616)"
}

/// Takes the lock `name` (for example `version:target:v2`) for this session,
/// waiting up to `wait` for a holder to let go. `what` names the work for
/// messages.
pub async fn acquire(client: &Client, name: &str, what: &str, wait: Duration) -> Result<()> {
    take(client, name, what, wait, false).await
}

/// [`acquire`], where another process is expected to hold the work and to
/// let go of it (a sync that follows a version being retired sees it
/// retired at its next batch): the wait is routine, and logged as such.
pub async fn acquire_when_let_go(
    client: &Client,
    name: &str,
    what: &str,
    wait: Duration,
) -> Result<()> {
    take(client, name, what, wait, true).await
}

async fn take(
    client: &Client,
    name: &str,
    what: &str,
    wait: Duration,
    expected: bool,
) -> Result<()> {
    let key = format!("walfill:{name}");
    let started = Instant::now();
    let mut told = false;
    loop {
        let got: bool = client
            .query_one(
                &format!("SELECT pg_try_advisory_lock({})", key_sql()),
                &[&key],
            )
            .await
            .map_err(|e| Error::destination("taking walfill's lock", e))?
            .get(0);
        if got {
            if told {
                tracing::info!(%what, "the previous holder let go; going on");
            }
            return Ok(());
        }
        let holder = holder_of(client, name).await?.map(|(_, d)| d);
        if started.elapsed() >= wait {
            return Err(Error::Busy {
                work: what.to_string(),
                holder: format!(
                    "another walfill process{}",
                    holder.map(|h| format!(" ({h})")).unwrap_or_default()
                ),
                fix: "stop it first (or wait for it to finish)".into(),
            });
        }
        if !told && expected {
            told = true;
            tracing::info!(
                %what,
                holder = holder.as_deref().unwrap_or("unknown"),
                "waiting for the process that works on it to let go"
            );
        } else if !told {
            told = true;
            tracing::warn!(
                %what,
                holder = holder.as_deref().unwrap_or("unknown"),
                wait_seconds = wait.as_secs(),
                "another session holds this work; waiting for it to end (a killed walfill's \
                 session ends within seconds)"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Takes the lock `name` for this session if no other session holds it.
pub async fn try_acquire(client: &Client, name: &str) -> Result<bool> {
    let got: bool = client
        .query_one(
            &format!("SELECT pg_try_advisory_lock({})", key_sql()),
            &[&format!("walfill:{name}")],
        )
        .await
        .map_err(|e| Error::destination("taking walfill's lock", e))?
        .get(0);
    Ok(got)
}

/// Releases the lock `name` taken by this session.
pub async fn release(client: &Client, name: &str) -> Result<()> {
    client
        .query_one(
            &format!("SELECT pg_advisory_unlock({})", key_sql()),
            &[&format!("walfill:{name}")],
        )
        .await
        .map_err(|e| Error::destination("releasing walfill's lock", e))?;
    Ok(())
}

/// The session holding lock `name`: its server process and a description
/// (client, state, for how long); `None` when no session holds it.
pub async fn holder_of(client: &Client, name: &str) -> Result<Option<(i32, String)>> {
    let key = format!("walfill:{name}");
    let row = client
        .query_opt(
            &format!(
                "SELECT a.pid, coalesce(a.client_addr::text, 'local'), a.state,
                        a.application_name, extract(epoch FROM now() - a.state_change)::float8
                   FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                  WHERE l.locktype = 'advisory' AND l.granted
                    AND l.database = (SELECT oid FROM pg_database
                                       WHERE datname = current_database())
                    AND l.classid = (({k}) >> 32)::int::oid
                    AND l.objid = ({k} & 4294967295)::bigint::oid
                    AND l.objsubid = 1
                  LIMIT 1",
                k = key_sql()
            ),
            &[&key],
        )
        .await
        .map_err(|e| Error::destination("looking up who holds walfill's lock", e))?;
    Ok(row.map(|r| {
        let pid = r.get::<_, i32>(0);
        let description = format!(
            "server process {pid} for {} client {}, {} for {:.0} s",
            r.get::<_, String>(3),
            r.get::<_, String>(1),
            r.get::<_, Option<String>>(2).unwrap_or_else(|| "?".into()),
            r.get::<_, Option<f64>>(4).unwrap_or(0.0)
        );
        (pid, description)
    }))
}
