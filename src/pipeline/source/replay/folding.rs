//! The fold thread of a replay: the table's changes, versioned by the
//! decoding thread, folded into an [`ExternalFold`] on a thread of their
//! own (decoding and folding each take a core), on top of the base
//! snapshot's rows; then, once the decoding thread says the history is
//! complete, the merged rows handed to the apply loop in batches.

use std::sync::mpsc::Receiver;

use tokio::sync::mpsc;
use walfill_core::{Lsn, RowChange, Version};
use walfill_replay::archive::Archive;
use walfill_replay::decode::NewRelation;

use crate::error::{Error, Result};
use crate::pipeline::apply::{Batch, Cursor, Entry, ExternalFold, Spilled, Writes};
use crate::pipeline::base::{read_part, relation_of, BaseWriter, Manifest};

/// What the decoding thread sends the fold thread.
pub(super) enum Folding {
    /// Row changes of the table, each with its version, in commit order.
    Changes(Vec<(Version, RowChange)>),
    /// A TRUNCATE of the table.
    Truncate(Version),
    /// Decoding has read this far: tell the apply loop (nothing is stored
    /// yet).
    Read {
        /// The end of the last transaction read.
        lsn: Lsn,
        /// WAL read per second, recently.
        rate: f64,
    },
    /// Every record before the boundary is decoded and the history is
    /// usable: store the merged rows after `loaded`, `batch_rows` a batch.
    Load {
        /// Keys up to this one are stored already.
        loaded: Option<Vec<String>>,
        /// Rows per batch.
        batch_rows: usize,
        /// The table at the boundary, when its every column was decoded
        /// (the merged rows can be a base snapshot); else why not.
        whole: std::result::Result<NewRelation, String>,
    },
}

/// Where the fold thread's rows go.
pub(super) struct FoldThread {
    pub(super) fold: ExternalFold,
    pub(super) batches: mpsc::Sender<Batch>,
    pub(super) base: Option<(Archive, Box<Manifest>, tokio::runtime::Handle)>,
    /// The base snapshot this replay leaves at its boundary, if any: the
    /// merged rows go to it as they go to the apply loop.
    pub(super) leaves: Option<(BaseWriter, tokio::runtime::Handle)>,
    /// Whether the merged rows go to the apply loop (else only their
    /// count does: a compaction keeps them in the base alone).
    pub(super) store: bool,
}

impl FoldThread {
    /// Folds what arrives until the decoding thread is done (it drops its
    /// sender, or asks for the load); returns what the fold spilled.
    pub(super) fn run(mut self, messages: Receiver<Folding>) -> Result<Spilled> {
        if let Some((archive, manifest, runtime)) = self.base.take() {
            fold_base(&runtime, &archive, &manifest, &mut self.fold)?;
        }
        let mut changes = 0;
        for message in messages {
            match message {
                Folding::Changes(list) => {
                    changes += list.len() as i64;
                    for (version, change) in list {
                        self.fold.add(version, change)?;
                    }
                }
                Folding::Truncate(version) => {
                    changes += 1;
                    self.fold.truncate(version);
                }
                Folding::Read { lsn, rate } => {
                    self.send(Batch {
                        writes: Writes::None,
                        truncate: None,
                        truncate_xid: None,
                        changes: std::mem::take(&mut changes),
                        cursor: Some(Cursor::Replayed {
                            committed: None,
                            read: lsn,
                            rows: 0,
                            rate,
                        }),
                    })?;
                }
                Folding::Load {
                    loaded,
                    batch_rows,
                    whole,
                } => {
                    let spilled = self.fold.spilled();
                    self.load(loaded.as_deref(), batch_rows.max(1), changes, whole)?;
                    return Ok(spilled);
                }
            }
        }
        Ok(self.fold.spilled())
    }

    fn send(&self, batch: Batch) -> Result<()> {
        self.batches
            .blocking_send(batch)
            .map_err(|_| Error::Internal("the apply loop stopped".into()))
    }

    /// Merges the fold and hands each key's final row after `loaded` to
    /// the apply loop, `batch_rows` a batch.
    fn load(
        self,
        loaded: Option<&[String]>,
        batch_rows: usize,
        mut changes: i64,
        whole: std::result::Result<NewRelation, String>,
    ) -> Result<()> {
        let FoldThread {
            fold,
            batches,
            leaves,
            store,
            ..
        } = self;
        let mut leaves = match (leaves, whole) {
            (Some((mut writer, runtime)), Ok(relation)) => match writer.adopt(&relation) {
                None => Some((writer, runtime)),
                Some(why) => no_base(&why),
            },
            (Some(_), Err(why)) => no_base(&why),
            (None, _) => None,
        };
        let spilled = fold.spilled();
        let truncated = fold.truncated();
        tracing::info!(
            runs = spilled.runs,
            spilled_mib = spilled.peak_bytes >> 20,
            "decoded up to the boundary; storing each key's final row"
        );
        let mut send = |writes: Writes, last_key: Vec<String>, count: i64| -> Result<()> {
            let batch = Batch {
                writes,
                truncate: truncated,
                truncate_xid: None,
                changes: std::mem::take(&mut changes),
                cursor: Some(Cursor::Merged {
                    last_key,
                    rows: count,
                }),
            };
            batches
                .blocking_send(batch)
                .map_err(|_| Error::Internal("the apply loop stopped".into()))
        };
        let mut send_rows = |rows: Vec<(Vec<String>, Entry)>| -> Result<()> {
            let Some(last_key) = rows.last().map(|(k, _)| k.clone()) else {
                return Ok(());
            };
            let count = rows.len() as i64;
            send(Writes::Merged(rows), last_key, count)
        };
        let mut rows = Vec::with_capacity(if store { batch_rows } else { 0 });
        // Without storing: the rows counted, and the last key.
        let mut counted: (i64, Option<Vec<String>>) = (0, None);
        fold.finish().for_each_row(loaded, |key, entry| {
            if let Some((writer, runtime)) = leaves.as_mut() {
                writer.push(&entry.values);
                if writer.part_due() {
                    if let Err(e) = writer.flush_if_due_here(runtime) {
                        leaves = no_base(&e.describe());
                    }
                }
            }
            if !store {
                counted = (counted.0 + 1, Some(key));
                return Ok(());
            }
            rows.push((key, entry));
            if rows.len() >= batch_rows {
                send_rows(std::mem::replace(&mut rows, Vec::with_capacity(batch_rows)))?;
            }
            Ok(())
        })?;
        send_rows(rows)?;
        if let (count, Some(last_key)) = counted {
            send(Writes::None, last_key, count)?;
        }
        if let Some((writer, runtime)) = leaves {
            // A base is a help for later versions: one that cannot be
            // written costs this one nothing.
            let mut writer = writer;
            let written = writer
                .flush_here(&runtime)
                .and_then(|()| runtime.block_on(writer.finish()));
            if let Err(e) = written {
                no_base::<()>(&e.describe());
            }
        }
        Ok(())
    }
}

/// Says why this replay leaves no base snapshot.
fn no_base<T>(why: &str) -> Option<T> {
    tracing::info!(reason = %why, "this replay leaves no base snapshot");
    None
}

/// Folds the rows of the base snapshot `manifest`, each an insert at its
/// part's position.
fn fold_base(
    runtime: &tokio::runtime::Handle,
    archive: &Archive,
    manifest: &Manifest,
    fold: &mut ExternalFold,
) -> Result<()> {
    let relation = relation_of(manifest);
    for part in &manifest.parts {
        let version = Version::snapshot(part.lsn);
        let rows = read_part(runtime, archive, manifest, part, &relation, |new| {
            let change = RowChange::Insert {
                relation: relation.clone(),
                new,
            };
            fold.add(version, change)
        })?;
        if rows != part.rows {
            return Err(Error::history(format!(
                "base snapshot part {} holds {} rows where its manifest says {}",
                part.file, rows, part.rows
            )));
        }
    }
    Ok(())
}
