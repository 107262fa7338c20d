//! Dead letters: rows of a batch whose transform fails while the rest of
//! the batch is stored.
//!
//! A batch's statements run under a savepoint. When one fails with an error
//! of the data (a division by zero, a failed cast, an exception a function
//! raises: SQLSTATE classes 22, 2F, 38, 39 and P0), the batch rolls back to
//! the savepoint, each row is probed alone, the failing ones are set aside
//! ([`crate::pipeline::version_sql::DeadLetterSql`]) and the statements run again. A batch
//! in which every row fails is not dead letters but a broken transform:
//! the error stops the job, as before.
//!
//! The pieces of a source transaction too large for the apply's memory
//! bound share one destination transaction. A savepoint that writes gives
//! that transaction a subtransaction, and past 64 of them every snapshot
//! taken on the destination must look subtransactions up; so a piece is
//! checked instead: its transform runs over its rows under a savepoint that
//! writes nothing (no subtransaction id), and only when that fails are its
//! rows probed and the poison ones set aside, outside any savepoint. The
//! piece's statements then run without one.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use tokio_postgres::Transaction;
use walfill_core::sql::{sql_class, SqlClass};
use walfill_core::Lsn;

use crate::error::{Error, Result};
use crate::pipeline::version_sql::{DeadLetterSql, Plan};

/// Rows probed before a batch whose rows all fail counts as a broken
/// transform rather than poison rows.
const ALL_FAIL_AT_LEAST: usize = 3;

/// Whether `e` is an error of one row's data rather than of the statement.
pub fn is_data_error(e: &tokio_postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| sql_class(c) == SqlClass::DataOrRoutine)
}

/// A store's dead-letter statements (built once), and whether the version
/// has dead letters as far as the store knows: read once, then kept (only
/// the store that holds the version adds them).
/// It also counts the rows it has seen and set aside, against the share
/// of failing rows past which the transform counts as broken.
#[derive(Debug)]
pub(super) struct Guard {
    sql: DeadLetterSql,
    known: AtomicU8,
    /// `[backfill] max_dead_letter_percent`.
    pub(super) limit_percent: u32,
    seen: AtomicU64,
    set_aside: AtomicU64,
}

/// Rows seen before the share of failing ones is judged.
const JUDGED_FROM_ROWS: u64 = 1000;

impl Guard {
    /// The guard of `plan`'s version.
    pub(super) fn new(plan: &Plan) -> Guard {
        Guard {
            sql: plan.dead_letter_sql(),
            known: AtomicU8::new(0),
            limit_percent: 20,
            seen: AtomicU64::new(0),
            set_aside: AtomicU64::new(0),
        }
    }

    /// The dead-letter statements.
    pub(super) fn sql(&self) -> &DeadLetterSql {
        &self.sql
    }

    /// Counts a batch of `rows` of which `set_aside` failed; an error once
    /// the failing share of the rows seen passes the limit.
    fn count(&self, plan: &Plan, rows: u64, set_aside: u64, sample: &str) -> Result<()> {
        let seen = self.seen.fetch_add(rows, Ordering::Relaxed) + rows;
        let failed = self.set_aside.fetch_add(set_aside, Ordering::Relaxed) + set_aside;
        if set_aside == 0
            || seen < JUDGED_FROM_ROWS
            || failed * 100 <= seen * u64::from(self.limit_percent)
        {
            return Ok(());
        }
        Err(Error::Problems(vec![format!(
            "version {} of {}: the transform failed on {failed} of the {seen} rows read so far \
             ({:.1}%), more than [backfill] max_dead_letter_percent = {}: the transform is broken \
             rather than the rows (last: {sample}); fix it and give the fixed one a new version, \
             or raise the limit",
            plan.def.version,
            plan.def.target,
            failed as f64 * 100.0 / seen as f64,
            self.limit_percent
        )]))
    }
}

// 0: not read yet.
const NONE: u8 = 1;
const SOME: u8 = 2;

/// A copied chunk's version, and whether rows of its keys may be stored
/// already (a refresh, the stream's rows beside a copy).
#[derive(Clone, Copy, Debug)]
pub(super) struct Copied {
    pub(super) lsn: Lsn,
    pub(super) seq: i32,
    pub(super) stored: bool,
}

/// How a batch's statements are kept from failing on a poison row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guarding {
    /// Under a savepoint: rolled back and run again without the poison
    /// rows when they fail (a batch that commits on its own).
    Savepoint,
    /// Checked first by a statement that writes nothing (a piece of a large
    /// source transaction; see the module's comment).
    Check,
    /// Under a savepoint, for dead letters applied again: rows that fail
    /// again are set aside again, however many, and count toward no limit
    /// (they failed once already).
    Retry,
}

/// Runs `statements` guarded as `guarding` says, then `then` (SQL without
/// parameters, sent with the savepoint's release); on a data error sets the
/// failing rows aside and runs them again. `chunk`: the version (snapshot
/// LSN, seq) of a copied chunk (its failing rows are dropped, and their
/// keys tombstoned at that version, not turned into deletes). Returns
/// how many rows were set aside. The savepoint travels with the first
/// statement and its release with `then`: no round trip of their own.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_guarded(
    dest: &Transaction<'_>,
    plan: &Plan,
    guard: &Guard,
    guarding: Guarding,
    rows: u64,
    statements: &[(&str, &[&(dyn tokio_postgres::types::ToSql + Sync)])],
    chunk: Option<Copied>,
    then: &str,
    context: &str,
) -> Result<u64> {
    if guard.known.load(Ordering::Relaxed) != NONE {
        let some = resolve(dest, plan, &guard.sql.resolve, chunk).await?;
        guard
            .known
            .store(if some { SOME } else { NONE }, Ordering::Relaxed);
    }
    let failed = |e| Error::destination(context, e);
    if guarding == Guarding::Check {
        let (savepoint, check) = tokio::join!(
            dest.batch_execute("SAVEPOINT walfill_check"),
            dest.query_one(guard.sql.check.as_str(), &[])
        );
        let mut set_aside = 0;
        match savepoint.and(check) {
            Ok(_) => dest.batch_execute("RELEASE SAVEPOINT walfill_check").await,
            Err(e) if is_data_error(&e) => {
                dest.batch_execute("ROLLBACK TO SAVEPOINT walfill_check")
                    .await
                    .map_err(failed)?;
                let (count, sample) =
                    quarantine(dest, plan, &guard.sql, chunk, (&e, false), context).await?;
                set_aside = count;
                guard.count(plan, rows, count, &sample)?;
                guard.known.store(SOME, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(e),
        }
        .map_err(failed)?;
        if set_aside == 0 {
            guard.count(plan, rows, 0, "")?;
        }
        run_all(dest, statements).await.map_err(failed)?;
        dest.batch_execute(then).await.map_err(failed)?;
        return Ok(set_aside);
    }
    let (savepoint, first) = tokio::join!(
        dest.batch_execute("SAVEPOINT walfill_batch"),
        run_all(dest, statements)
    );
    let error = match savepoint.and(first) {
        Ok(()) => {
            dest.batch_execute(&format!("RELEASE SAVEPOINT walfill_batch; {then}"))
                .await
                .map_err(failed)?;
            if guarding != Guarding::Retry {
                guard.count(plan, rows, 0, "")?;
            }
            return Ok(0);
        }
        Err(e) if is_data_error(&e) => e,
        Err(e) => return Err(failed(e)),
    };
    dest.batch_execute("ROLLBACK TO SAVEPOINT walfill_batch")
        .await
        .map_err(failed)?;
    let retry = guarding == Guarding::Retry;
    let (set_aside, sample) =
        quarantine(dest, plan, &guard.sql, chunk, (&error, retry), context).await?;
    if !retry {
        guard.count(plan, rows, set_aside, &sample)?;
    }
    guard.known.store(SOME, Ordering::Relaxed);
    run_all(dest, statements).await.map_err(failed)?;
    dest.batch_execute(&format!("RELEASE SAVEPOINT walfill_batch; {then}"))
        .await
        .map_err(failed)?;
    Ok(set_aside)
}

async fn run_all(
    dest: &Transaction<'_>,
    statements: &[(&str, &[&(dyn tokio_postgres::types::ToSql + Sync)])],
) -> std::result::Result<(), tokio_postgres::Error> {
    for (statement, params) in statements {
        dest.execute(*statement, params).await?;
    }
    Ok(())
}

/// Removes the dead letters of keys this batch writes at a newer version;
/// returns whether the version had any.
async fn resolve(
    dest: &Transaction<'_>,
    plan: &Plan,
    sql: &str,
    chunk: Option<Copied>,
) -> Result<bool> {
    let present: bool = dest
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM walfill.dead_letters WHERE target = $1 AND version = $2)",
            &[&plan.def.target, &plan.def.version],
        )
        .await
        .map_err(|e| Error::destination("reading the dead letters", e))?
        .get(0);
    if present {
        let lsn = chunk.map(|c| c.lsn).unwrap_or_default().to_string();
        dest.execute(sql, &[&plan.def.target, &plan.def.version, &lsn])
            .await
            .map_err(|e| Error::destination("resolving dead letters", e))?;
    }
    Ok(present)
}

/// Finds the failing upserts of the work table in bulk, sets them aside
/// and records them as dead letters, in one statement; logs one line.
/// Returns how many, and the first one's key and error. Every row failing
/// means a broken transform, unless the rows are dead letters `retried`.
async fn quarantine(
    dest: &Transaction<'_>,
    plan: &Plan,
    sql: &DeadLetterSql,
    chunk: Option<Copied>,
    (first_error, retried): (&tokio_postgres::Error, bool),
    context: &str,
) -> Result<(u64, String)> {
    let failed = |e| Error::destination("setting aside the rows whose transform fails", e);
    let candidates: i64 = dest
        .query_one(sql.candidates.as_str(), &[])
        .await
        .map_err(failed)?
        .get(0);
    dest.batch_execute(&sql.failing_function)
        .await
        .map_err(failed)?;
    let statement = match chunk {
        None => &sql.set_aside_changes,
        Some(c) if c.stored => &sql.set_aside_copied_stored,
        Some(_) => &sql.set_aside_copied,
    };
    let lsn = chunk.map(|c| c.lsn).unwrap_or_default().to_string();
    let seq = chunk.map(|c| c.seq).unwrap_or(0);
    let row = dest
        .query_one(
            statement.as_str(),
            &[&plan.def.target, &plan.def.version, &plan.key, &lsn, &seq],
        )
        .await
        .map_err(failed)?;
    let (count, key, error): (i64, Option<String>, Option<String>) =
        (row.get(0), row.get(1), row.get(2));
    if count == 0 || (!retried && count == candidates && count >= ALL_FAIL_AT_LEAST as i64) {
        // Not one row's data (or every row's): the transform itself fails.
        return Err(Error::Problems(vec![format!(
            "{context}: the transform fails on every row of the batch: {}; fix the \
             transform (give the fixed one a new version)",
            walfill_core::sql::describe_pg_error(first_error)
        )]));
    }
    if !retried {
        tracing::warn!(
        target = %plan.def.target,
        version = %plan.def.version,
        rows = count,
        of = candidates,
        first_key = key.as_deref().unwrap_or(""),
        first_error = error.as_deref().unwrap_or(""),
        "the transform fails on rows of this batch; they go to the dead letters and their keys \
         are absent from the version (`walfill dead-letters` lists them)"
        );
    }
    let sample = format!(
        "key {}: {}",
        key.unwrap_or_default(),
        error.unwrap_or_default()
    );
    Ok((count as u64, sample))
}
