//! The fence before a chunked copy reads its first chunk.
//!
//! A transaction whose commit record precedes the slot's consistent point
//! is not in the slot's stream, so every chunk must see it. It may still be
//! invisible to new snapshots: PostgreSQL writes the commit record, then
//! (with synchronous replication, after the standby answers) removes the
//! transaction from the running set. The slot does not wait for that. So
//! the copy waits until every transaction running when the slot was made
//! has left: until the oldest running xid is at least the next xid read
//! after the slot was made.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// How often the wait looks again, and how often it says what it waits for.
const POLL: Duration = Duration::from_millis(50);
const REPORT: Duration = Duration::from_secs(10);

/// Waits until every transaction running on `source` now has ended.
pub(super) async fn wait_for_running(source: &Client, cancel: &CancellationToken) -> Result<()> {
    let next: i64 = source
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading the next transaction id", e))?
        .get(0);
    let started = Instant::now();
    let mut reported = Instant::now();
    let mut first = true;
    loop {
        let oldest: i64 = source
            .query_one(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
                &[],
            )
            .await
            .map_err(|e| Error::source_query("reading the oldest running transaction", e))?
            .get(0);
        if oldest >= next {
            if !first {
                tracing::info!(
                    waited_ms = started.elapsed().as_millis() as u64,
                    "the transactions running when the slot was made have ended"
                );
            }
            return Ok(());
        }
        if first && started.elapsed() >= Duration::from_secs(1) || reported.elapsed() >= REPORT {
            first = false;
            reported = Instant::now();
            let waiting_for = running_before(source, next).await?;
            tracing::warn!(
                %waiting_for,
                waited_s = started.elapsed().as_secs(),
                "the chunked copy waits for transactions that were running when its slot was \
                 made (committed ones may still be waiting for a synchronous standby); end or \
                 cancel them to go on"
            );
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(Error::Interrupted),
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// The transactions older than xid `next` still running: pid, xid, age and
/// what they do (or that they are prepared).
async fn running_before(source: &Client, next: i64) -> Result<String> {
    let rows = source
        .query(
            "WITH old AS (
                 SELECT (x::text::bigint % 4294967296)::text AS xid
                   FROM pg_snapshot_xip(pg_current_snapshot()) AS x
                  WHERE x::text::bigint < $1)
             SELECT format('pid %s (xid %s, open %s s, %s%s)', a.pid, a.backend_xid,
                           coalesce(extract(epoch FROM now() - a.xact_start)::bigint, 0),
                           coalesce(a.state, '?'),
                           CASE WHEN a.wait_event IS NOT NULL
                                THEN ', waiting on ' || a.wait_event ELSE '' END)
               FROM pg_stat_activity a JOIN old ON old.xid = a.backend_xid::text
             UNION ALL
             SELECT format('prepared transaction %L (xid %s)', p.gid, p.transaction)
               FROM pg_prepared_xacts p JOIN old ON old.xid = p.transaction::text",
            &[&next],
        )
        .await
        .map_err(|e| Error::source_query("looking for the running transactions", e))?;
    let found: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    Ok(if found.is_empty() {
        "transactions that have just ended".to_string()
    } else {
        found.join("; ")
    })
}
