//! The keys a scoped refresh found the source has lost, as a history
//! source: the version's live keys older than the refresh's snapshot that
//! the source's keys (loaded under that snapshot into a temporary table of
//! the session this source reads over) lack, in the destination's key
//! order, after a cursor; each page one batch of deletes versioned
//! `(snapshot, 0)`. The store makes them tombstones by the usual rule: a
//! change the stream stored meanwhile is newer and stays.

use tokio_postgres::Client;
use walfill_core::{Lsn, Version};

use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, Cursor, Entry, Fold, HistorySource, Op, Writes};
use crate::pipeline::version_sql::Plan;

/// Keys in one batch.
const PAGE: i64 = 1000;

/// The keys the source lost, read over a session holding its keys.
pub struct AbsentKeys {
    client: Client,
    plan: Plan,
    at: Lsn,
    after: Option<Vec<String>>,
}

impl AbsentKeys {
    /// The keys of `plan`'s version that the keys table of `client`'s
    /// session lacks, as of the snapshot at `at`, after key `after`.
    pub fn new(client: Client, plan: Plan, at: Lsn, after: Option<Vec<String>>) -> AbsentKeys {
        AbsentKeys {
            client,
            plan,
            at,
            after,
        }
    }
}

impl HistorySource for AbsentKeys {
    async fn next(&mut self) -> Result<Option<Batch>> {
        let sql = self
            .plan
            .absent_keys_sql(self.at, self.after.as_deref(), PAGE);
        let keys: Vec<Vec<String>> = self
            .client
            .query(sql.as_str(), &[])
            .await
            .map_err(|e| Error::destination("finding the keys the source lost", e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let Some(last) = keys.last().cloned() else {
            return Ok(None);
        };
        let mut fold = Fold::default();
        for key in keys.iter().cloned() {
            fold.restore(
                key,
                Entry {
                    op: Op::Delete,
                    version: Version::snapshot(self.at),
                    xid: None,
                    values: Vec::new(),
                    fill_key: None,
                },
            );
        }
        self.after = Some(last.clone());
        Ok(Some(Batch {
            writes: Writes::Folded(fold),
            truncate: None,
            truncate_xid: None,
            changes: keys.len() as i64,
            cursor: Some(Cursor::Absent {
                last_key: last,
                keys: keys.len() as i64,
            }),
        }))
    }

    /// Nothing upstream hears of it: a batch lost with a crash of the
    /// destination is found again.
    fn confirms_upstream(&self) -> bool {
        false
    }
}
