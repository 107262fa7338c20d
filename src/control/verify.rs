//! `walfill verify`: compares a version with the transform of its source,
//! range by range, over the whole table. It is the one command that reads
//! the source table on purpose.
//!
//! The keys up to the last one at the start are compared (keys added later
//! are not). Each key range (`chunk_rows` keys, in the source's key order)
//! is read in its own short transaction on the source, with the WAL insert
//! position taken in the same snapshot (`L`: every transaction the read
//! sees committed before it). The rows go into the destination's work
//! table, where the transform runs over them; once the version's stream has
//! applied everything up to `L`, the count and an md5 of the transformed
//! rows are compared with the version's rows of the same keys (by key: the
//! destination may order keys otherwise than the source). Rows on which the
//! transform fails are left out of the expected side, so their keys must be
//! absent from the version, as its dead letters are. Keys the version holds
//! at a version newer than `L` are left out of both sides (the read could
//! not see those changes). A transaction can be committed in WAL before `L`
//! yet not visible to the read (its commit is still being announced), so a
//! range that differs is read again, up to three times, before it is
//! reported.
//!
//! Then the version's own keys are probed on the source: a live row whose
//! key the source does not have (above its last key, below its first, or
//! between two) is a difference too.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio_postgres::{Client, GenericClient};
use tokio_util::sync::CancellationToken;
use walfill_core::Lsn;

use crate::config::Config;
use crate::control::state::{self, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::{Plan, WORK_TABLE};

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
    /// Keys of the source rows the transform fails on (absent from the
    /// version, as its dead letters are).
    pub failing: Vec<Vec<String>>,
    /// How many of those the version has no dead letter for.
    pub unrecorded: u64,
}

impl Verified {
    /// Records the verdict on `version` of `target` as a `verified` event;
    /// fails, naming each difference (the version `differs` from its
    /// source, as the caller puts it), when a range differed.
    pub async fn record(
        &self,
        dest: &impl GenericClient,
        target: &str,
        version: &str,
        differs: &str,
    ) -> Result<()> {
        state::record_event(
            dest,
            target,
            Some(version),
            "verified",
            serde_json::json!({
                "ranges": self.ranges,
                "rows": self.rows,
                "differences": self.differences,
            }),
        )
        .await?;
        if self.differences.is_empty() {
            return Ok(());
        }
        Err(Error::Problems(
            self.differences
                .iter()
                .map(|d| format!("version {version} of {target} {differs}: {d}"))
                .collect(),
        ))
    }
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
        if !found.failing.is_empty() {
            let shown: Vec<String> = found.failing.iter().take(10).map(|k| k.join(",")).collect();
            crate::say!(
                "the transform fails on {} source row(s) (keys {}{}), absent from the version \
                 as they should be; {} of them have no dead letter{}",
                found.failing.len(),
                shown.join("; "),
                if found.failing.len() > shown.len() {
                    "; ..."
                } else {
                    ""
                },
                found.unrecorded,
                if found.unrecorded > 0 {
                    " (rows that failed after the version stored them, or a version built \
                     before dead letters were kept)"
                } else {
                    ""
                }
            )?;
        }
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

/// What a verify compares: the version's plan, the same plan under the
/// source table's names now, and a session on the source.
struct Subject {
    plan: Plan,
    current: Plan,
    /// The columns the copy reads, as `as_named_now` gives them.
    copied: String,
    source: Client,
    /// The source table, quoted.
    source_table: String,
}

/// One range, read and compared (up to [`READS`] times when it differs).
struct Verdict {
    /// The range's last key.
    last: Vec<String>,
    rows: u64,
    failing: Vec<Vec<String>>,
    difference: Option<String>,
}

/// Compares every range of `version`; the differences are in the result.
pub async fn verify_version(
    config: &Config,
    dest: &Client,
    target: &str,
    version: &str,
    cancel: &CancellationToken,
) -> Result<Verified> {
    let subject = subject(config, dest, target, version).await?;
    let (end, start) = key_space(&subject).await?;
    dest.batch_execute(&subject.plan.verify_failing_function_sql())
        .await
        .map_err(|e| Error::destination("preparing the comparison", e))?;
    let chunk = config.backfill.chunk_rows;
    let mut found = Verified::default();
    let mut after: Option<Vec<String>> = None;
    let started = Instant::now();
    while let Some(end) = &end {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        let range = (after.as_deref(), end.as_slice());
        let Some(verdict) = verify_range(&subject, dest, range, chunk, cancel).await? else {
            break;
        };
        found.ranges += 1;
        found.rows += verdict.rows;
        found.failing.extend(verdict.failing);
        if let Some(d) = verdict.difference {
            tracing::error!(difference = %d, "a range differs");
            found.differences.push(d);
        }
        after = Some(verdict.last);
        if let Some(cap) = config.backfill.max_rows_per_second {
            let wanted = Duration::from_secs_f64(found.rows as f64 / f64::from(cap));
            if let Some(rest) = wanted.checked_sub(started.elapsed()) {
                tokio::time::sleep(rest).await;
            }
        }
    }
    let plan = &subject.plan;
    let strays = strays(
        &subject.source,
        dest,
        (plan, &subject.current),
        &subject.source_table,
        start,
        chunk,
        cancel,
    )
    .await?;
    if !strays.is_empty() {
        let shown: Vec<String> = strays.iter().take(10).map(|k| k.join(",")).collect();
        found.differences.push(format!(
            "the version holds {} live row(s) whose keys the source does not have (keys {}{}); \
             fix: {}",
            strays.len(),
            shown.join("; "),
            if strays.len() > shown.len() {
                "; ..."
            } else {
                ""
            },
            refresh_command(&plan.def.target, &keys_scope(&plan.key, &strays))
        ));
    }
    found.unrecorded = unrecorded(dest, plan, &found.failing).await?;
    Ok(found)
}

/// The version (which must be built), its plan, and its source table.
async fn subject(config: &Config, dest: &Client, target: &str, version: &str) -> Result<Subject> {
    let v = VersionState::load_existing(dest, target, version).await?;
    if !v.phase.is_live() {
        return Err(Error::refused(
            format!("version {version} of {target} is {}", v.phase),
            "only a built version (ready, active, previous) can be verified",
        ));
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
            Error::refused_no_fix(format!(
                "the source table of {target} (OID {relid}) is gone; nothing to verify against"
            ))
        })?;
    let (current, copied) = as_named_now(&source, &plan, relid).await?;
    Ok(Subject {
        plan,
        current,
        copied,
        source,
        source_table,
    })
}

/// The source's last key now (`None`: the table is empty), with the WAL
/// position in the same snapshot. Keys added while verify runs (an
/// increasing key under inserts) would keep it going for ever; a key the
/// version holds from before that position must be one the source has.
async fn key_space(subject: &Subject) -> Result<(Option<Vec<String>>, Lsn)> {
    let key = &subject.current.key;
    let quoted = || key.iter().map(|k| walfill_core::sql::quote_ident(k));
    let text_keys = quoted().map(|k| format!("{k}::text")).collect::<Vec<_>>();
    let descending = quoted().collect::<Vec<_>>().join(" DESC, ");
    let (end, start): (Option<Vec<String>>, String) = subject
        .source
        .query_one(
            &format!(
                "SELECT (SELECT ARRAY[{}] FROM {} ORDER BY {descending} DESC LIMIT 1),
                        pg_current_wal_insert_lsn()::text",
                text_keys.join(", "),
                subject.source_table,
            ),
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .map_err(|e| Error::source_query("finding the last key to verify", e))?;
    let start: Lsn = start.parse().map_err(|_| {
        Error::Internal(format!("the source's WAL position {start} does not parse"))
    })?;
    Ok((end, start))
}

/// Reads and compares the range of keys after `after` (up to `chunk` of
/// them, none beyond `end`); a range that differs is read again, up to
/// [`READS`] times, before it is reported. `None`: no keys are left.
async fn verify_range(
    subject: &Subject,
    dest: &Client,
    (after, end): (Option<&[String]>, &[String]),
    chunk: u32,
    cancel: &CancellationToken,
) -> Result<Option<Verdict>> {
    let plan = &subject.plan;
    for read in 1..=READS {
        let range = read_range(
            &subject.source,
            dest,
            plan,
            (&subject.current, &subject.copied),
            &subject.source_table,
            after,
            end,
            chunk,
            cancel,
        )
        .await?;
        let Some((last, lsn, rows)) = range else {
            return Ok(None);
        };
        let compared = compare_range(dest, plan, lsn).await;
        // The work table empties at commit.
        let committed = dest.batch_execute("COMMIT").await;
        let (expected, actual, failing) = compared?;
        committed.map_err(|e| Error::destination("comparing a range", e))?;
        let mut verdict = Verdict {
            last,
            rows,
            failing,
            difference: None,
        };
        if expected == actual {
            return Ok(Some(verdict));
        }
        tracing::debug!(read, ?after, "a range differs; reading it again");
        if read == READS {
            verdict.difference = Some(format!(
                "keys after {} up to {}: the transform of the source has {} rows, the version {} \
                 (or other values); fix: {}",
                after.map_or("the start".into(), |a| a.join(",")),
                verdict.last.join(","),
                expected.0,
                actual.0,
                refresh_command(
                    &plan.def.target,
                    &range_scope(&plan.key, after, &verdict.last)
                )
            ));
            return Ok(Some(verdict));
        }
    }
    Ok(None)
}

/// How many of the keys the transform fails on have no dead letter.
async fn unrecorded(dest: &Client, plan: &Plan, failing: &[Vec<String>]) -> Result<u64> {
    if failing.is_empty() {
        return Ok(0);
    }
    let recorded: i64 = dest
        .query_one(
            "SELECT count(*) FROM walfill.dead_letters
              WHERE target = $1 AND version = $2 AND key = ANY(
                    SELECT ARRAY(SELECT jsonb_array_elements_text(k))
                      FROM jsonb_array_elements($3::jsonb) AS k)",
            &[
                &plan.def.target,
                &plan.def.version,
                &serde_json::json!(failing),
            ],
        )
        .await
        .map_err(|e| Error::destination("reading the dead letters", e))?
        .get(0);
    Ok(failing.len() as u64 - recorded.max(0) as u64)
}

/// `plan` with the source table's columns under their names now (read by
/// attribute number from the table with OID `relid`): for the statements
/// verify runs on the source. A column the version reads that is gone
/// cannot be compared.
async fn as_named_now(source: &Client, plan: &Plan, relid: u32) -> Result<(Plan, String)> {
    let now = walfill_snapshot::SourceTable::describe_oid(source, relid).await?;
    let mut current = plan.clone();
    let mut copied = Vec::new();
    for column in &mut current.source.columns {
        let same = now
            .column_by_attnum(column.attnum)
            .filter(|c| c.type_oid == column.type_oid);
        if same.is_none() && !plan.reads(&column.name) {
            // Gone or retyped, and the transform never reads it.
            if column.generated.is_none() {
                copied.push(format!("NULL::{}", column.sql_type));
            }
            continue;
        }
        let named = same.ok_or_else(|| {
            plan.schema_changed(format!(
                "column {} of {} the version reads was dropped or retyped on the source, and \
                 verify compares a version with its source's columns as planned",
                column.name, plan.source,
            ))
        })?;
        if named.name != column.name {
            for key in &mut current.key {
                if *key == column.name {
                    key.clone_from(&named.name);
                }
            }
            column.name.clone_from(&named.name);
        }
        if column.generated.is_none() {
            copied.push(walfill_core::sql::quote_ident(&column.name));
        }
    }
    Ok((current, copied.join(", ")))
}

/// Compares the work table's rows (read at `lsn`) with the version's rows
/// of the same keys: `(expected, actual, failing)`, the last the keys of the
/// rows the transform fails on. Runs in the caller's destination
/// transaction, which it leaves usable.
async fn compare_range(
    dest: &Client,
    plan: &Plan,
    lsn: Lsn,
) -> Result<((i64, String), (i64, String), Vec<Vec<String>>)> {
    let (expected_sql, actual_sql) = plan.verify_sql();
    let lsn_text = lsn.to_string();
    let failed = |e| Error::destination("comparing a range", e);
    let count = |row: tokio_postgres::Row| (row.get::<_, i64>(0), row.get::<_, String>(1));
    dest.batch_execute("SAVEPOINT walfill_verify")
        .await
        .map_err(failed)?;
    let mut failing = Vec::new();
    let expected = match dest.query_one(expected_sql.as_str(), &[&lsn_text]).await {
        Ok(row) => count(row),
        Err(e) if crate::pipeline::apply::is_data_error(&e) => {
            // Some rows fail: find them (each alone), leave them out, and
            // compare the rest; their keys must be absent from the version.
            dest.batch_execute("ROLLBACK TO SAVEPOINT walfill_verify")
                .await
                .map_err(failed)?;
            failing = dest
                .query(plan.verify_mark_failing_sql().as_str(), &[])
                .await
                .map_err(failed)?
                .iter()
                .map(|r| r.get::<_, Vec<String>>(0))
                .collect();
            if failing.is_empty() {
                return Err(failed(e));
            }
            count(
                dest.query_one(expected_sql.as_str(), &[&lsn_text])
                    .await
                    .map_err(failed)?,
            )
        }
        Err(e) => return Err(failed(e)),
    };
    let actual = count(
        dest.query_one(actual_sql.as_str(), &[&lsn_text])
            .await
            .map_err(failed)?,
    );
    Ok((expected, actual, failing))
}

/// The keys of the version's live rows, stored at or before `start` (when
/// the source's last key was read), that the source does not hold: every
/// such key was in the source at `start` or arrived at the version by a
/// change the source made, which a later delete would have made a
/// tombstone. Read in the version's own key order and probed on the source
/// a batch at a time; the keys found are checked again once the version
/// has applied everything the probes saw.
async fn strays(
    source: &Client,
    dest: &Client,
    (plan, current): (&Plan, &Plan),
    source_table: &str,
    start: Lsn,
    chunk: u32,
    cancel: &CancellationToken,
) -> Result<Vec<Vec<String>>> {
    const KEPT: usize = 100_000;
    let start_text = start.to_string();
    let (live, missing) = (
        plan.live_keys_sql(None),
        current.missing_keys_sql(source_table),
    );
    let mut after: Option<Vec<String>> = None;
    let mut candidates: Vec<Vec<String>> = Vec::new();
    loop {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        let sql = match &after {
            Some(a) => plan.live_keys_sql(Some(a)),
            None => live.clone(),
        };
        let keys: Vec<Vec<String>> = dest
            .query(sql.as_str(), &[&start_text, &i64::from(chunk)])
            .await
            .map_err(|e| Error::destination("reading the version's keys", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let Some(last) = keys.last().cloned() else {
            break;
        };
        let columns = by_column(&keys, plan.key.len());
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = columns
            .iter()
            .map(|c| c as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        let absent = source
            .query(missing.as_str(), &params)
            .await
            .map_err(|e| Error::source_query("probing the source for the version's keys", e))?;
        candidates.extend(absent.iter().map(|r| r.get::<_, Vec<String>>(0)));
        candidates.truncate(KEPT);
        after = Some(last);
    }
    if candidates.is_empty() {
        return Ok(candidates);
    }
    // A delete the probes saw may not have reached the version yet.
    source
        .execute(
            "SELECT pg_logical_emit_message(true, 'walfill.verify', '')",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("marking the source's position", e))?;
    let now = crate::upstream::current_wal_lsn(source).await?;
    VersionState::wait_applied(
        dest,
        &plan.def.target,
        &plan.def.version,
        now,
        STREAM_WAIT,
        "verify",
        cancel,
    )
    .await?;
    let columns = by_column(&candidates, plan.key.len());
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&start_text];
    params.extend(
        columns
            .iter()
            .map(|c| c as &(dyn tokio_postgres::types::ToSql + Sync)),
    );
    Ok(dest
        .query(plan.still_live_sql().as_str(), &params)
        .await
        .map_err(|e| Error::destination("checking the version's stray keys", e))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Keys (each a row of text values) as one array per key column.
fn by_column(keys: &[Vec<String>], width: usize) -> Vec<Vec<String>> {
    (0..width)
        .map(|i| keys.iter().map(|k| k[i].clone()).collect())
        .collect()
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
    (current, copied): (&Plan, &str),
    source_table: &str,
    after: Option<&[String]>,
    end: &[String],
    chunk: u32,
    cancel: &CancellationToken,
) -> Result<Option<(Vec<String>, Lsn, u64)>> {
    // The source is read by its columns' names now (a rename since the
    // plan changes nothing: columns are the same attribute numbers), in the
    // order of the work table's columns.
    let columns = copied;
    let quoted: Vec<String> = current
        .key
        .iter()
        .map(|k| walfill_core::sql::quote_ident(k))
        .collect();
    let keys = quoted.join(", ");
    let descending = quoted.join(" DESC, ") + " DESC";
    let text_keys = quoted
        .iter()
        .map(|k| format!("{k}::text"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut condition = format!(" WHERE {}", current.keys_compare("<=", end));
    if let Some(a) = after {
        condition.push_str(&format!(" AND {}", current.keys_after(a)));
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
        // The range's last key in the source's own order (the destination
        // may order keys otherwise), in the same snapshot.
        let last: Option<Vec<String>> = source
            .query_opt(
                &format!(
                    "SELECT ARRAY[{text_keys}]::text[] FROM (SELECT {keys} FROM {source_table}\
                     {condition} ORDER BY {keys} LIMIT {chunk}) AS r ORDER BY {descending} LIMIT 1"
                ),
                &[],
            )
            .await
            .map_err(failed)?
            .map(|r| r.get(0));
        Ok::<_, Error>((lsn, data, last))
    }
    .await;
    let _ = source.batch_execute("COMMIT").await;
    let (lsn, data, last) = result?;
    let Some(last) = last else {
        return Ok(None);
    };
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
        .copy_in::<_, Bytes>(&format!(
            "COPY pg_temp.{WORK_TABLE} ({}) FROM STDIN",
            plan.chunk_copy_columns()
        ))
        .await
        .map_err(into)?;
    futures_util::pin_mut!(sink);
    for piece in data {
        sink.send(piece).await.map_err(into)?;
    }
    let rows = sink.as_mut().finish().await.map_err(into)?;
    Ok(Some((last, lsn, rows)))
}

/// The `walfill request` that refreshes the rows of `scope` (a condition
/// on the source's columns) in the published version: a scoped refresh
/// copies them again and tombstones keys the source no longer has.
fn refresh_command(target: &str, scope: &str) -> String {
    let shell = scope
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('$', "\\$")
        .replace('`', "\\`");
    format!("`walfill request {target} --where \"{shell}\"`")
}

/// A key column as the user would write it: bare when it can be.
fn column(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        walfill_core::sql::quote_ident(name)
    }
}

/// `k` or `(k1, k2)`, and a key's values the same way (literals, which
/// the source casts to the key's types).
fn tuple(parts: Vec<String>) -> String {
    match parts.as_slice() {
        [one] => one.clone(),
        _ => format!("({})", parts.join(", ")),
    }
}

fn key_columns(key: &[String]) -> String {
    tuple(key.iter().map(|k| column(k)).collect())
}

fn key_value(values: &[String]) -> String {
    tuple(
        values
            .iter()
            .map(|v| walfill_core::sql::quote_literal(v))
            .collect(),
    )
}

/// The keys after `after` (from the first without it) up to `last`.
fn range_scope(key: &[String], after: Option<&[String]>, last: &[String]) -> String {
    let columns = key_columns(key);
    let upper = format!("{columns} <= {}", key_value(last));
    match after {
        Some(after) => format!("{columns} > {} AND {upper}", key_value(after)),
        None => upper,
    }
}

/// Exactly these keys.
fn keys_scope(key: &[String], keys: &[Vec<String>]) -> String {
    let values: Vec<String> = keys.iter().map(|k| key_value(k)).collect();
    format!("{} IN ({})", key_columns(key), values.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fix_names_the_range_or_the_keys_as_the_source_reads_them() {
        let id = vec!["id".to_string()];
        assert_eq!(
            refresh_command(
                "t",
                &range_scope(&id, Some(&["400".into()]), &["600".into()])
            ),
            "`walfill request t --where \"id > '400' AND id <= '600'\"`"
        );
        assert_eq!(range_scope(&id, None, &["600".into()]), "id <= '600'");
        let two = vec!["Region".to_string(), "n".to_string()];
        assert_eq!(
            keys_scope(
                &two,
                &[
                    vec!["eu".into(), "1".into()],
                    vec!["o'k".into(), "2".into()]
                ]
            ),
            "(\"Region\", n) IN (('eu', '1'), ('o''k', '2'))"
        );
        assert_eq!(
            refresh_command("t", "\"Region\" = '$x'"),
            "`walfill request t --where \"\\\"Region\\\" = '\\$x'\"`"
        );
    }
}
