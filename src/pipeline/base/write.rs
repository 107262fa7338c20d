//! Writing a base snapshot: the rows a snapshot backfill copies, or the
//! rows a replay folded up to its boundary.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use walfill_core::Datum;
use walfill_replay::archive::Archive;
use walfill_replay::decode::NewRelation;
use walfill_replay::Lsn;
use walfill_snapshot::copy_data::split_copy_line;

use super::{base_dir, Manifest, Part};
use crate::error::{Error, Result};

/// Rows per Parquet file.
const PART_ROWS: usize = 100_000;

/// Collects copied rows and writes them to the archive in Parquet parts.
pub struct BaseWriter {
    archive: Archive,
    database: u32,
    relation: NewRelation,
    columns: Vec<String>,
    boundary: Lsn,
    restart_lsn: Lsn,
    schema: Arc<Schema>,
    builders: Vec<StringBuilder>,
    buffered: usize,
    /// Rows copied before the buffered ones (names parts uniquely).
    first_row: u64,
    /// Why a copied row could not be kept, once one could not.
    failed: Option<String>,
    /// Bases of the table kept once this one is written (`None`: all).
    keep: Option<u32>,
    /// The source cluster's system identifier, for the manifest.
    system_id: Option<u64>,
}

impl BaseWriter {
    /// A writer for the base of `relation` started at `boundary`, to be
    /// followed by decoding from `restart_lsn`; `columns` are the copied
    /// columns in COPY order.
    pub fn new(
        archive: Archive,
        database: u32,
        relation: NewRelation,
        columns: Vec<String>,
        (boundary, restart_lsn): (Lsn, Lsn),
    ) -> BaseWriter {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(c, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let builders = columns.iter().map(|_| StringBuilder::new()).collect();
        BaseWriter {
            archive,
            database,
            relation,
            columns,
            boundary,
            restart_lsn,
            schema,
            builders,
            buffered: 0,
            first_row: 0,
            failed: None,
            keep: None,
            system_id: None,
        }
    }

    /// Records the source cluster's system identifier in the manifest.
    pub fn of_system(mut self, system_id: Option<u64>) -> BaseWriter {
        self.system_id = system_id;
        self
    }

    /// Once written, only the newest `keep` bases of the table stay (older
    /// ones, and parts of bases that were never finished, are removed).
    pub fn keeping(mut self, keep: u32) -> BaseWriter {
        self.keep = Some(keep.max(1));
        self
    }

    /// Takes each copied row, a line of COPY text as the source sent it
    /// (every row is read in the snapshot at the writer's boundary); the
    /// parts are written by [`BaseWriter::flush_if_due`].
    pub fn tap(&mut self) -> impl FnMut(&[u8]) + Send + '_ {
        move |line| {
            if self.failed.is_some() {
                return;
            }
            match split_copy_line(line) {
                Ok(row) => {
                    for (builder, value) in self.builders.iter_mut().zip(row) {
                        builder.append_option(value);
                    }
                    self.buffered += 1;
                }
                Err(e) => self.failed = Some(e.to_string()),
            }
        }
    }

    /// Takes one row of the table at the writer's boundary (a replay's
    /// folded row), its values in the writer's column order. A value the
    /// replay does not know (an unchanged TOASTed value it never saw) spoils
    /// the base.
    pub fn push(&mut self, values: &[Datum]) {
        if self.failed.is_some() {
            return;
        }
        if values.len() != self.builders.len() {
            self.failed = Some(format!(
                "a row of {} values for {} columns",
                values.len(),
                self.builders.len()
            ));
            return;
        }
        if values.contains(&Datum::Unchanged) {
            self.failed = Some(
                "a row holds a TOASTed value the replay never saw (unchanged since before the \
                 history it read)"
                    .into(),
            );
            return;
        }
        for (builder, value) in self.builders.iter_mut().zip(values) {
            builder.append_option(value.as_text());
        }
        self.buffered += 1;
    }

    /// Whether rows are buffered enough for a part.
    pub fn part_due(&self) -> bool {
        self.buffered >= PART_ROWS
    }

    /// Describes the base by `relation`, the table at the boundary (where
    /// a replay from the base starts reading its files), when it has the
    /// writer's columns and key; else says why the rows cannot be its base.
    pub fn adopt(&mut self, relation: &NewRelation) -> Option<String> {
        let shape = |r: &NewRelation| {
            let columns: Vec<(String, u32)> = r
                .attrs
                .attrs
                .iter()
                .filter(|a| !a.dropped)
                .map(|a| (a.name.clone(), a.type_oid))
                .collect();
            (r.oid, columns, r.key.clone())
        };
        if shape(&self.relation) != shape(relation) {
            return Some(format!(
                "{}.{} has other columns at the boundary than the rows were kept with",
                relation.schema, relation.name
            ));
        }
        self.relation = relation.clone();
        None
    }

    /// Writes a part once enough rows are buffered; fails when a row could
    /// not be kept.
    pub async fn flush_if_due(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Internal(format!("keeping a copied row: {why}")));
        }
        if self.buffered >= PART_ROWS {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes the buffered rows as one part (encoded on a blocking thread).
    pub async fn flush(&mut self) -> Result<()> {
        let Some(batch) = self.take_batch()? else {
            return Ok(());
        };
        let bytes = tokio::task::spawn_blocking({
            let schema = self.schema.clone();
            move || encode_part(schema, batch)
        })
        .await
        .map_err(|e| Error::Internal(format!("writing a base snapshot part: {e}")))??;
        self.put_part(bytes).await
    }

    /// [`BaseWriter::flush_if_due`] from a thread of its own that may
    /// block (a replay's fold thread): the part is encoded right here, so
    /// the memory its rows took is freed by the thread that took it.
    pub fn flush_if_due_here(&mut self, runtime: &tokio::runtime::Handle) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Internal(format!("keeping a copied row: {why}")));
        }
        if self.buffered < PART_ROWS {
            return Ok(());
        }
        self.flush_here(runtime)
    }

    /// [`BaseWriter::flush`], encoding on this thread.
    pub fn flush_here(&mut self, runtime: &tokio::runtime::Handle) -> Result<()> {
        let Some(batch) = self.take_batch()? else {
            return Ok(());
        };
        let bytes = encode_part(self.schema.clone(), batch)?;
        runtime.block_on(self.put_part(bytes))
    }

    /// The buffered rows as one record batch, if there are any; fails when
    /// a row could not be kept (such a base must never be finished).
    fn take_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let Some(why) = &self.failed {
            return Err(Error::Internal(format!("keeping a copied row: {why}")));
        }
        if self.buffered == 0 {
            return Ok(None);
        }
        let arrays: Vec<ArrayRef> = self
            .builders
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map(Some)
            .map_err(|e| Error::Internal(format!("building a base snapshot part: {e}")))
    }

    /// Stores an encoded part of the buffered rows.
    async fn put_part(&mut self, bytes: Vec<u8>) -> Result<()> {
        let file = format!(
            "part-{:016X}-{:012}.parquet",
            self.boundary.0, self.first_row
        );
        let path = self.dir().clone().join(file.as_str());
        let part = PutPayload::from(bytes);
        put(&self.archive, &path, part, "base snapshot part").await?;
        self.first_row += self.buffered as u64;
        self.buffered = 0;
        crate::failpoint::hit("base.part_written");
        Ok(())
    }

    fn dir(&self) -> object_store::path::Path {
        base_dir(
            self.archive.prefix(),
            self.database,
            self.relation.oid,
            self.boundary,
        )
    }

    /// Writes the last part and the manifest that makes the base usable.
    pub async fn finish(mut self) -> Result<Manifest> {
        self.flush().await?;
        use futures_util::TryStreamExt;
        let dir = self.dir();
        let listed: Vec<object_store::ObjectMeta> = self
            .archive
            .store()
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| {
                Error::Internal(format!(
                    "listing base snapshot {} of {}: {e}",
                    self.archive.relative(&dir),
                    self.archive.url()
                ))
            })?;
        let mut parts = Vec::new();
        for meta in listed {
            let Some(name) = meta.location.filename().map(str::to_string) else {
                continue;
            };
            let Some(lsn) = part_lsn(&name) else {
                continue;
            };
            let rows = super::read::part_rows(&self.archive, &meta.location).await?;
            parts.push(Part {
                file: name,
                lsn,
                rows,
            });
        }
        parts.sort_by(|a, b| a.file.cmp(&b.file));
        let manifest = Manifest {
            v: 1,
            database: self.database,
            relid: self.relation.oid,
            boundary: self.boundary,
            restart_lsn: self.restart_lsn,
            from_lsn: parts.iter().map(|p| p.lsn).min().unwrap_or(self.boundary),
            rows: parts.iter().map(|p| p.rows).sum(),
            relation: self.relation,
            columns: self.columns,
            parts,
            system_id: self.system_id,
        };
        let text = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| Error::Internal(format!("writing the base manifest: {e}")))?;
        crate::failpoint::hit("base.before_manifest");
        let path = dir.clone().join("manifest.json");
        let manifest_text = PutPayload::from(text);
        put(&self.archive, &path, manifest_text, "the base manifest").await?;
        tracing::info!(
            archive = %self.archive.url(),
            object = %self.archive.relative(&path),
            rows = manifest.rows,
            "base snapshot written"
        );
        if let Some(keep) = self.keep {
            if let Err(e) = retire_older(&self.archive, self.database, manifest.relid, keep).await {
                tracing::warn!(error = %e.describe(), "could not remove older base snapshots");
            }
        }
        Ok(manifest)
    }
}

/// Removes the bases of a table but its newest `keep`, and what unfinished
/// bases older than the oldest kept one left: each manifest first (the
/// base is then unusable), then its parts.
async fn retire_older(archive: &Archive, database: u32, relid: u32, keep: u32) -> Result<()> {
    use futures_util::TryStreamExt;
    let bases = super::find_bases(archive, database, relid).await?;
    let Some(oldest_kept) = bases.get(keep as usize - 1).map(|m| m.boundary) else {
        return Ok(());
    };
    let dir = super::table_dir(archive.prefix(), database, relid);
    let listed: Vec<object_store::ObjectMeta> = archive
        .store()
        .list(Some(&dir))
        .try_collect()
        .await
        .map_err(|e| Error::Internal(format!("listing base snapshots: {e}")))?;
    let boundary_of = |location: &object_store::path::Path| {
        let text = location.as_ref();
        let parent = text.rsplit('/').nth(1)?;
        u64::from_str_radix(parent, 16).ok().map(Lsn)
    };
    let mut old: Vec<object_store::path::Path> = listed
        .into_iter()
        .map(|m| m.location)
        .filter(|l| boundary_of(l).is_some_and(|b| b < oldest_kept))
        .collect();
    // Manifests first: a base without one is never used.
    old.sort_by_key(|l| l.filename() != Some("manifest.json"));
    let removed = old
        .iter()
        .filter(|l| l.filename() == Some("manifest.json"))
        .count();
    for location in &old {
        archive.store().delete(location).await.map_err(|e| {
            Error::Internal(format!("removing {}: {e}", archive.relative(location)))
        })?;
    }
    if removed > 0 {
        tracing::info!(removed, keep, "removed older base snapshots of the table");
    }
    Ok(())
}

/// The LSN in a part's name: `part-<lsn hex>-<first row>.parquet`.
/// One part's rows as a Parquet file.
fn encode_part(schema: Arc<Schema>, batch: RecordBatch) -> Result<Vec<u8>> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .build();
    let failed = |e: parquet::errors::ParquetError| {
        Error::Internal(format!("writing a base snapshot part: {e}"))
    };
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(props)).map_err(failed)?;
    writer.write(&batch).map_err(failed)?;
    writer.into_inner().map_err(failed)
}

fn part_lsn(name: &str) -> Option<Lsn> {
    let hex = name.strip_prefix("part-")?.split('-').next()?;
    u64::from_str_radix(hex, 16).ok().map(Lsn)
}

/// Stores `payload` (`what` it is) at `path` in `archive`.
async fn put(
    archive: &Archive,
    path: &object_store::path::Path,
    payload: PutPayload,
    what: &str,
) -> Result<()> {
    archive
        .store()
        .put(path, payload)
        .await
        .map(|_| ())
        .map_err(|e| {
            Error::Internal(format!(
                "storing {what} {} of {}: {e}",
                archive.relative(path),
                archive.url()
            ))
        })
}
