//! A fold larger than memory: replayed changes folded to one write per key
//! in a bounded amount of memory, spilling sorted runs to local disk, and
//! merged at the end so that each key's final row is written once.
//!
//! Changes arrive in commit order. While the in-memory [`Fold`] is under
//! its budget, changes fold into it as in the live stream. When it
//! outgrows the budget, its entries are written in key order as a [`Run`]
//! and the fold starts empty again. [`ExternalFold::finish`] merges the
//! runs and what is still in memory: for each key, its entries from the
//! oldest run to the newest, the newer winning.
//!
//! An update can leave a TOASTed value unchanged (it arrives as
//! [`Datum::Unchanged`]); the value is the one the row had before:
//! - for a row whose key stays, that is the key's own earlier entry, in
//!   memory or in an earlier run: the merge carries it over;
//! - for a row whose key changed, the earlier row is another key's, so
//!   its value is looked up at once in memory and then in the runs, newest
//!   first. A value no earlier entry holds (the row predates the replay)
//!   stays unknown, and such an entry never takes values from its own
//!   key's past: that belonged to another row.
//!
//! A TRUNCATE removes every row stored before it: everything folded so far
//! goes, runs included.

mod run;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;

use walfill_core::{Datum, RowChange, Version};

use super::fold::{Entry, Fold, Folder, Op, Sorted};
use crate::error::{Error, Result};
use run::{Run, RunReader};

/// A fold of one plan's replayed changes that spills to disk.
pub struct ExternalFold {
    folder: Folder,
    fold: Fold,
    runs: Vec<Run>,
    budget: usize,
    dir: PathBuf,
    /// The newest TRUNCATE folded.
    truncate: Option<Version>,
    spilled: Spilled,
}

/// The archived WAL a replay (or compaction) read: what bases and
/// compaction save, reported in the `filled` event and in `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalRead {
    /// Segments read whole.
    pub segments: u64,
    /// Segments whose summary stood in for them.
    pub summarized: u64,
    /// Bytes of WAL decoded.
    pub bytes: u64,
    /// Where the first segment read starts.
    pub first: Option<walfill_core::Lsn>,
}

/// How much an external fold wrote to disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spilled {
    /// Runs written.
    pub runs: usize,
    /// Bytes written, in all (runs dropped by a TRUNCATE included).
    pub bytes: u64,
    /// The most bytes on disk at once.
    pub peak_bytes: u64,
}

impl ExternalFold {
    /// A fold for `folder`'s plan in at most about `budget` bytes of
    /// memory, spilling into `dir`.
    pub fn new(folder: Folder, budget: usize, dir: PathBuf) -> ExternalFold {
        let mut fold = Fold::default();
        fold.track_fills();
        ExternalFold {
            folder,
            fold,
            runs: Vec::new(),
            budget: budget.max(1),
            dir,
            truncate: None,
            spilled: Spilled::default(),
        }
    }

    /// Folds one row change (not a TRUNCATE) with its version.
    pub fn add(&mut self, version: Version, change: RowChange) -> Result<()> {
        if !self.folder.fold(&mut self.fold, version, None, change)? {
            return Ok(());
        }
        for key in self.fold.take_pending_fills() {
            self.fill_from_runs(&key)?;
        }
        if self.fold.bytes() >= self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// A TRUNCATE at `version`: every row of an older version is gone.
    /// (Runs whose every entry is older go at once; the merge leaves out
    /// the other rows older than the newest TRUNCATE.)
    pub fn truncate(&mut self, version: Version) {
        let kept: Vec<_> = self
            .fold
            .drain()
            .filter(|(_, entry)| entry.version > version)
            .collect();
        for (key, entry) in kept {
            self.fold.restore(key, entry);
        }
        self.runs.retain(|run| run.newest() > version);
        self.truncate = self.truncate.max(Some(version));
    }

    /// The newest TRUNCATE folded.
    pub fn truncated(&self) -> Option<Version> {
        self.truncate
    }

    /// What was written to disk so far.
    pub fn spilled(&self) -> Spilled {
        self.spilled
    }

    /// Gives the entry for `key` (whose key changed from its `fill_key`)
    /// the values its earlier row left in the runs.
    fn fill_from_runs(&mut self, key: &[String]) -> Result<()> {
        let Some(entry) = self.fold.entry(key) else {
            return Ok(());
        };
        let Some(fill_key) = entry.fill_key.clone() else {
            return Ok(());
        };
        let Some(past) = self.past(&fill_key)? else {
            return Ok(());
        };
        let filled = combine(
            Some(past),
            Entry {
                fill_key: None,
                ..entry.clone()
            },
        );
        self.fold.restore(
            key.to_vec(),
            Entry {
                values: filled.values,
                // Whatever is still unknown cannot come from this key's past.
                fill_key: Some(fill_key),
                ..entry
            },
        );
        Ok(())
    }

    /// The state `key` was left in by the runs, or `None` when none holds it.
    fn past(&self, key: &[String]) -> Result<Option<Entry>> {
        let mut found = Vec::new();
        for run in self.runs.iter().rev() {
            let Some(entry) = run.lookup(key).map_err(spill_error)? else {
                continue;
            };
            let complete = entry.op == Op::Delete
                || entry.fill_key.is_some()
                || !entry.values.contains(&Datum::Unchanged);
            found.push(entry);
            if complete {
                break;
            }
        }
        let state = found
            .into_iter()
            .rev()
            .fold(None, |state, e| Some(combine(state, e)));
        Ok(state.filter(|s| self.truncate.is_none_or(|t| s.version > t)))
    }

    /// Writes the in-memory entries as a run.
    fn spill(&mut self) -> Result<()> {
        let entries = self.fold.take_sorted();
        if entries.is_empty() {
            return Ok(());
        }
        let run = Run::write(&self.dir, entries.records()).map_err(spill_error)?;
        self.spilled.runs += 1;
        self.spilled.bytes += run.bytes();
        self.runs.push(run);
        crate::failpoint::hit("replay.spilled");
        let on_disk: u64 = self.runs.iter().map(Run::bytes).sum();
        self.spilled.peak_bytes = self.spilled.peak_bytes.max(on_disk);
        Ok(())
    }

    /// Merges the runs and the rest in memory: every key's final row, in
    /// key order (deleted keys left out).
    pub fn finish(mut self) -> Merged {
        Merged {
            memory: self.fold.take_sorted(),
            runs: self.runs,
            truncate: self.truncate,
        }
    }
}

fn spill_error(e: std::io::Error) -> Error {
    Error::Internal(format!(
        "spilling replayed rows to local disk (backfill.spill_dir): {e}"
    ))
}

/// Two entries of one key, `earlier` folded before `later`: the one of
/// the newer version wins (the later one, unless a replay's base snapshot
/// part was newer), taking the values it left unchanged from the other,
/// if it may and that is a row.
fn combine(earlier: Option<Entry>, later: Entry) -> Entry {
    let (older, mut newer) = match earlier {
        Some(earlier) if earlier.version > later.version => (Some(later), earlier),
        earlier => (earlier, later),
    };
    if newer.op != Op::Upsert
        || newer.fill_key.is_some()
        || !newer.values.contains(&Datum::Unchanged)
    {
        return newer;
    }
    if let Some(older) = older.filter(|o| o.op == Op::Upsert) {
        for (value, prior) in newer.values.iter_mut().zip(older.values) {
            if *value == Datum::Unchanged {
                *value = prior;
            }
        }
        if newer.values.contains(&Datum::Unchanged) {
            newer.fill_key = older.fill_key;
        }
    }
    newer
}

/// The merged rows of an external fold, in key order.
pub struct Merged {
    runs: Vec<Run>,
    memory: Sorted,
    truncate: Option<Version>,
}

impl Merged {
    /// Gives every key's final row after `after` (all when `None`) to
    /// `each`, in key order; deleted keys are left out.
    pub fn for_each_row(
        self,
        after: Option<&[String]>,
        mut each: impl FnMut(Vec<String>, Entry) -> Result<()>,
    ) -> Result<()> {
        let mut readers: Vec<RunReader<'_>> = self.runs.iter().map(Run::reader).collect();
        let mut memory = self.memory.into_entries();
        // Sources: the runs (oldest first), then memory (newest).
        let sources = readers.len() + 1;
        let mut advance = |source: usize| -> Result<Option<(Vec<String>, Entry)>> {
            match readers.get_mut(source) {
                Some(reader) => reader.next_entry().map_err(spill_error),
                None => Ok(memory.next()),
            }
        };
        let mut heads: Vec<Option<(Vec<String>, Entry)>> = Vec::with_capacity(sources);
        let mut heap: BinaryHeap<Reverse<(Vec<String>, usize)>> = BinaryHeap::new();
        for source in 0..sources {
            let head = advance(source)?;
            if let Some((key, _)) = &head {
                heap.push(Reverse((key.clone(), source)));
            }
            heads.push(head);
        }
        while let Some(Reverse((key, first))) = heap.pop() {
            let mut of_key = vec![first];
            while heap.peek().is_some_and(|Reverse((k, _))| *k == key) {
                if let Some(Reverse((_, source))) = heap.pop() {
                    of_key.push(source);
                }
            }
            of_key.sort_unstable();
            let mut state: Option<Entry> = None;
            for source in of_key {
                if let Some((_, entry)) = heads[source].take() {
                    state = Some(combine(state, entry));
                }
                let head = advance(source)?;
                if let Some((next, _)) = &head {
                    heap.push(Reverse((next.clone(), source)));
                }
                heads[source] = head;
            }
            let truncate = self.truncate;
            let Some(state) =
                state.filter(|s| s.op == Op::Upsert && truncate.is_none_or(|t| s.version > t))
            else {
                continue;
            };
            if after.is_some_and(|a| key.as_slice() <= a) {
                continue;
            }
            each(key, state)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
