//! Finding base snapshots in the archive and reading their rows.

use arrow::array::{Array, StringArray};
use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};
use walfill_replay::archive::Archive;
use walfill_replay::change::{Datum, Relation};
use walfill_replay::decode::RelationSchema;

use super::{table_dir, Manifest, Part};
use crate::error::{Error, Result};

/// A base snapshot that cannot be read is a gap in history: the backfill
/// takes a snapshot instead.
fn storage(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::history(format!("base snapshot: {what}: {e}"))
}

/// The usable bases of table `relid` of database `database`, newest first.
pub async fn find_bases(archive: &Archive, database: u32, relid: u32) -> Result<Vec<Manifest>> {
    let dir = table_dir(archive.prefix(), database, relid);
    manifests_under(archive, &dir, relid, Some(database)).await
}

/// The usable bases of table `relid` in any database of the store, newest
/// first (for work that knows the table but not the source's database).
pub async fn find_bases_of(archive: &Archive, relid: u32) -> Result<Vec<Manifest>> {
    let dir = archive.prefix().clone().join("base");
    manifests_under(archive, &dir, relid, None).await
}

/// The manifests of table `relid`'s bases listed under `dir` (of
/// `database`, or of any), newest first. Objects are named
/// `.../base/<database>/<relid>/<boundary>/manifest.json`: only those of
/// the table are read.
async fn manifests_under(
    archive: &Archive,
    dir: &Path,
    relid: u32,
    database: Option<u32>,
) -> Result<Vec<Manifest>> {
    let listed: Vec<object_store::ObjectMeta> = archive
        .store()
        .list(Some(dir))
        .try_collect()
        .await
        .map_err(|e| {
            storage(
                format!("listing base snapshots under {}", archive.relative(dir)),
                e,
            )
        })?;
    let table = relid.to_string();
    let mut manifests = Vec::new();
    for meta in listed {
        let parts: Vec<&str> = meta.location.as_ref().rsplit('/').collect();
        if parts.first() != Some(&"manifest.json") || parts.get(2) != Some(&table.as_str()) {
            continue;
        }
        let bytes = get(archive, &meta.location).await?;
        match serde_json::from_slice::<Manifest>(&bytes) {
            Ok(m) if m.v == 1 && m.relid == relid && database.is_none_or(|d| m.database == d) => {
                manifests.push(m)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(object = %archive.relative(&meta.location), error = %e, "ignoring an unreadable base manifest")
            }
        }
    }
    manifests.sort_by_key(|m| std::cmp::Reverse(m.boundary));
    Ok(manifests)
}

async fn get(archive: &Archive, path: &Path) -> Result<Bytes> {
    archive
        .store()
        .get(path)
        .await
        .map_err(|e| storage(format!("reading {}", archive.relative(path)), e))?
        .bytes()
        .await
        .map_err(|e| storage(format!("reading {}", archive.relative(path)), e))
}

/// Rows in a stored part (from its footer).
pub(super) async fn part_rows(archive: &Archive, path: &Path) -> Result<u64> {
    let bytes = get(archive, path).await?;
    let reader = SerializedFileReader::new(bytes).map_err(|e| storage(path, e))?;
    Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
}

/// Reads the rows of `part` of the base `manifest`, each given to `each`
/// with one datum per column of `relation` (by name; columns the base
/// lacks are NULL); how many there were. Blocks (the object is
/// fetched on `runtime`): the rows are decoded on the calling thread, one
/// record batch at a time, and the memory they take is freed there too.
pub fn read_part(
    runtime: &tokio::runtime::Handle,
    archive: &Archive,
    manifest: &Manifest,
    part: &Part,
    relation: &Relation,
    mut each: impl FnMut(Vec<Datum>) -> Result<()>,
) -> Result<u64> {
    let dir = super::base_dir(
        archive.prefix(),
        manifest.database,
        manifest.relid,
        manifest.boundary,
    );
    let positions: Vec<Option<usize>> = relation
        .columns
        .iter()
        .map(|c| manifest.columns.iter().position(|m| *m == c.name))
        .collect();
    let path = dir.clone().join(part.file.as_str());
    let bytes = runtime.block_on(get(archive, &path))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| storage(&path, e))?;
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| storage(&path, e))?;
        let columns: Vec<Option<&StringArray>> = positions
            .iter()
            .map(|p| match p {
                None => Ok(None),
                Some(p) if *p >= batch.num_columns() => Err(storage(
                    &path,
                    format!(
                        "{} columns where its manifest names {}",
                        batch.num_columns(),
                        p + 1
                    ),
                )),
                Some(p) => batch
                    .column(*p)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .map(Some)
                    .ok_or_else(|| storage(&path, format!("column {} is not text", p + 1))),
            })
            .collect::<Result<_>>()?;
        for i in 0..batch.num_rows() {
            each(
                columns
                    .iter()
                    .map(|c| match c {
                        Some(array) if !array.is_null(i) => Datum::Text(array.value(i).to_string()),
                        _ => Datum::Null,
                    })
                    .collect(),
            )?;
            rows += 1;
        }
    }
    Ok(rows)
}

/// The relation a base's rows belong to, as the decoder describes it.
pub fn relation_of(manifest: &Manifest) -> std::sync::Arc<Relation> {
    RelationSchema::new(manifest.relation.clone()).relation
}
