//! A scoped refresh's progress, recorded on its request inside each
//! batch's transaction: the key of the last source row stored and the rows
//! stored so far; then the last key the source lost that was made a
//! tombstone, and how many. A later attempt of the same request goes on
//! after those keys.
//!
//! Going on from there under a newer snapshot is exact: the chunks stored
//! under the earlier one are kept current by the version's stream since,
//! like every row of the version, and the keys the source lost are found
//! at the end over the whole scope, under the last snapshot.

use tokio_postgres::{GenericClient, Transaction};
use walfill_core::Version;

use super::version::SharedWatermark;
use crate::error::{Error, Result};
use crate::pipeline::apply::{Cursor, RecordProgress};

/// Where the refresh of request `request` is.
#[derive(Debug)]
pub struct RefreshProgress {
    request: i64,
    /// The key of the last source row stored (`None`: none yet).
    pub up_to: Option<Vec<String>>,
    /// Source rows stored so far, by every attempt.
    pub rows: i64,
    /// The last key the source lost made a tombstone (`None`: none yet).
    pub tombstoned_up_to: Option<Vec<String>>,
    /// Keys made tombstones so far, by every attempt.
    pub tombstoned: i64,
    /// The version's TRUNCATE watermark, as its stream has it.
    watermark: SharedWatermark,
}

impl RefreshProgress {
    /// Records on request `request` that it refreshes `version` of
    /// `target`, and returns the progress its earlier attempts recorded
    /// (nothing, on its first).
    pub async fn begin(
        client: &impl GenericClient,
        request: i64,
        target: &str,
        version: &str,
    ) -> Result<RefreshProgress> {
        let row = client
            .query_opt(
                "UPDATE walfill.requests SET version = $2 WHERE id = $1
                 RETURNING refreshed_up_to, refreshed_rows, tombstoned_up_to, tombstoned_keys",
                &[&request, &version],
            )
            .await
            .map_err(|e| Error::destination("reading the refresh's progress", e))?;
        let (up_to, rows, tombstoned_up_to, tombstoned) = match row {
            Some(row) => (row.get(0), row.get(1), row.get(2), row.get(3)),
            None => (None, 0, None, 0),
        };
        Ok(RefreshProgress {
            request,
            up_to,
            rows,
            tombstoned_up_to,
            tombstoned,
            watermark: SharedWatermark::new(target, version),
        })
    }
}

impl RecordProgress for RefreshProgress {
    fn truncated(&self) -> Option<Version> {
        self.watermark.truncated
    }

    async fn before_batch(&mut self, tx: &Transaction<'_>) -> Result<()> {
        self.watermark.reread(tx).await
    }

    /// Records the batch's last key and rows (or keys made tombstones) on
    /// the request. The watermark is the stream's to record, not the
    /// refresh's.
    async fn record_batch(
        &mut self,
        tx: &Transaction<'_>,
        cursor: &Cursor,
        _changes: i64,
        _truncated: Option<Version>,
    ) -> Result<()> {
        let (sql, last_key, count) = match cursor {
            Cursor::Copied { last_key, rows, .. } => (
                "UPDATE walfill.requests
                    SET refreshed_up_to = $2, refreshed_rows = refreshed_rows + $3
                  WHERE id = $1",
                last_key,
                rows,
            ),
            Cursor::Absent { last_key, keys } => (
                "UPDATE walfill.requests
                    SET tombstoned_up_to = $2, tombstoned_keys = tombstoned_keys + $3
                  WHERE id = $1",
                last_key,
                keys,
            ),
            _ => {
                return Err(Error::Internal(format!(
                    "a refresh stores copied chunks and lost keys, not {cursor:?}"
                )))
            }
        };
        tx.execute(sql, &[&self.request, last_key, count])
            .await
            .map_err(|e| Error::destination("recording the refresh's progress", e))?;
        if let Cursor::Absent { .. } = cursor {
            self.tombstoned_up_to = Some(last_key.clone());
            self.tombstoned += count;
        } else {
            self.up_to = Some(last_key.clone());
            self.rows += count;
        }
        Ok(())
    }
}
