//! A chunked snapshot copy as a history source: each keyset chunk read in a
//! short `REPEATABLE READ` transaction of its own, with the snapshot it was
//! read in, so that the source's vacuum horizon is held for one chunk at
//! most and a lost connection costs one chunk.
//!
//! Each chunk's transaction first locks the table in ACCESS SHARE mode
//! (before its snapshot is taken, so a rewrite committed just before is
//! seen through, not as an empty table), then takes the snapshot with its
//! first query, which returns it (`pg_current_snapshot()`) and the WAL
//! insert position under it. Rows are stored with that snapshot recorded
//! (see `walfill.chunk_snapshots`), and the stream's changes are decided
//! against them by what the snapshot could see (see [`crate::pipeline::version_sql`]).
//!
//! The copy ends at the last key of the table as the first chunk's snapshot
//! saw it, so that a table growing at its end as fast as it is read is
//! still copied in bounded time. A key past that bound was written by a
//! transaction no chunk needs: one the first snapshot could not see, which
//! committed after the slot's consistent point (the fence sees to that),
//! so the stream brings it.
//!
//! A reader task streams each chunk's rows to the destination as they
//! arrive, and reads the next chunk while the previous one is stored. A
//! connection lost before a chunk's first row is retried unseen; one lost
//! while its rows are on their way cuts the chunk off (the apply loop rolls
//! back what arrived of it) and the chunk is read again.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::sql::{quote_ident, quote_literal, quote_qualified, sql_class, SqlClass};
use walfill_core::Version;
use walfill_snapshot::{
    ChunkRead, ChunkRows, CopyFormat, KeysetChunk, Projection, SnapshotError, SourceTable,
};

use super::copy::{copy_table, hidden_columns, Pace};
use super::evaluate::give_up_projection;
use super::feed::{chunk_batch, Feed};
use crate::config::PgUrl;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, ChunkSnapshot, Cursor, HistorySource};
use crate::pipeline::version_sql::Plan;
use crate::progress::Progress;
use crate::retry::Backoff;

/// Attempts at one chunk when the source connection is lost.
const ATTEMPTS: u32 = 5;
/// Pauses between them: 400 ms, doubling. Only a lost connection is
/// retried here, on a new one; anything else ends the copy.
const CHUNK_RETRY: Backoff = Backoff::new(Duration::from_millis(400), Duration::from_millis(3200));

/// One key range of a copy made by several workers: keys whose first
/// column is above `above` and at most `up_to` (text values; `None`: open).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    /// The range's number.
    pub no: i32,
    /// The lower bound, excluded.
    pub above: Option<String>,
    /// The upper bound, included.
    pub up_to: Option<String>,
}

impl KeyRange {
    /// The range as a condition on `table`'s first key column, as it is
    /// named now.
    fn condition(&self, table: &SourceTable) -> Option<String> {
        let first = table.key.first()?;
        let sql_type = table.column(first).map(|c| c.sql_type.as_str())?;
        let column = quote_ident(first);
        let bounds: Vec<String> = [(">", &self.above), ("<=", &self.up_to)]
            .into_iter()
            .filter_map(|(op, value)| {
                let value = value.as_ref()?;
                Some(format!(
                    "{column} {op} {}::{sql_type}",
                    quote_literal(value)
                ))
            })
            .collect();
        (!bounds.is_empty()).then(|| bounds.join(" AND "))
    }
}

/// A chunk the reader has started: its rows, the key they follow and the
/// snapshot they are read in.
struct Started {
    rows: ChunkRows,
    after: Option<Vec<String>>,
    snapshot: ChunkSnapshot,
    /// Whether the rows are the transform's, evaluated on the source.
    projected: bool,
}

/// A chunked copy of the table after `after`, as batches.
pub struct ChunkedSource {
    feed: Feed<Started>,
    reader: Option<JoinHandle<()>>,
    range: Option<i32>,
}

impl ChunkedSource {
    /// Starts reading `plan`'s table (or its key range `range`) from the
    /// source at `url`, after the key `after`, its rows travelling in
    /// `format`. With `with_hidden`, the plan's hidden columns are sent
    /// again after the row's own (a load straight into the version table).
    /// With a `projection`, the source evaluates it over each chunk (see
    /// [`crate::pipeline::source::evaluate`]) until it fails once; chunks are then
    /// read as the table's rows.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        url: PgUrl,
        plan: &Plan,
        range: Option<KeyRange>,
        after: Option<Vec<String>>,
        pace: Pace,
        (with_hidden, format, projection): (bool, CopyFormat, Option<Projection>),
        progress: Progress,
        cancel: CancellationToken,
    ) -> ChunkedSource {
        let range_no = range.as_ref().map(|r| r.no);
        let (tx, chunks) = mpsc::channel(1);
        let reader = Reader {
            url,
            plan: plan.clone(),
            name: quote_qualified(&plan.source.schema, &plan.source.name),
            chunk_rows: pace.chunk_rows,
            with_hidden,
            format,
            projection,
            client: None,
            until: None,
            range,
        };
        let task = tokio::spawn(reader.run(after, tx, cancel.clone()));
        ChunkedSource {
            feed: Feed::new(chunks, pace, progress, cancel),
            reader: Some(task),
            range: range_no,
        }
    }

    /// Stops the reader and closes the progress line.
    pub async fn finish(mut self) {
        self.feed.close();
        if let Some(reader) = self.reader.take() {
            let _ = reader.await;
        }
    }
}

/// The reader task's state.
struct Reader {
    url: PgUrl,
    plan: Plan,
    /// The table's qualified name as last seen (it may be renamed).
    name: String,
    chunk_rows: u32,
    with_hidden: bool,
    format: CopyFormat,
    projection: Option<Projection>,
    client: Option<Client>,
    /// The last key to copy (see the module's notes), once read; `Some(None)`
    /// when the table (or range) was empty.
    until: Option<Option<Vec<String>>>,
    range: Option<KeyRange>,
}

impl Reader {
    async fn run(
        mut self,
        mut cursor: Option<Vec<String>>,
        chunks: mpsc::Sender<Result<Started>>,
        cancel: CancellationToken,
    ) {
        loop {
            let read = tokio::select! {
                _ = cancel.cancelled() => Err(Error::Interrupted),
                read = self.read_with_retries(cursor.as_deref(), &chunks) => read,
            };
            match read {
                Ok(Some(ChunkRead {
                    rows,
                    last_key: Some(key),
                })) if rows >= u64::from(self.chunk_rows) => cursor = Some(key),
                Ok(_) => return,
                Err(e) => {
                    let _ = chunks.send(Err(e)).await;
                    return;
                }
            }
        }
    }

    /// Reads the chunk after `after` (`None`: no row follows, the copy is
    /// complete), again on a new connection when the connection is lost.
    async fn read_with_retries(
        &mut self,
        after: Option<&[String]>,
        chunks: &mpsc::Sender<Result<Started>>,
    ) -> Result<Option<ChunkRead>> {
        let mut attempt = 1;
        loop {
            match self.read_once(after, chunks).await {
                Ok(read) => return Ok(read),
                Err(e) if attempt < ATTEMPTS && connection_lost(&e) => {
                    tracing::warn!(
                        error = %e.describe(),
                        attempt,
                        "the source connection was lost while reading a chunk; reading it again"
                    );
                    self.client = None;
                    tokio::time::sleep(CHUNK_RETRY.after(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one chunk in a transaction of its own and streams it to
    /// `chunks`. A failure once its rows are on their way is also told to
    /// the chunk's consumer: as a cut when the connection was lost (the
    /// chunk is read again), as itself otherwise.
    async fn read_once(
        &mut self,
        after: Option<&[String]>,
        chunks: &mpsc::Sender<Result<Started>>,
    ) -> Result<Option<ChunkRead>> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(db::connect(&self.url, Role::Source).await?);
        }
        let client = self.client.as_mut().expect("connected");
        let relid = self.plan.source.oid;
        loop {
            let tx = super::read_only_transaction(client, "a chunk's transaction").await?;
            // The lock comes before the snapshot: it waits for a rewrite
            // to commit, and the snapshot then sees through it.
            let locked = tx
                .batch_execute(&format!("LOCK TABLE {} IN ACCESS SHARE MODE", self.name))
                .await;
            match locked {
                Ok(()) => {}
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
                    // Renamed since the last chunk: find its name by OID.
                    drop(tx);
                    self.name = current_name(client, relid, &self.plan).await?;
                    continue;
                }
                Err(e) => return Err(Error::source_query("locking the source table", e)),
            }
            let row = tx
                .query_one(
                    "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,
                            ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x),
                            pg_current_wal_insert_lsn()::text,
                            (SELECT ARRAY[n.nspname::text, c.relname::text]
                               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                              WHERE c.oid = $1)
                       FROM pg_current_snapshot() AS s",
                    &[&relid],
                )
                .await
                .map_err(|e| Error::source_query("reading a chunk's snapshot", e))?;
            let name = qualified(row.get(4), &self.plan)?;
            if name != self.name {
                // The name now belongs to another table: lock ours by its own.
                drop(tx);
                self.name = name;
                continue;
            }
            let lsn_text: String = row.get(3);
            let snapshot = ChunkSnapshot {
                lsn: lsn_text
                    .parse()
                    .map_err(|_| Error::Internal(format!("unreadable WAL position {lsn_text}")))?,
                xmin: row.get(0),
                xmax: row.get(1),
                xip: row.get(2),
            };
            let now = SourceTable::describe_oid(&tx, relid).await?;
            let table = copy_table(&self.plan, &now)?;
            let extra = if self.with_hidden {
                hidden_columns(&self.plan, &table)
            } else {
                Vec::new()
            };
            let scope = self.range.as_ref().and_then(|r| r.condition(&table));
            if self.until.is_none() {
                let last = tx
                    .query_opt(
                        KeysetChunk::last_key_sql(&table, scope.as_deref()).as_str(),
                        &[],
                    )
                    .await
                    .map_err(|e| Error::source_query("reading the table's last key", e))?;
                self.until = Some(last.map(|row| row.get(0)));
            }
            let until = self.until.clone().flatten();
            let projected = self.projection.is_some();
            if projected {
                tx.batch_execute(super::evaluate::PIN_FUNCTIONS)
                    .await
                    .map_err(|e| Error::source_query("pinning the transform's functions", e))?;
            }
            let reading = match &until {
                Some(until) => {
                    let started = KeysetChunk::new(&table, after, self.chunk_rows)
                        .until(Some(until))
                        .within(scope.as_deref())
                        .with_extra(&extra)
                        .in_format(self.format)
                        .projected(self.projection.as_ref())
                        .start(&tx)
                        .await;
                    match started {
                        Err(e) if projected && !source_lost(&e) => {
                            give_up_projection(&mut self.projection, &e);
                            continue;
                        }
                        started => started?,
                    }
                }
                None => None,
            };
            let read = match reading {
                None => None,
                Some(reading) => {
                    let format = if projected {
                        CopyFormat::Binary
                    } else {
                        self.format
                    };
                    let (sender, rows) = ChunkRows::channel(format);
                    let started = Started {
                        rows,
                        after: after.map(<[String]>::to_vec),
                        snapshot,
                        projected,
                    };
                    if chunks.send(Ok(started)).await.is_err() {
                        return Err(Error::Interrupted);
                    }
                    match reading.forward(&sender, None).await {
                        Ok(read) => Some(read),
                        Err(e) if projected && !source_lost(&e) => {
                            // What arrived of the chunk is rolled back, and
                            // the chunk is read again, as the table's rows.
                            give_up_projection(&mut self.projection, &e);
                            let cut = SnapshotError::Cut(e.to_string());
                            let _ = sender.send(Err(cut)).await;
                            continue;
                        }
                        Err(e) if source_lost(&e) => {
                            let cut = SnapshotError::Cut(e.to_string());
                            let _ = sender.send(Err(cut)).await;
                            return Err(e.into());
                        }
                        Err(e) => {
                            // The chunk's consumer reports it.
                            let _ = sender.send(Err(e)).await;
                            return Err(Error::Internal("a chunk could not be read".into()));
                        }
                    }
                }
            };
            // The chunk's rows are what its snapshot showed, whatever becomes
            // of its read-only transaction: a connection lost now costs a
            // new connection for the next chunk, not this one again (which
            // would store its rows twice).
            if let Err(e) = tx.commit().await {
                tracing::warn!(
                    error = %walfill_core::sql::describe_pg_error(&e),
                    "closing a chunk's transaction failed after its rows were read; the next \
                     chunk opens a new connection"
                );
                self.client = None;
            }
            return Ok(read);
        }
    }
}

/// The table's qualified name from `[schema, name]`, or the error saying
/// it was dropped.
fn qualified(name: Option<Vec<String>>, plan: &Plan) -> Result<String> {
    match name.as_deref() {
        Some([schema, table]) => Ok(quote_qualified(schema, table)),
        _ => Err(plan.schema_changed(format!(
            "source table {} was dropped during the copy",
            plan.source
        ))),
    }
}

/// The current qualified name of the table with OID `relid`.
async fn current_name(client: &Client, relid: u32, plan: &Plan) -> Result<String> {
    let row = client
        .query_opt(
            "SELECT ARRAY[n.nspname::text, c.relname::text]
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.oid = $1",
            &[&relid],
        )
        .await
        .map_err(|e| Error::source_query("looking up the source table's name", e))?;
    let name = qualified(row.map(|r| r.get(0)), plan)?;
    tracing::info!(now = %name, "the source table was renamed during the copy");
    Ok(name)
}

/// Whether `e` is the source connection going away (a restart, a
/// terminated backend, a network cut), so that reading again may work.
fn connection_lost(e: &Error) -> bool {
    match e {
        Error::Connect { .. } => true,
        Error::Source(e) => source_lost(e),
        _ => false,
    }
}

/// [`connection_lost`] for a source error.
fn source_lost(e: &SnapshotError) -> bool {
    match e {
        SnapshotError::Query { source, .. } => {
            source.is_closed()
                || source.code().is_none_or(|c| {
                    matches!(
                        sql_class(c),
                        SqlClass::ConnectionException | SqlClass::OperatorIntervention
                    )
                })
        }
        _ => false,
    }
}

impl HistorySource for ChunkedSource {
    async fn next(&mut self) -> Result<Option<Batch>> {
        let Some(Started {
            rows,
            after,
            snapshot,
            projected,
        }) = self.feed.next().await?
        else {
            return Ok(None);
        };
        let cursor = match self.range {
            Some(range) => Cursor::Ranged {
                range,
                last_key: Vec::new(),
                rows: 0,
            },
            None => Cursor::Copied {
                last_key: Vec::new(),
                rows: 0,
                rate: self.feed.rate,
            },
        };
        let version = Version {
            commit_lsn: snapshot.lsn,
            seq: 0,
        };
        let read = (version, Some(snapshot));
        Ok(Some(chunk_batch(rows, projected, read, after, cursor)))
    }

    async fn stored(&mut self, cursor: &Cursor) -> Result<()> {
        match cursor {
            Cursor::Copied { rows, .. } | Cursor::Ranged { rows, .. } => {
                self.feed.stored(*rows).await
            }
            _ => Ok(()),
        }
    }

    fn confirms_upstream(&self) -> bool {
        false
    }
}
