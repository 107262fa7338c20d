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
    created_by: FxHashMap<u32, Vec<RelFileLocator>>,
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
            txns: FxHashMap::default(),
            bytes: 0,
            limit,
        }
    }

    /// Transaction `top` created `file`.
    pub(super) fn created(&mut self, top: u32, file: RelFileLocator) {
        if top != 0 {
            self.created.insert(file, top);
            self.created_by.entry(top).or_default().push(file);
        }
    }

    /// The files `top` created, in WAL order.
    pub(super) fn created_by(&self, top: u32) -> &[RelFileLocator] {
        self.created_by.get(&top).map_or(&[], Vec::as_slice)
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
