//! A dead-letter retry's progress, recorded on its version inside each
//! batch's transaction: the version (LSN, seq) and key of the last letter
//! settled.
//! A retry stopped part way goes on after it, so no letter is tried twice
//! by one retry (its attempts stay true); a retry that ends clears it.

use tokio_postgres::{GenericClient, Transaction};
use walfill_core::Version;

use super::version::SharedWatermark;
use crate::error::{Error, Result};
use crate::pipeline::apply::{Cursor, RecordProgress};
use crate::pipeline::source::letters::Position;

/// Where the retry of one version's dead letters is.
#[derive(Debug)]
pub struct LetterProgress {
    target: String,
    version: String,
    /// The last letter settled (`None`: none yet).
    pub after: Option<Position>,
    /// The version's TRUNCATE watermark, as its stream has it.
    watermark: SharedWatermark,
}

impl LetterProgress {
    /// The progress an earlier, stopped retry of `version` of `target`
    /// recorded (nothing, when the last one ended).
    pub async fn begin(
        client: &impl GenericClient,
        target: &str,
        version: &str,
    ) -> Result<LetterProgress> {
        let row = client
            .query_one(
                "SELECT letters_retried_lsn::text, letters_retried_seq, letters_retried_key
                   FROM walfill.versions
                  WHERE target = $1 AND version = $2",
                &[&target, &version],
            )
            .await
            .map_err(|e| Error::destination("reading the dead-letter retry's progress", e))?;
        let after = match (row.get::<_, Option<String>>(0), row.get(1), row.get(2)) {
            (Some(lsn), Some(seq), Some(key)) => Some((
                lsn.parse().map_err(|_| {
                    Error::Internal(format!("a recorded retry's LSN {lsn} does not parse"))
                })?,
                seq,
                key,
            )),
            _ => None,
        };
        Ok(LetterProgress {
            target: target.into(),
            version: version.into(),
            after,
            watermark: SharedWatermark::new(target, version),
        })
    }

    /// The retry went through every letter: the next one starts over.
    pub async fn finish(self, client: &impl GenericClient) -> Result<()> {
        client
            .execute(
                "UPDATE walfill.versions
                    SET letters_retried_lsn = NULL, letters_retried_seq = NULL,
                        letters_retried_key = NULL
                  WHERE target = $1 AND version = $2",
                &[&self.target, &self.version],
            )
            .await
            .map_err(|e| Error::destination("recording the dead-letter retry's end", e))?;
        Ok(())
    }
}

impl RecordProgress for LetterProgress {
    fn truncated(&self) -> Option<Version> {
        self.watermark.truncated
    }

    async fn before_batch(&mut self, tx: &Transaction<'_>) -> Result<()> {
        self.watermark.reread(tx).await
    }

    /// Records the batch's last letter on the version. The watermark is
    /// the stream's to record, not the retry's.
    async fn record_batch(
        &mut self,
        tx: &Transaction<'_>,
        cursor: &Cursor,
        _changes: i64,
        _truncated: Option<Version>,
    ) -> Result<()> {
        let Cursor::Letters { lsn, seq, key } = cursor else {
            return Err(Error::Internal(format!(
                "a dead-letter retry stores letters, not {cursor:?}"
            )));
        };
        tx.execute(
            "UPDATE walfill.versions
                SET letters_retried_lsn = $3::text::pg_lsn, letters_retried_seq = $4,
                    letters_retried_key = $5
              WHERE target = $1 AND version = $2",
            &[&self.target, &self.version, &lsn.to_string(), seq, key],
        )
        .await
        .map_err(|e| Error::destination("recording the dead-letter retry's progress", e))?;
        self.after = Some((*lsn, *seq, key.clone()));
        Ok(())
    }
}
