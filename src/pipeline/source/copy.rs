//! A snapshot copy as a history source: keyset chunks of the source table
//! read inside an exported snapshot, each a batch versioned `(snapshot, 0)`
//! with the key after it as its cursor.
//!
//! A reader task holds the snapshot's transaction and streams each chunk's
//! rows to the destination as they arrive (see [`walfill_snapshot::rows`]);
//! it reads the next chunk while the previous one is being stored, and
//! feeds the rows of a text copy to the base snapshot writer on the way. It first locks the table in ACCESS
//! SHARE mode, so no schema change can land while the copy runs, then
//! checks that the table was not rewritten since the snapshot (a rewrite is
//! not MVCC-safe: the snapshot would see it empty), and reads the columns'
//! names as they are now (SQL is parsed with the current catalog, whatever
//! the snapshot).

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::sql::{quote_literal, quote_qualified};
use walfill_core::{Lsn, Version};
use walfill_snapshot::{
    ChunkRows, CopyFormat, KeysetChunk, Projection, SnapshotError, SourceTable,
};

use super::evaluate::give_up_projection;
use super::feed::{chunk_batch, Feed};
use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, Cursor, HistorySource, StreamDesc};
use crate::pipeline::base::BaseWriter;
use crate::pipeline::version_sql::Plan;
use crate::progress::Progress;

pub use super::feed::Pace;

/// An exported snapshot and the LSN it is consistent at.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The name to import with `SET TRANSACTION SNAPSHOT`.
    pub name: String,
    /// Its consistent point: every copied row is versioned `(lsn, 0)`.
    pub lsn: Lsn,
    /// Only the rows matching this condition (a scoped refresh), if set.
    pub scope: Option<String>,
    /// Send the plan's hidden columns again after the row's own, in the
    /// version table's column order (a load straight into it).
    pub with_hidden: bool,
    /// How the rows travel (text when a base snapshot is written).
    pub format: CopyFormat,
    /// The transform for the source to evaluate over each chunk, if it
    /// does (see [`crate::pipeline::source::evaluate`]), until it fails once.
    pub projection: Option<Projection>,
}

/// What the reader gives back: its session and the base snapshot writer
/// it fed.
type Finished = (Client, Option<BaseWriter>);

/// A chunk the reader has started: its rows, and the key they follow.
pub(super) struct Started {
    pub(super) rows: ChunkRows,
    pub(super) after: Option<Vec<String>>,
    pub(super) projected: bool,
}

/// What the reader found once it held the snapshot and the lock.
struct Opened {
    /// The columns the stream sends, as of the snapshot.
    stream_desc: StreamDesc,
}

/// A copy of the table after `after`, as batches.
pub struct CopySource {
    feed: Feed<Started>,
    reader: Option<JoinHandle<Result<Finished>>>,
    version: Version,
    /// The stream's description of the table as of the snapshot.
    pub stream_desc: StreamDesc,
    projected: bool,
}

impl CopySource {
    /// Starts reading `plan`'s table in `snapshot` on `snapshot_session`
    /// (which the source gives back with [`CopySource::finish`]), after the
    /// key `after`. `catalog` is another source session, for the columns'
    /// current names.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        snapshot_session: Client,
        catalog: &Client,
        plan: &Plan,
        snapshot: Snapshot,
        after: Option<Vec<String>>,
        pace: Pace,
        progress: Progress,
        base: Option<BaseWriter>,
        cancel: CancellationToken,
    ) -> Result<CopySource> {
        let (chunks_tx, chunks) = mpsc::channel(1);
        let (opened_tx, opened_rx) = oneshot::channel();
        let (table_tx, table_rx) = oneshot::channel();
        let reader = tokio::spawn(read_chunks(
            snapshot_session,
            plan.source.oid,
            snapshot.name.clone(),
            snapshot.scope.clone(),
            after,
            pace.chunk_rows,
            snapshot.format,
            base,
            opened_tx,
            table_rx,
            chunks_tx,
        ));
        let opened = match opened_rx.await {
            Ok(opened) => opened?,
            Err(_) => return Err(reader_failed(reader).await),
        };
        // Locked: the catalog cannot move until the copy ends.
        let now = SourceTable::describe_oid(catalog, plan.source.oid).await?;
        let table = copy_table(plan, &now)?;
        let extra: Vec<String> = if snapshot.with_hidden {
            hidden_columns(plan, &table)
        } else {
            Vec::new()
        };
        if table_tx
            .send((table, extra, snapshot.projection.clone()))
            .is_err()
        {
            return Err(reader_failed(reader).await);
        }
        Ok(CopySource {
            feed: Feed::new(chunks, pace, progress, cancel),
            reader: Some(reader),
            version: Version::snapshot(snapshot.lsn),
            stream_desc: opened.stream_desc,
            projected: snapshot.projection.is_some(),
        })
    }

    /// Whether the source evaluates the transform over the chunks (until it
    /// fails once).
    pub fn projected(&self) -> bool {
        self.projected
    }

    /// Waits for the reader to close the snapshot and gives back its
    /// session, and the base snapshot writer.
    pub async fn finish(mut self) -> Result<Finished> {
        self.feed.close();
        let reader = self
            .reader
            .take()
            .ok_or_else(|| Error::Internal("no reader".into()))?;
        reader
            .await
            .map_err(|e| Error::Internal(format!("the snapshot reader failed: {e}")))?
    }
}

async fn reader_failed<T>(reader: JoinHandle<Result<T>>) -> Error {
    match reader.await {
        Ok(Err(e)) => e,
        Ok(Ok(_)) => Error::Internal("the snapshot reader stopped early".into()),
        Err(e) => Error::Internal(format!("the snapshot reader failed: {e}")),
    }
}

/// The current names (in `table`, see [`copy_table`]) of the source
/// columns of `plan`'s hidden columns, in the version table's order.
pub(super) fn hidden_columns(plan: &Plan, table: &SourceTable) -> Vec<String> {
    plan.hidden
        .iter()
        .filter_map(|h| {
            let i = plan
                .source
                .columns
                .iter()
                .position(|c| c.name == h.source)?;
            Some(table.columns[i].name.clone())
        })
        .collect()
}

/// `plan`'s source table with the names its columns have now (by attribute
/// number); fails when a column the version copies is gone or retyped.
pub(super) fn copy_table(plan: &Plan, now: &SourceTable) -> Result<SourceTable> {
    let mut table = plan.source.clone();
    table.schema = now.schema.clone();
    table.name = now.name.clone();
    for column in table.columns.iter_mut() {
        let current = now
            .column_by_attnum(column.attnum)
            .filter(|c| c.type_oid == column.type_oid);
        match current {
            Some(c) => {
                if let Some(k) = table.key.iter_mut().find(|k| **k == column.name) {
                    *k = c.name.clone();
                }
                column.name = c.name.clone();
            }
            None if column.generated.is_some() => {}
            None => {
                return Err(plan.schema_changed(format!(
                    "source table {} changed since version {} of {} was planned: column {} \
                     (attribute {}) is gone or changed type",
                    plan.source, plan.def.version, plan.def.target, column.name, column.attnum,
                )))
            }
        }
    }
    Ok(table)
}

/// The reader task: imports the snapshot, locks the table, reports what it
/// found, then streams chunks until the table ends or the receiver is gone;
/// gives back its session and the base snapshot writer it fed.
#[allow(clippy::too_many_arguments)]
async fn read_chunks(
    mut client: Client,
    relid: u32,
    snapshot: String,
    scope: Option<String>,
    after: Option<Vec<String>>,
    chunk_rows: u32,
    format: CopyFormat,
    mut base: Option<BaseWriter>,
    opened: oneshot::Sender<Result<Opened>>,
    table: oneshot::Receiver<(SourceTable, Vec<String>, Option<Projection>)>,
    chunks: mpsc::Sender<Result<Started>>,
) -> Result<Finished> {
    let tx = super::read_only_transaction(&mut client, "the snapshot transaction").await?;
    let setup = async {
        tx.batch_execute(&format!(
            "SET TRANSACTION SNAPSHOT {}",
            quote_literal(&snapshot)
        ))
        .await
        .map_err(|e| Error::source_query("importing the exported snapshot", e))?;
        let row = tx
            .query_one(
                "SELECT n.nspname::text, c.relname::text, c.relfilenode,
                        pg_relation_filenode(c.oid)
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = $1",
                &[&relid],
            )
            .await
            .map_err(|e| Error::source_query("reading the table in the snapshot", e))?;
        let name = quote_qualified(&row.get::<_, String>(0), &row.get::<_, String>(1));
        tx.batch_execute(&format!("LOCK TABLE {name} IN ACCESS SHARE MODE"))
            .await
            .map_err(|e| Error::source_query("locking the source table for the copy", e))?;
        // After the lock, the file is the one the copy reads; the snapshot
        // must know it (the catalog's own row, as of the snapshot).
        let now: Option<u32> = tx
            .query_one("SELECT pg_relation_filenode($1::oid)", &[&relid])
            .await
            .map_err(|e| Error::source_query("reading the table's file", e))?
            .get(0);
        let then: u32 = row.get(2);
        if then != 0 && now != Some(then) {
            return Err(Error::Source(walfill_snapshot::SnapshotError::Protocol(
                format!(
                    "{name} was rewritten (ALTER TABLE, VACUUM FULL, CLUSTER or TRUNCATE) after \
                 the copy's snapshot was taken, which a snapshot cannot see through; run \
                 the backfill again"
                ),
            )));
        }
        let stream_desc = StreamDesc::from_catalog(&tx, relid).await?;
        Ok(Opened { stream_desc })
    };
    let result = setup.await;
    let failed = result.is_err();
    let _ = opened.send(result);
    if failed {
        return Err(Error::Internal("the snapshot could not be opened".into()));
    }
    let Ok((table, extra, mut projection)) = table.await else {
        return Err(Error::Internal("the copy was abandoned".into()));
    };
    let mut cursor = after;
    loop {
        let projected = projection.is_some();
        // A chunk the source fails to transform is read again as the
        // table's rows, in the same snapshot: back to before it.
        let savepoint = |what: &'static str| {
            let tx = &tx;
            async move {
                match projected {
                    true => tx
                        .batch_execute(&format!("{what} SAVEPOINT walfill_chunk"))
                        .await
                        .map_err(|e| Error::source_query("marking a chunk's start", e)),
                    false => Ok(()),
                }
            }
        };
        savepoint("").await?;
        if projected {
            tx.batch_execute(super::evaluate::PIN_FUNCTIONS)
                .await
                .map_err(|e| Error::source_query("pinning the transform's functions", e))?;
        }
        let chunk = KeysetChunk::new(&table, cursor.as_deref(), chunk_rows)
            .within(scope.as_deref())
            .with_extra(&extra)
            .in_format(format)
            .projected(projection.as_ref());
        let reading = match chunk.start(&tx).await {
            Ok(Some(reading)) => reading,
            Ok(None) => break,
            Err(e) if projected => {
                give_up_projection(&mut projection, &e);
                savepoint("ROLLBACK TO").await?;
                continue;
            }
            Err(e) => {
                let _ = chunks.send(Err(e.into())).await;
                return Err(Error::Internal("the copy failed".into()));
            }
        };
        let (sender, rows) = ChunkRows::channel(if projected {
            CopyFormat::Binary
        } else {
            format
        });
        let announced = Started {
            rows,
            after: cursor.clone(),
            projected,
        };
        if chunks.send(Ok(announced)).await.is_err() {
            return Err(Error::Internal("the copy was abandoned".into()));
        }
        let mut tap = base.as_mut().map(|b| b.tap());
        let read = match reading
            .forward(
                &sender,
                tap.as_mut().map(|t| t as &mut walfill_snapshot::RowTap<'_>),
            )
            .await
        {
            Ok(read) => read,
            Err(e) if projected => {
                // What arrived of the chunk is rolled back, and the chunk
                // is read again.
                give_up_projection(&mut projection, &e);
                let _ = sender.send(Err(SnapshotError::Cut(e.to_string()))).await;
                drop(tap);
                savepoint("ROLLBACK TO").await?;
                continue;
            }
            Err(e) => {
                let _ = sender.send(Err(e)).await;
                return Err(Error::Internal("the copy failed".into()));
            }
        };
        drop(tap);
        savepoint("RELEASE").await?;
        if let Some(writer) = base.as_mut() {
            if let Err(e) = writer.flush_if_due().await {
                tracing::warn!(error = %e.describe(), "giving up the base snapshot; the copy goes on");
                base = None;
            }
        }
        match read.last_key {
            Some(key) if read.rows >= u64::from(chunk_rows) => cursor = Some(key),
            _ => break,
        }
    }
    tx.commit()
        .await
        .map_err(|e| Error::source_query("closing the snapshot transaction", e))?;
    Ok((client, base))
}

impl HistorySource for CopySource {
    async fn next(&mut self) -> Result<Option<Batch>> {
        let Some(chunk) = self.feed.next().await? else {
            return Ok(None);
        };
        let cursor = Cursor::Copied {
            last_key: Vec::new(),
            rows: 0,
            rate: self.feed.rate,
        };
        let (rows, projected) = (chunk.rows, chunk.projected);
        let version = (self.version, None);
        Ok(Some(chunk_batch(
            rows,
            projected,
            version,
            chunk.after,
            cursor,
        )))
    }

    async fn stored(&mut self, cursor: &Cursor) -> Result<()> {
        match cursor {
            Cursor::Copied { rows, .. } => self.feed.stored(*rows).await,
            _ => Ok(()),
        }
    }

    fn confirms_upstream(&self) -> bool {
        false
    }
}
