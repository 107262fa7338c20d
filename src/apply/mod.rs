//! The versioned apply: snapshot chunks and change batches into a version's
//! staging table.
//!
//! Both go through the session's work table (shaped like the source table),
//! so the transform runs in the destination exactly the same way for copied
//! rows and for streamed changes. See [`crate::plan`] for the SQL.

mod fold;

pub use fold::{ColumnMap, Entry, Fold, Op};

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::SinkExt;
use tokio_postgres::Transaction as DestTransaction;
use walfill_replay::{Datum, Lsn, Relation, RowChange, Transaction, Version};
use walfill_snapshot::copy::escape_copy_field;
use walfill_snapshot::{ChunkData, KeysetChunk};

use crate::error::{Error, Result};
use crate::plan::{BatchSql, Plan, WORK_TABLE};

/// A flush sends its rows to the destination in pieces of about this size.
const COPY_PIECE: usize = 1 << 20;

/// Applies history to one version's staging table.
pub struct Applier {
    plan: Plan,
    batch_sql: BatchSql,
    folder: Folder,
}

/// Folds source changes of one plan's table into pending writes, with the
/// column map of each description of the table met. Needs no database, so
/// a replay folds on its decoding thread.
pub struct Folder {
    plan: Plan,
    maps: HashMap<u32, ColumnMap>,
    historical: bool,
}

/// What applying a batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Row changes of the plan's table seen (before folding).
    pub changes: i64,
    /// The newest TRUNCATE applied, if any.
    pub truncated: Option<Version>,
    /// Updates whose unchanged TOASTed values had no stored row to come from.
    pub unfilled: i64,
}

impl Applier {
    /// An applier for `plan`.
    pub fn new(plan: Plan) -> Applier {
        Applier::build(plan, false)
    }

    /// An applier of replayed history, whose changes may come from earlier
    /// descriptions of the table (see [`ColumnMap::historical`]).
    pub fn historical(plan: Plan) -> Applier {
        Applier::build(plan, true)
    }

    fn build(plan: Plan, historical: bool) -> Applier {
        Applier {
            batch_sql: plan.batch_sql(),
            folder: Folder::new(plan.clone(), historical),
            plan,
        }
    }

    /// A folder of this applier's changes, to use apart from it.
    pub fn folder(&self) -> Folder {
        Folder::new(self.plan.clone(), self.folder.historical)
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Stores one keyset chunk read from the source snapshot in the staging
    /// table, versioned `(boundary, 0)`, inside `dest`'s transaction. Rows
    /// older than `watermark` (the last TRUNCATE applied) are not stored.
    pub async fn load_chunk(
        &self,
        dest: &DestTransaction<'_>,
        chunk: &KeysetChunk<'_>,
        data: &ChunkData,
        boundary: Lsn,
        watermark: Option<Version>,
    ) -> Result<()> {
        let truncated_since = watermark.is_some_and(|w| w >= Version::snapshot(boundary));
        if data.read.rows == 0 || truncated_since {
            return Ok(());
        }
        let sink = dest
            .copy_in::<_, Bytes>(&format!(
                "COPY pg_temp.{WORK_TABLE} ({}) FROM STDIN",
                self.plan.chunk_copy_columns()
            ))
            .await
            .map_err(|e| Error::destination("starting the chunk's COPY", e))?;
        data.write_to(sink).await?;
        // Nothing else writes the staging table while walfill holds the
        // version's lock: if no stored key follows the cursor, no row of
        // this chunk can conflict, and plain inserts are enough.
        let predicate = chunk.after_predicate();
        let stored = dest
            .query_opt(
                self.plan.stored_keys_sql(predicate.as_deref()).as_str(),
                &[],
            )
            .await
            .map_err(|e| Error::destination("probing the staging table", e))?
            .is_some();
        for statement in self.plan.chunk_sql(boundary, !stored) {
            dest.execute(statement.as_str(), &[])
                .await
                .map_err(|e| Error::destination("storing a chunk in the staging table", e))?;
        }
        Ok(())
    }

    /// Applies committed transactions in order inside `dest`'s transaction.
    /// Changes older than `watermark` (the last TRUNCATE) are ignored.
    pub async fn apply(
        &mut self,
        dest: &DestTransaction<'_>,
        transactions: &[Transaction],
        watermark: Option<Version>,
    ) -> Result<BatchOutcome> {
        let (schema, name) = (
            self.plan.source.schema.clone(),
            self.plan.source.name.clone(),
        );
        let changes: Vec<(Version, &RowChange)> = transactions
            .iter()
            .flat_map(|t| t.versions_for(&schema, &name))
            .collect();
        self.apply_versioned(dest, changes, watermark).await
    }

    /// Applies changes of the plan's table, each with its version, in the
    /// order they were made (within one transaction, by version) inside
    /// `dest`'s transaction. A transaction may be split across calls.
    pub async fn apply_versioned<'c>(
        &mut self,
        dest: &DestTransaction<'_>,
        changes: impl IntoIterator<Item = (Version, &'c RowChange)>,
        mut watermark: Option<Version>,
    ) -> Result<BatchOutcome> {
        let mut outcome = BatchOutcome::default();
        let mut pending = Fold::default();
        for (version, change) in changes {
            if let RowChange::Truncate { .. } = change {
                let flushed = self.flush_pending(dest, &mut pending, watermark).await?;
                outcome.unfilled += flushed.unfilled;
                self.apply_truncate(dest, version).await?;
                watermark = watermark.max(Some(version));
                outcome.truncated = outcome.truncated.max(Some(version));
                outcome.changes += 1;
            } else if self.folder.fold_change(&mut pending, version, change)? {
                outcome.changes += 1;
            }
        }
        let flushed = self.flush_pending(dest, &mut pending, watermark).await?;
        outcome.unfilled += flushed.unfilled;
        Ok(outcome)
    }

    /// Removes every stored row older than a TRUNCATE at `version`, inside
    /// `dest`'s transaction.
    pub async fn apply_truncate(&self, dest: &DestTransaction<'_>, version: Version) -> Result<()> {
        dest.execute(
            self.plan.truncate_sql().as_str(),
            &[&version.commit_lsn.to_string(), &(version.seq as i32)],
        )
        .await
        .map_err(|e| Error::destination("applying a TRUNCATE", e))?;
        Ok(())
    }

    /// Stores the pending writes in the staging table inside `dest`'s
    /// transaction, skipping those older than `watermark` (the last
    /// TRUNCATE). `pending` is empty afterwards.
    pub async fn flush_pending(
        &self,
        dest: &DestTransaction<'_>,
        pending: &mut Fold,
        watermark: Option<Version>,
    ) -> Result<BatchOutcome> {
        let mut outcome = BatchOutcome::default();
        if pending.is_empty() {
            return Ok(outcome);
        }
        let key_positions: Vec<usize> = self
            .plan
            .key
            .iter()
            .map(|k| {
                self.plan
                    .source
                    .replicated_columns()
                    .position(|c| &c.name == k)
                    .unwrap_or(0)
            })
            .collect();
        let names: Vec<&str> = self
            .plan
            .source
            .replicated_columns()
            .map(|c| c.name.as_str())
            .collect();
        let sink = dest
            .copy_in::<_, Bytes>(&format!(
                "COPY pg_temp.{WORK_TABLE} ({}) FROM STDIN",
                self.plan.work_copy_columns()
            ))
            .await
            .map_err(|e| Error::destination("starting the batch's COPY", e))?;
        futures_util::pin_mut!(sink);
        let written = |e| Error::destination("writing a batch to the work table", e);
        let mut text = String::new();
        let mut unchanged = false;
        for (key, entry) in pending.drain() {
            unchanged |= write_entry(&mut text, &names, &key_positions, &key, &entry);
            if text.len() >= COPY_PIECE {
                sink.send(Bytes::from(std::mem::take(&mut text)))
                    .await
                    .map_err(written)?;
            }
        }
        if !text.is_empty() {
            sink.send(Bytes::from(text)).await.map_err(written)?;
        }
        sink.as_mut().finish().await.map_err(written)?;

        let context = "applying changes to the staging table";
        let sql = &self.batch_sql;
        // Unchanged TOASTed values are filled in before the transform and
        // the filter read them; batches without any skip this.
        for statement in sql.fill.iter().filter(|_| unchanged) {
            dest.execute(statement.as_str(), &[])
                .await
                .map_err(|e| Error::destination(context, e))?;
        }
        if let Some(unfilled) = sql.unfilled.as_ref().filter(|_| unchanged) {
            let count: i64 = dest
                .query_one(unfilled.as_str(), &[])
                .await
                .map_err(|e| Error::destination(context, e))?
                .get(0);
            if count > 0 {
                tracing::warn!(
                    count,
                    "updates left TOASTed values unchanged for rows never stored; \
                     those values read as NULL in the transform"
                );
                outcome.unfilled += count;
            }
        }
        let mark = watermark.unwrap_or_default();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
            [&mark.commit_lsn.to_string(), &(mark.seq as i32)];
        // A batch none of whose keys is stored yet (a fresh table, new rows)
        // is stored with plain inserts: no row can conflict.
        let stored = dest
            .query_opt(sql.any_stored.as_str(), &[])
            .await
            .map_err(|e| Error::destination(context, e))?
            .is_some();
        let statements = if stored {
            [&sql.upsert, &sql.tombstone]
        } else {
            [&sql.insert_fresh, &sql.tombstone_fresh]
        };
        for statement in statements {
            dest.execute(statement.as_str(), &params)
                .await
                .map_err(|e| Error::destination(context, e))?;
        }
        dest.execute(&format!("TRUNCATE pg_temp.{WORK_TABLE}"), &[])
            .await
            .map_err(|e| Error::destination(context, e))?;
        Ok(outcome)
    }
}

impl Folder {
    fn new(plan: Plan, historical: bool) -> Folder {
        Folder {
            plan,
            maps: HashMap::new(),
            historical,
        }
    }

    fn map_for(&mut self, relation: &Arc<Relation>) -> Result<&ColumnMap> {
        let fresh = match self.maps.get(&relation.oid) {
            Some(map) => !map.is_for(relation),
            None => true,
        };
        if fresh {
            let map = match self.historical {
                true => ColumnMap::historical(&self.plan, relation.clone())?,
                false => ColumnMap::new(&self.plan, relation.clone())?,
            };
            self.maps.insert(relation.oid, map);
        }
        Ok(&self.maps[&relation.oid])
    }

    /// Folds one change into `pending`; false if it is not a row change of
    /// the plan's table. A TRUNCATE is the caller's (see
    /// [`Applier::apply_versioned`]).
    pub fn fold_change(
        &mut self,
        pending: &mut Fold,
        version: Version,
        change: &RowChange,
    ) -> Result<bool> {
        match change {
            RowChange::Insert { relation, .. }
            | RowChange::Update { relation, .. }
            | RowChange::Delete { relation, .. } => {
                let source = &self.plan.source;
                // Replayed history names the table as it was then.
                let ours = match self.historical {
                    true => relation.oid == source.oid,
                    false => relation.schema == source.schema && relation.name == source.name,
                };
                if !ours {
                    return Ok(false);
                }
                let map = self.map_for(relation)?;
                pending.add(map, change, version)?;
                Ok(true)
            }
            RowChange::Truncate { .. } | RowChange::Message { .. } => Ok(false),
        }
    }
}

/// One work-table row in COPY text format; true if it has unchanged
/// TOASTed values to fill in.
fn write_entry(
    out: &mut String,
    names: &[&str],
    key_positions: &[usize],
    key: &[String],
    entry: &Entry,
) -> bool {
    let mut unchanged: Vec<&str> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        let key_index = key_positions.iter().position(|&p| p == i);
        match (entry.op == Op::Upsert, entry.values.get(i), key_index) {
            (_, _, Some(k)) => escape_copy_field(&key[k], out),
            (true, Some(Datum::Text(t)), None) => escape_copy_field(t, out),
            (true, Some(Datum::Unchanged), None) => {
                unchanged.push(name);
                out.push_str("\\N");
            }
            _ => out.push_str("\\N"),
        }
    }
    out.push_str(match entry.op {
        Op::Upsert => "\tu\t",
        Op::Delete => "\td\t",
    });
    out.push_str(&entry.version.commit_lsn.to_string());
    out.push('\t');
    out.push_str(&entry.version.seq.to_string());
    out.push('\t');
    if unchanged.is_empty() {
        out.push_str("\\N");
    } else {
        let mut array = String::from("{");
        for (i, name) in unchanged.iter().enumerate() {
            if i > 0 {
                array.push(',');
            }
            array.push('"');
            array.push_str(&name.replace('\\', "\\\\").replace('"', "\\\""));
            array.push('"');
        }
        array.push('}');
        escape_copy_field(&array, out);
    }
    for k in 0..key_positions.len() {
        out.push('\t');
        match &entry.fill_key {
            Some(fill) => escape_copy_field(&fill[k], out),
            None => out.push_str("\\N"),
        }
    }
    out.push('\n');
    !unchanged.is_empty()
}
