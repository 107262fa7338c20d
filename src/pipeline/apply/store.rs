//! Storing a batch in a version's table, by the version rule.
//!
//! Everything goes through the session's work table (shaped like the
//! source table), so the transform runs in the destination the same way
//! for copied rows and for changes. See [`crate::pipeline::version_sql`] for the SQL.

use bytes::Bytes;
use futures_util::SinkExt;
use tokio_postgres::Transaction as DestTransaction;
use walfill_core::{Datum, Lsn, Version};
use walfill_snapshot::copy_data::escape_copy_field;
use walfill_snapshot::{ChunkRead, ChunkRows, RowSuffix};

use super::batch::{Batch, ChunkSnapshot, Writes};
use super::dead::{Copied, Guarding};
use super::fold::{Entry, Op};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::{BatchSql, Plan, WORK_TABLE};

/// A flush sends its rows to the destination in pieces of about this size.
const COPY_PIECE: usize = 1 << 20;

/// Stores batches in one version's table.
pub struct Store {
    plan: Plan,
    sql: BatchSql,
    /// Whether the version has dead letters, once read.
    dead: super::dead::Guard,
    /// Whether another process writes the version's table meanwhile (its
    /// live stream, during a scoped refresh).
    shared: bool,
    /// Whether the table is being loaded by a snapshot copy alone, without
    /// its key index.
    loading: bool,
    /// For such a load of an identity transform: chunks are copied straight
    /// into the table, each row carrying its chunk's version.
    direct: bool,
}

/// What storing a batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Updates whose unchanged TOASTed values had no stored row to come from.
    pub unfilled: i64,
    /// What a snapshot chunk read, once its rows have arrived.
    pub chunk: Option<ChunkRead>,
    /// Dead letters applied again that failed again.
    pub set_aside: u64,
    /// Dead letters dropped (a TRUNCATE passed them).
    pub dropped: u64,
}

impl Store {
    /// A store for `plan`'s table.
    pub fn new(plan: Plan) -> Store {
        Store {
            sql: plan.batch_sql(),
            dead: super::dead::Guard::new(&plan),
            plan,
            shared: false,
            loading: false,
            direct: false,
        }
    }

    /// A store for a fresh version's snapshot copy, which alone writes the
    /// table, in disjoint key ranges, before its key index is built: every
    /// chunk is plain inserts.
    pub fn loading(plan: Plan) -> Store {
        Store {
            loading: true,
            ..Store::new(plan)
        }
    }

    /// [`Store::loading`] for an identity transform: chunks are copied
    /// straight into the table, the version columns added to each row on
    /// the way ([`RowSuffix`]).
    pub fn loading_directly(plan: Plan) -> Store {
        Store {
            direct: true,
            ..Store::loading(plan)
        }
    }

    /// The store of a snapshot copy: [`Store::loading_directly`] when its
    /// rows go `direct`ly into a table being loaded, [`Store::loading`]
    /// when they go through the transform into one, else [`Store::new`].
    pub fn for_copy(plan: Plan, direct: bool, loading: bool) -> Store {
        match (direct, loading) {
            (true, _) => Store::loading_directly(plan),
            (false, true) => Store::loading(plan),
            (false, false) => Store::new(plan),
        }
    }

    /// A store for `plan`'s table while its live stream writes it too:
    /// every chunk goes through the versioned upsert, never plain inserts.
    pub fn shared(plan: Plan) -> Store {
        Store {
            shared: true,
            ..Store::new(plan)
        }
    }

    /// The share of the rows read (percent) that may fail the transform
    /// before storing stops (`[backfill] max_dead_letter_percent`).
    pub fn with_dead_letter_limit(mut self, percent: u32) -> Store {
        self.dead.limit_percent = percent;
        self
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Whether this store loads a fresh table by plain inserts.
    pub fn is_loading(&self) -> bool {
        self.loading
    }

    /// Stores `batch` inside `dest`'s transaction: first its TRUNCATE (every
    /// row older goes), then its writes, each only if it is newer than what
    /// is stored for its key and than `watermark` (the newest TRUNCATE
    /// stored before, or this batch's). Leaves `batch.writes` empty.
    pub async fn store(
        &self,
        dest: &DestTransaction<'_>,
        batch: &mut Batch,
        watermark: Option<Version>,
    ) -> Result<Stored> {
        let mut watermark = watermark;
        if let Some(truncate) = batch.truncate {
            // A table being loaded holds nothing older than the TRUNCATEs
            // of its load (its rows come after them, or are newer).
            if self.loading {
                watermark = watermark.max(Some(truncate));
            } else if watermark.is_none_or(|w| truncate > w) {
                dest.execute(
                    self.plan.truncate_sql().as_str(),
                    &[
                        &truncate.commit_lsn.to_string(),
                        &(truncate.seq as i32),
                        &batch.truncate_xid.map(i64::from),
                    ],
                )
                .await
                .map_err(|e| Error::destination("applying a TRUNCATE", e))?;
                watermark = Some(truncate);
            }
        }
        match std::mem::take(&mut batch.writes) {
            Writes::None => Ok(Stored::default()),
            Writes::Folded(mut fold) => {
                let piece = batch.cursor.is_none();
                self.store_entries(dest, fold.drain(), watermark, piece)
                    .await
            }
            Writes::Letters(letters) => {
                let (set_aside, dropped) =
                    super::letters::store(dest, &self.plan, &self.dead, letters, watermark).await?;
                Ok(Stored {
                    set_aside,
                    dropped,
                    ..Stored::default()
                })
            }
            Writes::Merged(rows) => {
                self.store_entries(dest, rows.into_iter(), watermark, false)
                    .await
            }
            Writes::Chunk {
                rows,
                projected,
                version,
                snapshot,
                after,
            } => {
                let read = if watermark.is_some_and(|w| w >= version) && snapshot.is_none() {
                    rows.discard().await?
                } else {
                    let seq = match &snapshot {
                        Some(snapshot) => record_snapshot(dest, &self.plan, snapshot).await?,
                        None => version.seq as i32,
                    };
                    let at = (version.commit_lsn, seq);
                    self.store_chunk(dest, rows, projected, at, after.as_deref())
                        .await?
                };
                Ok(Stored {
                    chunk: Some(read),
                    ..Stored::default()
                })
            }
        }
    }

    /// Stores one keyset chunk read from a snapshot, every row versioned
    /// `(lsn, seq)`, as its rows arrive; returns what the chunk read. The
    /// chunk's batch commits right after, which empties the work table
    /// (`ON COMMIT DELETE ROWS`).
    async fn store_chunk(
        &self,
        dest: &DestTransaction<'_>,
        rows: ChunkRows,
        projected: bool,
        (lsn, seq): (Lsn, i32),
        after: Option<&[String]>,
    ) -> Result<ChunkRead> {
        let format = rows.format().option();
        if projected && !self.loading {
            return Err(Error::Internal(
                "finished rows reached a version that is not being loaded".into(),
            ));
        }
        if self.direct || projected {
            let version = RowSuffix::new(&[
                (&lsn.to_string(), &lsn.0.to_be_bytes()),
                (&seq.to_string(), &seq.to_be_bytes()),
            ]);
            // Rows the transform made on the source are the version's own,
            // as an identity transform's chunk is (see `Store::loading`).
            let copy = match projected {
                true => self.plan.projected_copy_sql(),
                false => format!("{}{format}", self.plan.direct_copy_sql()),
            };
            let sink = dest
                .copy_in::<_, Bytes>(&copy)
                .await
                .map_err(|e| Error::destination("starting the chunk's COPY", e))?;
            let read = rows.write_to(sink, Some(&version)).await?;
            crate::failpoint::hold("copy.chunk_copied").await;
            return Ok(read);
        }
        let sink = dest
            .copy_in::<_, Bytes>(&format!(
                "COPY pg_temp.{WORK_TABLE} ({}) FROM STDIN{format}",
                self.plan.chunk_copy_columns()
            ))
            .await
            .map_err(|e| Error::destination("starting the chunk's COPY", e))?;
        let read = rows.write_to(sink, None).await?;
        crate::failpoint::hold("copy.chunk_copied").await;
        if read.rows == 0 {
            return Ok(read);
        }
        // Nothing else writes the version's table while walfill holds the
        // version: if no stored key follows the chunk's start, no row of
        // the chunk can conflict, and plain inserts are enough. (Where the
        // destination orders the keys otherwise, the chunk's own keys are
        // probed: its range in the source's order is no range here.)
        let probe = match self.plan.key_order_agrees() {
            true => {
                let predicate = after.map(|a| self.plan.keys_after(a));
                self.plan.stored_keys_sql(predicate.as_deref())
            }
            false => self.plan.work_keys_stored_sql(),
        };
        let stored = !self.loading
            && (self.shared
                || dest
                    .query_opt(probe.as_str(), &[])
                    .await
                    .map_err(|e| Error::destination("probing the version's table", e))?
                    .is_some());
        let statements = self.plan.chunk_sql(lsn, seq, !stored);
        let with_params: Vec<(&str, &[&(dyn tokio_postgres::types::ToSql + Sync)])> =
            statements.iter().map(|s| (s.as_str(), &[][..])).collect();
        super::dead::run_guarded(
            dest,
            &self.plan,
            &self.dead,
            Guarding::Savepoint,
            read.rows,
            &with_params,
            Some(Copied { lsn, seq, stored }),
            "",
            "storing a chunk in the version's table",
        )
        .await?;
        Ok(read)
    }

    /// Stores folded writes, skipping those not newer than `watermark`.
    /// Into a table being loaded, only rows go (plain inserts): nothing is
    /// stored that a tombstone would have to keep out.
    async fn store_entries(
        &self,
        dest: &DestTransaction<'_>,
        entries: impl Iterator<Item = (Vec<String>, Entry)>,
        watermark: Option<Version>,
        piece: bool,
    ) -> Result<Stored> {
        let mut outcome = Stored::default();
        let mut entries = entries.peekable();
        if entries.peek().is_none() {
            return Ok(outcome);
        }
        let columns: Vec<(&str, bool)> = self
            .plan
            .source
            .replicated_columns()
            .map(|c| (c.name.as_str(), self.plan.key.contains(&c.name)))
            .collect();
        let key_positions: Vec<usize> = self
            .plan
            .key
            .iter()
            .map(|k| columns.iter().position(|(c, _)| c == k).unwrap_or(0))
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
        let mut rows = 0u64;
        for (key, entry) in entries {
            if self.loading && entry.op != Op::Upsert {
                continue;
            }
            rows += 1;
            let unknown = write_entry(&mut text, &columns, &key_positions, &key, &entry);
            if unknown && self.loading {
                // No stored row to take the values from.
                outcome.unfilled += 1;
            }
            unchanged |= unknown;
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

        let context = "applying changes to the version's table";
        let sql = &self.sql;
        if self.loading && outcome.unfilled > 0 {
            tracing::warn!(
                count = outcome.unfilled,
                "updates left TOASTed values unchanged for rows the replay never saw; \
                 those values read as NULL in the transform"
            );
        }
        // Unchanged TOASTed values are filled in before the transform and
        // the filter read them; batches without any skip this.
        let unchanged = unchanged && !self.loading;
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
        // is stored with plain inserts: no row can conflict. A table being
        // loaded needs no look, and holds no deleted keys; a row its filter
        // rejects is still kept as a tombstone when the plan remembers
        // source values beside the rows and one of them could be stored out
        // of line: a later update that leaves it unchanged takes it from
        // there. (The load is a replay's: each key's final row, older than
        // anything the stream brings, so no tombstone is needed to win.)
        let stored = !self.loading
            && dest
                .query_opt(sql.any_stored.as_str(), &[])
                .await
                .map_err(|e| Error::destination(context, e))?
                .is_some();
        let remembers = !self.plan.hidden.is_empty();
        let statements: &[&String] = match (stored, self.loading) {
            (true, _) => &[&sql.upsert, &sql.tombstone],
            (false, true) if !remembers => &[&sql.insert_fresh],
            (false, true) => &[&sql.load_fresh],
            (false, false) => &[&sql.store_fresh],
        };
        let with_params: Vec<(&str, &[&(dyn tokio_postgres::types::ToSql + Sync)])> = statements
            .iter()
            .map(|s| (s.as_str(), &params[..]))
            .collect();
        let then = format!("TRUNCATE pg_temp.{WORK_TABLE}");
        // A piece of a large source transaction (no cursor) is checked
        // rather than run under a savepoint (see `dead`).
        let guarding = if piece {
            Guarding::Check
        } else {
            Guarding::Savepoint
        };
        super::dead::run_guarded(
            dest,
            &self.plan,
            &self.dead,
            guarding,
            rows,
            &with_params,
            None,
            &then,
            context,
        )
        .await?;
        Ok(outcome)
    }
}

/// Records a chunked copy's chunk snapshot for `plan`'s table; returns the
/// seq its rows are stored with.
async fn record_snapshot(
    dest: &DestTransaction<'_>,
    plan: &Plan,
    snapshot: &ChunkSnapshot,
) -> Result<i32> {
    let id: i32 = dest
        .query_one(
            "INSERT INTO walfill.chunk_snapshots (version_table, lsn, snap_xmin, snap_xmax, snap_xip)
             VALUES ($1, $2::text::pg_lsn, $3, $4, $5) RETURNING id",
            &[
                &plan.staging_table(),
                &snapshot.lsn.to_string(),
                &snapshot.xmin,
                &snapshot.xmax,
                &snapshot.xip,
            ],
        )
        .await
        .map_err(|e| Error::destination("recording a chunk's snapshot", e))?
        .get(0);
    Ok(crate::pipeline::version_sql::chunk_seq(id))
}

/// One work-table row in COPY text format; true if it has unchanged
/// TOASTed values to fill in. `columns` are the plan's source columns with
/// whether each is a key column.
fn write_entry(
    out: &mut String,
    columns: &[(&str, bool)],
    key_positions: &[usize],
    key: &[String],
    entry: &Entry,
) -> bool {
    let mut unchanged: Vec<&str> = Vec::new();
    for (i, (name, _)) in columns.iter().enumerate() {
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
    out.push('\t');
    match entry.xid {
        Some(xid) => out.push_str(&xid.to_string()),
        None => out.push_str("\\N"),
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
