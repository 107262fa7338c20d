//! Dead letters applied again through the store: each letter's source row
//! is stored at its own version, where what the version holds for its key
//! is the tombstone the letter left (or an older one, or nothing).
//!
//! A letter a TRUNCATE passed since (its version is no newer than the
//! watermark), or one recorded without its row, is dropped: its row is
//! gone, or only a newer change of its key can settle it. A letter whose
//! transform fails again is set aside again (its error and attempts
//! updated); one that applies is forgotten, in the same transaction.

use tokio_postgres::Transaction;
use walfill_core::Version;

use super::batch::Letter;
use super::dead::{run_guarded, Guard, Guarding};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::{Plan, WORK_TABLE};

/// Stores `letters` in `dest`'s transaction, against the TRUNCATE
/// `watermark`; returns how many were set aside again and how many were
/// dropped.
pub(super) async fn store(
    dest: &Transaction<'_>,
    plan: &Plan,
    guard: &Guard,
    letters: Vec<Letter>,
    watermark: Option<Version>,
) -> Result<(u64, u64)> {
    let (live, dropped): (Vec<Letter>, Vec<Letter>) = letters
        .into_iter()
        .partition(|l| l.row.is_some() && !passed(watermark, l));
    let sql = guard.sql();
    let (target, version) = (&plan.def.target, &plan.def.version);
    let context = "applying dead letters again";
    if !dropped.is_empty() {
        // As read: a newer letter of the key, set aside meanwhile, stays.
        let read: Vec<serde_json::Value> = dropped
            .iter()
            .map(|l| serde_json::json!({ "key": l.key, "lsn": l.lsn.to_string(), "seq": l.seq }))
            .collect();
        let read = serde_json::Value::Array(read);
        dest.execute(sql.forget.as_str(), &[target, version, &read])
            .await
            .map_err(|e| Error::destination(context, e))?;
    }
    let dropped = dropped.len() as u64;
    if live.is_empty() {
        return Ok((0, dropped));
    }
    let rows = serde_json::Value::Array(live.iter().map(work_row).collect());
    dest.execute(sql.load_letters.as_str(), &[&rows])
        .await
        .map_err(|e| Error::destination(context, e))?;
    let forget: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [target, version];
    let set_aside = run_guarded(
        dest,
        plan,
        guard,
        Guarding::Retry,
        live.len() as u64,
        &[
            (sql.retry.as_str(), &[]),
            (sql.forget_retried.as_str(), &forget),
        ],
        None,
        &format!("TRUNCATE pg_temp.{WORK_TABLE}"),
        context,
    )
    .await?;
    Ok((set_aside, dropped))
}

/// Whether the TRUNCATE `watermark` passed `letter`'s change (a copied
/// row, of a seq below zero, counts as its chunk's snapshot: seq 0).
fn passed(watermark: Option<Version>, letter: &Letter) -> bool {
    watermark.is_some_and(|w| {
        (w.commit_lsn, i64::from(w.seq)) >= (letter.lsn, i64::from(letter.seq.max(0)))
    })
}

/// A letter's row as the work table takes it: an upsert at its version.
fn work_row(letter: &Letter) -> serde_json::Value {
    let mut row = letter.row.clone().unwrap_or_default();
    if let Some(fields) = row.as_object_mut() {
        fields.insert("_walfill_op".into(), "u".into());
        fields.insert("_walfill_lsn".into(), letter.lsn.to_string().into());
        fields.insert("_walfill_seq".into(), letter.seq.into());
    }
    row
}
