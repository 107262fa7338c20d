//! Rows written to a file before the catalog journal describes it, held
//! until it does.
//!
//! `CREATE TABLE AS` and `SELECT INTO` write a new table's rows in the
//! statement that creates it, and the journal's message describing the
//! table can only follow the statement (at `ddl_command_end`), in the same
//! transaction. PostgreSQL's own decoding sees the table through the
//! transaction's catalog snapshot and prints the rows; so does walfill: the
//! rows a transaction writes to a file it created itself wait here, raw,
//! until a journal message of the same transaction names the file. Held
//! rows are bounded in memory: past the bound, the transaction's held rows
//! are dropped and the table is reported as not decoded, as before.

use rustc_hash::FxHashMap;

use crate::lsn::Lsn;
use crate::tuple::ToastChunks;
use crate::wal::{RelFileLocator, TupleFragment};

/// One insert record's rows, as logged.
#[derive(Debug)]
pub(super) struct HeldRows {
    /// The (sub)transaction that wrote them.
    pub(super) xid: u32,
    /// The record's LSN.
    pub(super) lsn: Lsn,
    /// The new tuples.
    pub(super) tuples: Vec<TupleFragment>,
    /// TOAST chunks logged just before the record (empty when a previous
    /// record of the same multi-insert took them).
    pub(super) toast: ToastChunks,
}

/// How many files created without an xid are remembered at most.
const MAX_ORPHANS: usize = 4096;

/// A relation file a transaction created (an smgr create record of a main
/// fork).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Created {
    /// The file.
    pub(super) file: RelFileLocator,
    /// The subtransaction that created it (0: one without an xid yet).
    pub(super) subxid: u32,
    /// The create record's LSN.
    pub(super) lsn: Lsn,
    /// Whether a record has written a page of it since: an index build
    /// writes its metapage at once, a table's new (empty) heap and TOAST
    /// table get no page until a row comes.
    pub(super) written: bool,
    /// Whether a write showed it is no table's: an index's or a sequence's
    /// record, or a page image with special space.
    pub(super) not_a_table: bool,
}

#[derive(Default)]
struct TxnHeld {
    /// Rows per file, in WAL order.
    files: FxHashMap<RelFileLocator, Vec<HeldRows>>,
    /// Past the bound: nothing more is held for this transaction.
    overflowed: bool,
}

/// The rows held, per top-level transaction.
pub(super) struct Held {
    /// Files created by each open transaction.
    created: FxHashMap<RelFileLocator, u32>,
    /// The same, per transaction, in WAL order.
    created_by: FxHashMap<u32, Vec<Created>>,
    /// Files created by a subtransaction that had no xid yet (its first
    /// write: a TRUNCATE in a savepoint of a table the transaction already
    /// locked), in WAL order, until a transaction adopts them.
    orphans: Vec<Created>,
    txns: FxHashMap<u32, TxnHeld>,
    bytes: usize,
    limit: usize,
}

impl Held {
    /// Holds at most `limit` bytes of rows.
    pub(super) fn new(limit: usize) -> Held {
        Held {
            created: FxHashMap::default(),
            created_by: FxHashMap::default(),
            orphans: Vec::new(),
            txns: FxHashMap::default(),
            bytes: 0,
            limit,
        }
    }

    /// Subtransaction `subxid` of `top` created `file` at `lsn` (both 0:
    /// a subtransaction without an xid did).
    pub(super) fn created(&mut self, top: u32, subxid: u32, file: RelFileLocator, lsn: Lsn) {
        let created = Created {
            file,
            subxid,
            lsn,
            written: false,
            not_a_table: false,
        };
        if top == 0 {
            if self.orphans.len() == MAX_ORPHANS {
                self.orphans.remove(0);
            }
            self.orphans.push(created);
        } else {
            self.created.insert(file, top);
            self.created_by.entry(top).or_default().push(created);
        }
    }

    /// A record wrote a page of `file`; `not_a_table` tells (only asked for
    /// a file an open transaction created) whether it showed the file is no
    /// table's.
    pub(super) fn wrote(&mut self, file: &RelFileLocator, not_a_table: impl FnOnce() -> bool) {
        let created = match self.created.get(file) {
            Some(top) => self
                .created_by
                .get_mut(top)
                .and_then(|files| files.iter_mut().rev().find(|c| c.file == *file)),
            None => self.orphans.iter_mut().rev().find(|c| c.file == *file),
        };
        if let Some(c) = created {
            c.written = true;
            c.not_a_table = c.not_a_table || not_a_table();
        }
    }

    /// Whether any open transaction created a file (cheap: asked of every
    /// record).
    pub(super) fn creating(&self) -> bool {
        !self.created.is_empty() || !self.orphans.is_empty()
    }

    /// The files `top` created, in WAL order.
    pub(super) fn created_by(&self, top: u32) -> &[Created] {
        self.created_by.get(&top).map_or(&[], Vec::as_slice)
    }

    /// The files `top` created before `lsn`, with the files created before
    /// it by subtransactions without an xid, in WAL order.
    pub(super) fn created_before(&self, top: u32, lsn: Lsn) -> Vec<Created> {
        let mut files: Vec<Created> = self
            .created_by(top)
            .iter()
            .chain(&self.orphans)
            .filter(|c| c.lsn < lsn)
            .copied()
            .collect();
        files.sort_by_key(|c| c.lsn);
        files
    }

    /// Subtransaction `subxid` of `top` turns out to have created `files`,
    /// logged without an xid.
    pub(super) fn adopt(&mut self, top: u32, subxid: u32, files: &[RelFileLocator]) {
        let mut adopted = Vec::new();
        self.orphans.retain(|c| {
            let take = files.contains(&c.file);
            if take {
                adopted.push(Created { subxid, ..*c });
            }
            !take
        });
        if adopted.is_empty() || top == 0 {
            return;
        }
        let own = self.created_by.entry(top).or_default();
        for c in adopted {
            self.created.insert(c.file, top);
            own.push(c);
        }
        own.sort_by_key(|c| c.lsn);
    }

    /// Forgets files created without an xid before `lsn`: the statement
    /// that created them is long over.
    pub(super) fn forget_orphans(&mut self, lsn: Lsn) {
        self.orphans.retain(|c| c.lsn >= lsn);
    }

    /// Whether rows `top` writes to `file` (which no description names) are
    /// to be held.
    pub(super) fn may_hold(&self, top: u32, file: &RelFileLocator) -> bool {
        self.created.get(file) == Some(&top) && !self.txns.get(&top).is_some_and(|t| t.overflowed)
    }

    /// Holds `rows` written by `top` to `file`.
    pub(super) fn hold(&mut self, top: u32, file: RelFileLocator, rows: HeldRows) {
        let size =
            rows.tuples.iter().map(|t| t.data.len() + 32).sum::<usize>() + rows.toast.bytes_held();
        let txn = self.txns.entry(top).or_default();
        if self.bytes + size > self.limit {
            let freed: usize = txn.files.values().flatten().map(held_size).sum();
            self.bytes -= freed;
            txn.files.clear();
            txn.overflowed = true;
            return;
        }
        self.bytes += size;
        txn.files.entry(file).or_default().push(rows);
    }

    /// Takes the rows of `top`'s files that `described` now names.
    pub(super) fn take_described(
        &mut self,
        top: u32,
        described: impl Fn(&RelFileLocator) -> bool,
    ) -> Vec<(RelFileLocator, Vec<HeldRows>)> {
        let Some(txn) = self.txns.get_mut(&top) else {
            return Vec::new();
        };
        let files: Vec<RelFileLocator> =
            txn.files.keys().filter(|f| described(f)).copied().collect();
        let mut taken = Vec::with_capacity(files.len());
        for file in files {
            if let Some(rows) = txn.files.remove(&file) {
                self.bytes -= rows.iter().map(held_size).sum::<usize>();
                taken.push((file, rows));
            }
        }
        taken
    }

    /// `top` ended: forgets what it held, returning the rows no message
    /// described (file, records, first LSN).
    pub(super) fn finish(&mut self, top: u32) -> Vec<(RelFileLocator, u64, Lsn)> {
        self.created.retain(|_, t| *t != top);
        self.created_by.remove(&top);
        let Some(txn) = self.txns.remove(&top) else {
            return Vec::new();
        };
        txn.files
            .into_iter()
            .map(|(file, rows)| {
                self.bytes -= rows.iter().map(held_size).sum::<usize>();
                let first = rows.first().map_or(Lsn::INVALID, |r| r.lsn);
                (file, rows.len() as u64, first)
            })
            .collect()
    }

    /// Forgets transactions that can no longer be running.
    pub(super) fn forget(&mut self, gone: impl Fn(u32) -> bool) {
        self.created.retain(|_, t| !gone(*t));
        self.created_by.retain(|t, _| !gone(*t));
        let ended: Vec<u32> = self.txns.keys().copied().filter(|t| gone(*t)).collect();
        for top in ended {
            self.finish(top);
        }
    }
}

fn held_size(rows: &HeldRows) -> usize {
    rows.tuples.iter().map(|t| t.data.len() + 32).sum::<usize>() + rows.toast.bytes_held()
}
