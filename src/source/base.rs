//! A base snapshot as a history source: the rows of a table as of an LSN,
//! kept in the archive as Parquet parts, each part a batch versioned
//! `(part LSN, 0)` with its file name as the cursor.
//!
//! A part that cannot be read, or that does not hold what the manifest
//! says, is a gap in history like a missing WAL segment: the backfill takes
//! a snapshot instead.

use std::sync::Arc;
use std::time::Instant;

use walfill_core::{Relation, RowChange, Version};
use walfill_replay::archive::Archive;

use crate::apply::{Batch, Cursor, Era, Fold, Folder, HistorySource, Writes};
use crate::base::{read_part, relation_of, Manifest};
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::progress::Progress;

/// The parts of a base after `done`, as batches.
pub struct BaseSource {
    archive: Archive,
    manifest: Manifest,
    relation: Arc<Relation>,
    folder: Folder,
    next_part: usize,
    progress: Option<Progress>,
    started: Instant,
}

impl BaseSource {
    /// The parts of `manifest` whose file name sorts after `done`.
    pub fn new(
        archive: Archive,
        manifest: Manifest,
        plan: Plan,
        done: Option<&str>,
        progress: Progress,
    ) -> BaseSource {
        let next_part = manifest
            .parts
            .iter()
            .position(|p| done.is_none_or(|d| p.file.as_str() > d))
            .unwrap_or(manifest.parts.len());
        BaseSource {
            archive,
            relation: relation_of(&manifest),
            folder: Folder::new(plan, Era::Past),
            manifest,
            next_part,
            progress: Some(progress),
            started: Instant::now(),
        }
    }
}

impl HistorySource for BaseSource {
    async fn next(&mut self) -> Result<Option<Batch>> {
        let Some(part) = self.manifest.parts.get(self.next_part).cloned() else {
            if let Some(progress) = self.progress.take() {
                progress.finish();
            }
            return Ok(None);
        };
        self.next_part += 1;
        self.started = Instant::now();
        let rows = read_part(&self.archive, &self.manifest, &part, &self.relation).await?;
        if rows.len() as u64 != part.rows {
            return Err(Error::History(format!(
                "base snapshot part {} holds {} rows where its manifest says {}",
                part.file,
                rows.len(),
                part.rows
            )));
        }
        let count = rows.len() as i64;
        let version = Version::snapshot(part.lsn);
        let mut fold = Fold::default();
        for new in rows {
            let change = RowChange::Insert {
                relation: self.relation.clone(),
                new,
            };
            self.folder.fold(&mut fold, version, None, &change)?;
        }
        Ok(Some(Batch {
            writes: Writes::Folded(fold),
            truncate: None,
            truncate_xid: None,
            changes: 0,
            cursor: Some(Cursor::BasePart {
                file: part.file,
                rows: count,
            }),
        }))
    }

    async fn stored(&mut self, cursor: &Cursor) -> Result<()> {
        if let (Cursor::BasePart { rows, .. }, Some(progress)) = (cursor, self.progress.as_mut()) {
            progress.advance(u64::try_from(*rows).unwrap_or(0));
        }
        Ok(())
    }
}
