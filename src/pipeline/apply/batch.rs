//! The one seam every history source meets: batches.
//!
//! A snapshot copy, a base snapshot, WAL replay and the live stream each
//! turn what they read into [`Batch`]es: row writes, each with its version
//! (already folded to one write per key, or a snapshot chunk whose rows all
//! share one version), the newest TRUNCATE the batch passed, and the
//! [`Cursor`] that says how far the source has got. [`run`](super::run)
//! stores each batch and records its cursor in one destination transaction,
//! and only then tells the source it may forget what the batch covered.

use tokio_postgres::Transaction;
use walfill_core::{Lsn, Version};
use walfill_snapshot::{ChunkRead, ChunkRows};

use super::fold::{Entry, Fold};
use super::stream_desc::StreamDesc;
use crate::error::Result;

/// What one batch brings.
#[derive(Debug)]
pub struct Batch {
    /// The row writes.
    pub writes: Writes,
    /// The newest TRUNCATE among the batch's changes: every stored row
    /// older than it goes, and no older write is stored after it. (A newer
    /// TRUNCATE subsumes an older one, so one is enough.)
    pub truncate: Option<Version>,
    /// The xid of `truncate`'s transaction, when known.
    pub truncate_xid: Option<u32>,
    /// Source row changes the batch carries (for counters).
    pub changes: i64,
    /// How far the source has got once the batch is stored. `None` for a
    /// piece of a transaction still being read: it is stored in the open
    /// destination transaction, which commits with a later batch's cursor.
    pub cursor: Option<Cursor>,
}

/// The row writes of a batch.
#[derive(Debug, Default)]
pub enum Writes {
    /// None (a batch that only moves the cursor, or only truncates).
    #[default]
    None,
    /// Source changes folded to one write per key, each with its version.
    Folded(Fold),
    /// The final rows of keys of a replay's merged fold (see
    /// [`super::ExternalFold`]), in key order, for a table being loaded.
    Merged(Vec<(Vec<String>, Entry)>),
    /// A snapshot chunk: rows in COPY form with the plan's source columns,
    /// all versioned `version`, arriving while they are stored. The batch's
    /// cursor is completed from what the chunk read once it has arrived
    /// (see [`Cursor::end_chunk`]).
    Chunk {
        /// The rows.
        rows: ChunkRows,
        /// Whether the rows are the version's own, the transform evaluated
        /// on the source (see [`crate::pipeline::source::evaluate`]), rather than the
        /// source table's.
        projected: bool,
        /// Their version: the snapshot's `(boundary, 0)`; for a chunk read
        /// in a snapshot of its own, the LSN read under it (the seq comes
        /// when its snapshot is recorded).
        version: Version,
        /// The chunk's own snapshot, for a chunked copy.
        snapshot: Option<ChunkSnapshot>,
        /// The key after which the chunk's rows start (the previous
        /// chunk's last key), `None` for the first chunk.
        after: Option<Vec<String>>,
    },
    /// Dead letters applied again, each at its own version (see
    /// [`Letter`]).
    Letters(Vec<Letter>),
}

/// A dead letter to apply again: a source row the transform failed on.
#[derive(Clone, Debug, PartialEq)]
pub struct Letter {
    /// The key's values, as text.
    pub key: Vec<String>,
    /// The version of its change: commit LSN (a copied row's: its
    /// chunk's)...
    pub lsn: Lsn,
    /// ...and position (a chunked copy's rows: below zero).
    pub seq: i32,
    /// The source row as the transform read it (a JSON object); `None`
    /// for a letter recorded without it, which only a newer change of its
    /// key settles.
    pub row: Option<serde_json::Value>,
}

/// The snapshot one chunk of a chunked copy was read in (see
/// `walfill.chunk_snapshots`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkSnapshot {
    /// `pg_current_wal_insert_lsn()` read under it.
    pub lsn: Lsn,
    /// Its xmin, xmax and running xids (64 bits).
    pub xmin: i64,
    /// See `xmin`.
    pub xmax: i64,
    /// See `xmin`.
    pub xip: Vec<i64>,
}

/// How far a history source has got; recorded with the batch it ends.
#[derive(Clone, Debug, PartialEq)]
pub enum Cursor {
    /// A snapshot copy: every row up to and including `last_key` is stored.
    Copied {
        /// Key of the chunk's last row.
        last_key: Vec<String>,
        /// Rows in the chunk.
        rows: i64,
        /// The copy's recent rate, rows per second.
        rate: f64,
    },
    /// One key range of a chunked copy made by several workers: every row
    /// of range `range` up to and including `last_key` is stored.
    Ranged {
        /// The range's number.
        range: i32,
        /// Key of the chunk's last row.
        last_key: Vec<String>,
        /// Rows in the chunk.
        rows: i64,
    },
    /// Replayed WAL: every transaction committed up to `committed` is stored
    /// (`None` while the first one has not completed). Writes of a
    /// transaction still in progress may be stored too: the version's table
    /// is not visible to readers yet, and storing them again is harmless.
    Replayed {
        /// Commit LSN of the last transaction completely stored.
        committed: Option<Lsn>,
        /// How far the WAL is read.
        read: Lsn,
        /// Rows written into the version's table.
        rows: i64,
        /// Recent rate of reading WAL, bytes per second.
        rate: f64,
    },
    /// A replay's merged rows: every key up to and including `last_key` (in
    /// the merge's order) is stored.
    Merged {
        /// Key of the batch's last row.
        last_key: Vec<String>,
        /// Rows in the batch.
        rows: i64,
    },
    /// Keys the source lost (a scoped refresh's end): every such key up to
    /// and including `last_key`, in the destination's key order, is a
    /// tombstone.
    Absent {
        /// The batch's last key.
        last_key: Vec<String>,
        /// Keys in the batch.
        keys: i64,
    },
    /// Dead letters applied again: every letter up to and including the
    /// batch's last, in the order of `(lsn, seq, key)`, is settled
    /// (applied, set aside again, or dropped).
    Letters {
        /// The batch's last letter's LSN...
        lsn: Lsn,
        /// ...seq...
        seq: i32,
        /// ...and key (the rows of one copied chunk share their version).
        key: Vec<String>,
    },
    /// The live stream: every transaction committed before `end` is stored.
    Streamed {
        /// Where the stream resumes.
        end: Lsn,
        /// The stream's description of the table as of `end`, when a schema
        /// change moved it since the last cursor.
        description: Option<StreamDesc>,
        /// When the batch's last transaction committed on the source
        /// (microseconds since 2000-01-01 UTC), if it has one.
        committed_at: Option<i64>,
    },
}

impl Cursor {
    /// Completes a chunk's cursor with what the chunk read: its rows and
    /// last key (a chunk's batch is handed out before its rows arrive).
    pub fn end_chunk(&mut self, read: &ChunkRead) {
        let rows_read = i64::try_from(read.rows).unwrap_or(i64::MAX);
        match self {
            Cursor::Copied { last_key, rows, .. } | Cursor::Ranged { last_key, rows, .. } => {
                *rows = rows_read;
                if let Some(key) = &read.last_key {
                    *last_key = key.clone();
                }
            }
            _ => {}
        }
    }
}

/// A source of batches for one version.
///
/// `next` hands out batches in order; `stored` is called once the batch
/// with that cursor is committed in the destination, and is the only place
/// a source may confirm anything upstream (a slot's flush position).
#[allow(async_fn_in_trait)]
pub trait HistorySource {
    /// The next batch, or `None` when there is nothing more to read (the copy
    /// is complete, the replay reached its boundary, the stream its target).
    async fn next(&mut self) -> Result<Option<Batch>>;

    /// The batch ending at `cursor` is stored (durably, when the source
    /// [confirms upstream](HistorySource::confirms_upstream)).
    async fn stored(&mut self, cursor: &Cursor) -> Result<()> {
        let _ = cursor;
        Ok(())
    }

    /// Whether [`stored`](HistorySource::stored) tells the source anything
    /// (a slot's flush position), so that each batch must be durable before
    /// it is called. A source that tells nothing lets its batches commit
    /// without waiting for the destination's WAL flush: a crash of the
    /// destination can then lose its last few batches, their cursors with
    /// them, and they are read again; the fill's phase transition, a
    /// synchronous commit, makes everything before it durable.
    fn confirms_upstream(&self) -> bool {
        true
    }
}

/// Where the apply loop records how far a version has got: each stored
/// batch's cursor, inside the batch's own destination transaction. The
/// version's state row implements it; the loop knows nothing else of it.
/// (Implemented inside the crate only, like [`HistorySource`].)
#[allow(async_fn_in_trait)]
pub trait RecordProgress {
    /// The newest TRUNCATE stored in the version so far.
    fn truncated(&self) -> Option<Version>;

    /// Reads, in the transaction a batch is about to be stored in, what
    /// [`RecordProgress::truncated`] should say for it (when another
    /// writer, the version's own stream, may have moved it).
    async fn before_batch(&mut self, _tx: &Transaction<'_>) -> Result<()> {
        Ok(())
    }

    /// Records `cursor`, the `changes` the batch carried and the newest
    /// TRUNCATE stored, in `tx`. Fails when the version is no longer this
    /// process's to write, so that `tx` does not commit.
    async fn record_batch(
        &mut self,
        tx: &Transaction<'_>,
        cursor: &Cursor,
        changes: i64,
        truncated: Option<Version>,
    ) -> Result<()>;
}
