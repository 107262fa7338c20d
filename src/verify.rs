//! `walfill verify`: compares a version with the transform of its source,
//! range by range, over the whole table. It is the one command that reads
//! the source table on purpose.
//!
//! The keys up to the last one at the start are compared (keys added later
//! are not). Each key range (`chunk_rows` keys) is read in its own short transaction
//! on the source, with the WAL insert position taken in the same snapshot
//! (`L`: every transaction the read sees committed before it). The rows go
//! into the destination's work table, where the transform runs over them;
//! once the version's stream has applied everything up to `L`, the count and
//! an md5 of the transformed rows are compared with the version's rows of
//! the same range. Keys the version holds at a version newer than `L` are
//! left out of both sides (the read could not see those changes). A
//! transaction can be committed in WAL before `L` yet not visible to the
//! read (its commit is still being announced), so a range that differs is
//! read again, up to three times, before it is reported.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;

use crate::config::Config;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::plan::{Plan, WORK_TABLE};
use crate::state::{self, VersionState};

/// Reads of a range that differs before it is reported.
const READS: usize = 3;
/// How long a range waits for the version's stream to reach its read.
const STREAM_WAIT: Duration = Duration::from_secs(120);

/// What `verify` found.
#[derive(Debug, Default)]
pub struct Verified {
    /// Ranges compared.
    pub ranges: u64,
    /// Source rows read.
    pub rows: u64,
    /// Ranges that differ, described.
    pub differences: Vec<String>,
}

/// Verifies `version` (default: the active one) of `target`; says what it
/// found, and fails (exit 3) when a range differs.
pub async fn verify(
    config: &Config,
    target: &str,
    version: Option<String>,
    cancel: &CancellationToken,
) -> Result<()> {
    config.target(target)?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let version = state::version_or_active(&dest, target, version).await?;
    let found = verify_version(config, &dest, target, &version, cancel).await?;
    if found.differences.is_empty() {
        crate::say!(
            "version {version} of {target} equals the transform of its source: {} rows in {} \
             ranges compared",
            found.rows,
            found.ranges
        )?;
        return Ok(());
    }
    Err(Error::Problems(
        found
            .differences
            .iter()
            .map(|d| format!("version {version} of {target}: {d}"))
            .collect(),
    ))
}

/// Compares every range of `version`; the differences are in the result.
pub async fn verify_version(
    config: &Config,
    dest: &Client,
    target: &str,
    version: &str,
    cancel: &CancellationToken,
) -> Result<Verified> {
    let v = VersionState::load_existing(dest, target, version).await?;
    if !v.phase.is_live() {
        return Err(Error::Request(format!(
            "version {version} of {target} is {}; only a built version (ready, active, \
             previous) can be verified",
            v.phase
        )));
    }
    let plan = v.plan(dest).await?;
    let relid = v
        .source_relid
        .ok_or_else(|| Error::Internal("the version has no source table OID".into()))?;
    let source = db::connect(&config.source, Role::Source).await?;
    let source_table: String = source
        .query_opt(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(|e| Error::source_query("finding the source table", e))?
        .map(|r| r.get(0))
        .ok_or_else(|| {
            Error::Request(format!(
                "the source table of {target} (OID {relid}) is gone; nothing to verify against"
            ))
        })?;
    let chunk = config.backfill.chunk_rows;
    // The key space as it is now: keys added while verify runs (an
    // increasing key under inserts) would keep it going for ever.
    let text_keys = plan
        .key
        .iter()
        .map(|k| format!("{}::text", walfill_core::sql::quote_ident(k)))
        .collect::<Vec<_>>()
        .join(", ");
    let end: Option<Vec<String>> = source
        .query_opt(
            &format!(
                "SELECT ARRAY[{text_keys}] FROM {source_table} ORDER BY {} DESC LIMIT 1",
                plan.key
                    .iter()
                    .map(|k| walfill_core::sql::quote_ident(k))
                    .collect::<Vec<_>>()
                    .join(" DESC, ")
            ),
            &[],
        )
        .await
        .map_err(|e| Error::source_query("finding the last key to verify", e))?
        .map(|r| r.get(0));
    let Some(end) = end else {
        // An empty source: the version must be empty too.
        let live: i64 = dest
            .query_one(
                &format!(
                    "SELECT count(*) FROM {} WHERE NOT _walfill_deleted",
                    v.staging_table()
                ),
                &[],
            )
            .await
            .map_err(|e| Error::destination("counting the version's rows", e))?
            .get(0);
        let mut found = Verified::default();
        if live > 0 {
            found.differences.push(format!(
                "the source is empty and the version has {live} rows"
            ));
        }
        return Ok(found);
    };
    let mut found = Verified::default();
    let mut after: Option<Vec<String>> = None;
    let started = Instant::now();
    loop {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        let mut verdict = None;
        for read in 1..=READS {
            let range = read_range(
                &source,
                dest,
                &plan,
                &source_table,
                after.as_deref(),
                &end,
                chunk,
                cancel,
            )
            .await?;
            let Some((last, lsn, rows)) = range else {
                return Ok(found);
            };
            let mut condition = plan.keys_compare("<=", &last);
            if let Some(a) = &after {
                condition = format!("{} AND {condition}", plan.keys_after(a));
            }
            let (expected_sql, actual_sql) = plan.verify_sql(&condition);
            let lsn_text = lsn.to_string();
            let compare = |sql: String| {
                let lsn_text = lsn_text.clone();
                async move {
                    dest.query_one(sql.as_str(), &[&lsn_text])
                        .await
                        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
                        .map_err(|e| Error::destination("comparing a range", e))
                }
            };
            let expected = compare(expected_sql).await?;
            let actual = compare(actual_sql).await?;
            // The work table empties at commit.
            dest.batch_execute("COMMIT")
                .await
                .map_err(|e| Error::destination("comparing a range", e))?;
            if expected == actual {
                verdict = Some((last, rows, None));
                break;
            }
            tracing::debug!(read, ?after, "a range differs; reading it again");
            if read == READS {
                let text = format!(
                    "keys after {} up to {}: the transform of the source has {} rows, the \
                     version {} (or other values)",
                    after.as_ref().map_or("the start".into(), |a| a.join(",")),
                    last.join(","),
                    expected.0,
                    actual.0
                );
                verdict = Some((last, rows, Some(text)));
            }
        }
        let Some((last, rows, difference)) = verdict else {
            return Ok(found);
        };
        found.ranges += 1;
        found.rows += rows;
        if let Some(d) = difference {
            tracing::error!(difference = %d, "a range differs");
            found.differences.push(d);
        }
        after = Some(last);
        if let Some(cap) = config.backfill.max_rows_per_second {
            let wanted = Duration::from_secs_f64(found.rows as f64 / f64::from(cap));
            if let Some(rest) = wanted.checked_sub(started.elapsed()) {
                tokio::time::sleep(rest).await;
            }
        }
    }
}

/// Reads the range of `chunk` keys after `after` (up to `end`) in one short
/// transaction on the source, waits for the version's stream to pass what
/// the read saw, and loads the rows into the work table (in a destination
/// transaction the caller commits after comparing); returns the range's
/// last key, the WAL position the read saw, and its rows (`None`: no keys
/// left).
#[allow(clippy::too_many_arguments)]
async fn read_range(
    source: &Client,
    dest: &Client,
    plan: &Plan,
    source_table: &str,
    after: Option<&[String]>,
    end: &[String],
    chunk: u32,
    cancel: &CancellationToken,
) -> Result<Option<(Vec<String>, Lsn, u64)>> {
    let columns = plan.chunk_copy_columns();
    let keys = plan
        .key
        .iter()
        .map(|k| walfill_core::sql::quote_ident(k))
        .collect::<Vec<_>>()
        .join(", ");
    let mut condition = format!(" WHERE {}", plan.keys_compare("<=", end));
    if let Some(a) = after {
        condition.push_str(&format!(" AND {}", plan.keys_after(a)));
    }
    let failed = |e| Error::source_query("reading a range to verify", e);
    source
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(failed)?;
    let result = async {
        let lsn: String = source
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .map_err(failed)?
            .get(0);
        let stream = source
            .copy_out(&format!(
                "COPY (SELECT {columns} FROM {source_table}{condition} ORDER BY {keys} LIMIT {chunk}) TO STDOUT"
            ))
            .await
            .map_err(failed)?;
        let mut data: Vec<Bytes> = Vec::new();
        futures_util::pin_mut!(stream);
        while let Some(piece) = stream.next().await {
            data.push(piece.map_err(failed)?);
        }
        Ok::<_, Error>((lsn, data))
    }
    .await;
    let _ = source.batch_execute("COMMIT").await;
    let (lsn, data) = result?;
    // A transaction after the read, so that the stream passes its position
    // even when the table sees no more changes (an idle stream does not
    // move the version's recorded position).
    source
        .execute(
            "SELECT pg_logical_emit_message(true, 'walfill.verify', '')",
            &[],
        )
        .await
        .map_err(failed)?;
    let lsn: Lsn = lsn
        .parse()
        .map_err(|_| Error::Internal(format!("the source's WAL position {lsn} does not parse")))?;
    // Waited for before the destination transaction opens: a transaction
    // held open meanwhile would hold back every slot created in its cluster.
    VersionState::wait_applied(
        dest,
        &plan.def.target,
        &plan.def.version,
        lsn,
        STREAM_WAIT,
        "verify",
        cancel,
    )
    .await?;
    let into = |e| Error::destination("loading a range to verify", e);
    dest.batch_execute(&format!("BEGIN; TRUNCATE pg_temp.{WORK_TABLE}"))
        .await
        .map_err(into)?;
    let sink = dest
        .copy_in::<_, Bytes>(&format!("COPY pg_temp.{WORK_TABLE} ({columns}) FROM STDIN"))
        .await
        .map_err(into)?;
    futures_util::pin_mut!(sink);
    for piece in data {
        sink.send(piece).await.map_err(into)?;
    }
    let rows = sink.as_mut().finish().await.map_err(into)?;
    if rows == 0 {
        dest.batch_execute("COMMIT").await.map_err(into)?;
        return Ok(None);
    }
    let last: Vec<String> = dest
        .query_one(
            &format!(
                "SELECT ARRAY[{}]::text[] FROM pg_temp.{WORK_TABLE} ORDER BY {keys} DESC LIMIT 1",
                plan.key
                    .iter()
                    .map(|k| format!("{}::text", walfill_core::sql::quote_ident(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            &[],
        )
        .await
        .map_err(into)?
        .get(0);
    Ok(Some((last, lsn, rows)))
}
