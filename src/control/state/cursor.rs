//! A version's progress, recorded inside the transactions that make it:
//! the cursor of each stored batch, checked against the version's fencing
//! token, and the error that stopped a run.

use tokio_postgres::{GenericClient, Transaction};
use walfill_core::Version;

use super::version::VersionState;
use crate::error::{Error, Result};
use crate::pipeline::apply::{Cursor, RecordProgress};

impl RecordProgress for VersionState {
    fn truncated(&self) -> Option<Version> {
        self.truncated
    }

    /// Records a stored batch's cursor inside the batch's transaction, with
    /// the changes it carried and the newest TRUNCATE stored. Fails when
    /// another process took the version over since this one did.
    async fn record_batch(
        &mut self,
        tx: &Transaction<'_>,
        cursor: &Cursor,
        changes: i64,
        truncated: Option<Version>,
    ) -> Result<()> {
        let truncated = truncated.max(self.truncated);
        let truncated_lsn = truncated.map(|t| t.commit_lsn);
        let truncated_seq = truncated.map(|t| t.seq as i32);
        if let Cursor::Ranged {
            range,
            last_key,
            rows,
        } = cursor
        {
            tx.execute(
                "UPDATE walfill.chunk_ranges SET cursor = $3, rows_copied = rows_copied + $4
                  WHERE version_table = $1 AND range_no = $2",
                &[&self.staging_table(), range, last_key, rows],
            )
            .await
            .map_err(|e| Error::destination("recording a range's progress", e))?;
        }
        let desc = match cursor {
            Cursor::Streamed {
                description: Some(d),
                ..
            } => Some(
                serde_json::to_value(d)
                    .map_err(|e| Error::Internal(format!("describing the stream: {e}")))?,
            ),
            _ => None,
        };
        // What the cursor sets, with its parameters from $7 on.
        let (set, params): (&str, Vec<&Param>) = match cursor {
            Cursor::Copied {
                last_key,
                rows,
                rate,
            } => (
                "copy_cursor = $7, rows_copied = rows_copied + $8, copy_rate = $9",
                vec![last_key, rows, rate],
            ),
            Cursor::Ranged { rows, .. } => ("rows_copied = rows_copied + $7", vec![rows]),
            Cursor::Replayed {
                committed,
                read,
                rows,
                rate,
            } => (
                "replayed_lsn = coalesce($7, replayed_lsn), replay_read_lsn = $8, \
                 rows_copied = rows_copied + $9, copy_rate = $10",
                vec![committed, read, rows, rate],
            ),
            Cursor::Merged { last_key, rows } => (
                "load_cursor = $7, rows_copied = rows_copied + $8",
                vec![last_key, rows],
            ),
            Cursor::Letters { .. } | Cursor::Absent { .. } => {
                return Err(Error::Internal(format!(
                    "a version's own progress is not that of a retry or a refresh: {cursor:?}"
                )))
            }
            Cursor::Streamed {
                end, committed_at, ..
            } => (
                "applied_lsn = $7, stream_desc = coalesce($8, stream_desc),
                 apply_lag_seconds = coalesce(
                     extract(epoch FROM clock_timestamp()
                         - (timestamptz '2000-01-01 00:00 UTC' + $9::bigint * interval '1 microsecond')),
                     apply_lag_seconds)",
                vec![end, &desc, committed_at],
            ),
        };
        let sql = format!(
            "UPDATE walfill.versions SET {set}, changes_applied = changes_applied + $4,
                    truncated_lsn = $5, truncated_seq = $6, last_error = NULL, updated_at = now()
              WHERE target = $1 AND version = $2 AND lease = $3"
        );
        let mut all: Vec<&Param> = vec![
            &self.target,
            &self.version,
            &self.lease,
            &changes,
            &truncated_lsn,
            &truncated_seq,
        ];
        all.extend(params);
        let updated = tx
            .execute(&sql, &all)
            .await
            .map_err(|e| Error::destination("recording the version's progress", e))?;
        if updated == 0 {
            return Err(Error::Fenced {
                target: self.target.clone(),
                version: self.version.clone(),
                lease: self.lease,
            });
        }
        self.changes_applied += changes;
        self.truncated = truncated;
        self.remember(cursor);
        Ok(())
    }
}

/// A statement parameter.
type Param = dyn tokio_postgres::types::ToSql + Sync;

impl VersionState {
    /// Keeps what a recorded `cursor` says in memory too.
    fn remember(&mut self, cursor: &Cursor) {
        match cursor {
            Cursor::Copied {
                last_key,
                rows,
                rate,
            } => {
                self.copy_cursor = Some(last_key.clone());
                self.rows_copied += rows;
                self.copy_rate = *rate;
            }
            Cursor::Ranged { rows, .. } => {
                self.rows_copied += rows;
            }
            Cursor::Replayed {
                committed,
                read,
                rows,
                rate,
            } => {
                self.replayed_lsn = committed.or(self.replayed_lsn);
                self.replay_read_lsn = Some(*read);
                self.rows_copied += rows;
                self.copy_rate = *rate;
            }
            Cursor::Merged { last_key, rows } => {
                self.load_cursor = Some(last_key.clone());
                self.rows_copied += rows;
            }
            Cursor::Letters { .. } | Cursor::Absent { .. } => {}
            Cursor::Streamed {
                end, description, ..
            } => {
                self.applied_lsn = Some(*end);
                if description.is_some() {
                    self.stream_desc = description.clone();
                }
            }
        }
    }
}

impl VersionState {
    /// Records the error that stopped the last run (best effort).
    pub async fn record_error(
        client: &impl GenericClient,
        target: &str,
        version: &str,
        error: &str,
    ) {
        let result = client
            .execute(
                "UPDATE walfill.versions SET last_error = $3, updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&target, &version, &error],
            )
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %walfill_core::sql::describe_pg_error(&e), "could not record the error in walfill.versions");
        }
    }

    /// `UPDATE walfill.versions SET {set}, updated_at = now()` for this
    /// version; `params` are `$3...`.
    pub(super) async fn update(
        &self,
        client: &impl GenericClient,
        set: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        context: &str,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE walfill.versions SET {set}, updated_at = now()
              WHERE target = $1 AND version = $2"
        );
        let mut all: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&self.target, &self.version];
        all.extend_from_slice(params);
        client
            .execute(&sql, &all)
            .await
            .map_err(|e| Error::destination(context, e))?;
        Ok(())
    }
}
