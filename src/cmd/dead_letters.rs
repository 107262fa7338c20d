//! `walfill dead-letters`: the rows of a version whose transform failed,
//! and applying them again once the cause is fixed (a function the
//! transform calls, a setting, a lookup the destination holds).
//!
//! A dead letter keeps the source row as the transform read it and the
//! version of its change, so applying it again needs no read of the
//! source: the row is stored at its own version, and only where what the
//! version holds for its key is the tombstone it left (or an older one, or
//! nothing). A newer change of the key, stored meanwhile, wins, as every
//! change does; a TRUNCATE after it makes it obsolete.

use serde::Serialize;

use crate::config::Config;
use crate::control::state::{self, VersionState};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::WORK_TABLE;

/// One dead letter.
#[derive(Debug, Serialize)]
pub struct DeadLetter {
    /// The key's values, as text.
    pub key: Vec<String>,
    /// The version of the change: commit LSN and position.
    pub lsn: String,
    /// Position of the change in its transaction.
    pub seq: i32,
    /// The transform's error.
    pub error: String,
    /// When it was set aside (last).
    pub created_at: String,
    /// How many times it failed.
    pub attempts: i32,
}

/// Lists the dead letters of `version` (default: the active one) of
/// `target`, or applies them again with `retry`.
pub async fn dead_letters(
    config: &Config,
    target: &str,
    version: Option<String>,
    retry: bool,
    json: bool,
) -> Result<()> {
    config.target(target)?;
    let mut dest = db::connect(&config.destination, Role::Destination).await?;
    state::require(&dest).await?;
    let version = state::version_or_active(&dest, target, version).await?;
    if retry {
        let (applied, failing, obsolete) = retry_all(&mut dest, target, &version).await?;
        crate::say!(
            "version {version} of {target}: {applied} dead letter(s) applied, {failing} still \
             failing{}",
            if obsolete > 0 {
                format!(", {obsolete} dropped (a later TRUNCATE removed their rows)")
            } else {
                String::new()
            }
        )?;
        return Ok(());
    }
    let letters = list(&dest, target, &version).await?;
    if json {
        let text = serde_json::to_string_pretty(&letters).unwrap_or_else(|_| "[]".into());
        crate::say!("{text}")?;
        return Ok(());
    }
    if letters.is_empty() {
        crate::say!("version {version} of {target} has no dead letters")?;
        return Ok(());
    }
    crate::say!(
        "{:<24} {:<22} {:>8}  ERROR",
        "KEY",
        "VERSION (LSN/SEQ)",
        "ATTEMPTS"
    )?;
    for d in &letters {
        crate::say!(
            "{:<24} {:<22} {:>8}  {}",
            d.key.join(", "),
            format!("{}/{}", d.lsn, d.seq),
            d.attempts,
            d.error
        )?;
    }
    Ok(())
}

async fn list(
    dest: &tokio_postgres::Client,
    target: &str,
    version: &str,
) -> Result<Vec<DeadLetter>> {
    let rows = dest
        .query(
            "SELECT key, lsn::text, seq, error, created_at::text, attempts
               FROM walfill.dead_letters WHERE target = $1 AND version = $2 ORDER BY lsn, seq",
            &[&target, &version],
        )
        .await
        .map_err(|e| Error::destination("reading the dead letters", e))?;
    Ok(rows
        .iter()
        .map(|r| DeadLetter {
            key: r.get(0),
            lsn: r.get(1),
            seq: r.get(2),
            error: r.get(3),
            created_at: r.get(4),
            attempts: r.get(5),
        })
        .collect())
}

/// Applies every dead letter of the version again, each in its own
/// transaction; returns how many were applied, still fail, and were obsolete.
async fn retry_all(
    dest: &mut tokio_postgres::Client,
    target: &str,
    version: &str,
) -> Result<(u64, u64, u64)> {
    let v = VersionState::load_existing(&*dest, target, version).await?;
    let plan = v.plan(&*dest).await?;
    let sql = plan.dead_letter_sql();
    let columns = plan.work_copy_columns();
    let load = format!(
        "INSERT INTO pg_temp.{WORK_TABLE} ({columns}) SELECT {columns}
           FROM jsonb_populate_record(NULL::pg_temp.{WORK_TABLE},
                $1::jsonb || jsonb_build_object('_walfill_op', 'u', '_walfill_lsn', $2::text,
                                                '_walfill_seq', $3::integer))"
    );
    let letters: Vec<(Vec<String>, String, i32, Option<serde_json::Value>)> = dest
        .query(
            "SELECT key, lsn::text, seq, source_row FROM walfill.dead_letters
              WHERE target = $1 AND version = $2 ORDER BY lsn, seq",
            &[&target, &version],
        )
        .await
        .map_err(|e| Error::destination("reading the dead letters", e))?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let (mut applied, mut failing, mut obsolete) = (0, 0, 0);
    let failed = |e| Error::destination("applying a dead letter again", e);
    for (key, lsn, seq, row) in letters {
        let tx = dest.transaction().await.map_err(failed)?;
        let forget = "DELETE FROM walfill.dead_letters
                       WHERE target = $1 AND version = $2 AND key = $3";
        let parsed: walfill_core::Lsn = lsn
            .parse()
            .map_err(|_| Error::Internal(format!("a dead letter's LSN {lsn} does not parse")))?;
        let truncated = v
            .truncated
            .is_some_and(|t| (t.commit_lsn, t.seq) >= (parsed, u32::try_from(seq).unwrap_or(0)));
        let Some(row) = row.filter(|_| !truncated) else {
            tx.execute(forget, &[&target, &version, &key])
                .await
                .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            obsolete += 1;
            continue;
        };
        tx.execute(load.as_str(), &[&row, &lsn, &seq])
            .await
            .map_err(failed)?;
        tx.batch_execute("SAVEPOINT walfill_retry")
            .await
            .map_err(failed)?;
        match tx.execute(sql.retry.as_str(), &[]).await {
            Ok(_) => {
                tx.execute(forget, &[&target, &version, &key])
                    .await
                    .map_err(failed)?;
                applied += 1;
            }
            Err(e) if crate::pipeline::apply::is_data_error(&e) => {
                tx.batch_execute("ROLLBACK TO SAVEPOINT walfill_retry")
                    .await
                    .map_err(failed)?;
                tx.execute(
                    "UPDATE walfill.dead_letters SET error = $4, attempts = attempts + 1
                      WHERE target = $1 AND version = $2 AND key = $3",
                    &[
                        &target,
                        &version,
                        &key,
                        &walfill_core::sql::describe_pg_error(&e),
                    ],
                )
                .await
                .map_err(failed)?;
                failing += 1;
            }
            Err(e) => return Err(failed(e)),
        }
        tx.commit().await.map_err(failed)?;
    }
    Ok((applied, failing, obsolete))
}
