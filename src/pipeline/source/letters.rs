//! A version's dead letters as a history source: read in pages in the
//! order of their versions (and keys: the rows of one copied chunk share
//! a version), after a cursor and up to the newest letter
//! there was when the retry began, each page one batch of
//! [`Writes::Letters`].

use tokio_postgres::Client;
use walfill_core::Lsn;

use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, Cursor, HistorySource, Letter, Writes};

/// Letters in one batch.
const PAGE: i64 = 500;

/// Where a letter stands in the retry's order: `(lsn, seq, key)`.
pub type Position = (Lsn, i32, Vec<String>);

/// The dead letters of one version, to apply again.
pub struct LetterSource {
    /// A destination session of the source's own (the loop's is inside
    /// the batch's transaction).
    client: Client,
    target: String,
    version: String,
    /// The last letter handed out, `(lsn, seq, key)`.
    after: Position,
    /// The last letter when the retry began: letters set aside later (by
    /// the version's stream) wait for the next retry.
    until: Option<Position>,
}

impl LetterSource {
    /// The letters of `version` of `target` after `after` (from the first
    /// when `None`), read over `client`.
    pub async fn open(
        client: Client,
        target: &str,
        version: &str,
        after: Option<Position>,
    ) -> Result<LetterSource> {
        let newest = client
            .query_opt(
                "SELECT lsn::text, seq, key FROM walfill.dead_letters
                  WHERE target = $1 AND version = $2
                  ORDER BY lsn DESC, seq DESC, key DESC LIMIT 1",
                &[&target, &version],
            )
            .await
            .map_err(|e| Error::destination("reading the dead letters", e))?;
        let until = match newest {
            Some(row) => Some((parse_lsn(row.get(0))?, row.get(1), row.get(2))),
            None => None,
        };
        Ok(LetterSource {
            client,
            target: target.into(),
            version: version.into(),
            after: after.unwrap_or((Lsn(0), i32::MIN, Vec::new())),
            until,
        })
    }
}

impl HistorySource for LetterSource {
    async fn next(&mut self) -> Result<Option<Batch>> {
        // (Keys compare as the destination orders text: in SQL alone.)
        let Some(until) = &self.until else {
            return Ok(None);
        };
        let rows = self
            .client
            .query(
                "SELECT key, lsn::text, seq, source_row FROM walfill.dead_letters
                  WHERE target = $1 AND version = $2
                    AND (lsn, seq, key) > ($3::text::pg_lsn, $4, $5)
                    AND (lsn, seq, key) <= ($6::text::pg_lsn, $7, $8)
                  ORDER BY lsn, seq, key LIMIT $9",
                &[
                    &self.target,
                    &self.version,
                    &self.after.0.to_string(),
                    &self.after.1,
                    &self.after.2,
                    &until.0.to_string(),
                    &until.1,
                    &until.2,
                    &PAGE,
                ],
            )
            .await
            .map_err(|e| Error::destination("reading the dead letters", e))?;
        let mut letters = Vec::with_capacity(rows.len());
        for row in &rows {
            letters.push(Letter {
                key: row.get(0),
                lsn: parse_lsn(row.get(1))?,
                seq: row.get(2),
                row: row.get(3),
            });
        }
        let Some(last) = letters.last() else {
            return Ok(None);
        };
        self.after = (last.lsn, last.seq, last.key.clone());
        Ok(Some(Batch {
            changes: letters.len() as i64,
            cursor: Some(Cursor::Letters {
                lsn: last.lsn,
                seq: last.seq,
                key: last.key.clone(),
            }),
            writes: Writes::Letters(letters),
            truncate: None,
            truncate_xid: None,
        }))
    }

    /// Nothing upstream hears of a letter: a batch lost with a crash of
    /// the destination is read again.
    fn confirms_upstream(&self) -> bool {
        false
    }
}

fn parse_lsn(text: String) -> Result<Lsn> {
    text.parse()
        .map_err(|_| Error::Internal(format!("a dead letter's LSN {text} does not parse")))
}
