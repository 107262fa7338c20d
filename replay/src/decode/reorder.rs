//! The reorder buffer: changes grouped by top-level transaction, emitted
//! whole at commit, in commit order.
//!
//! Subtransactions are folded into their top-level transaction as soon as
//! the WAL ties them to it; a rolled-back subtransaction's changes are
//! dropped, an aborted transaction's entirely. A subtransaction whose tie
//! to its parent was logged before decoding started (possible only when
//! decoding follows new relation files, see `DecodeOptions`) is buffered on
//! its own until the parent's commit record names it, and its changes are
//! then merged with the parent's in LSN order. A prepared transaction waits
//! for `COMMIT PREPARED`. Memory is bounded: when the buffered changes of
//! all transactions exceed the limit, the largest transaction's changes go
//! to a spill file, read back at its commit.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::path::PathBuf;

use crate::change::RowChange;
use crate::lsn::Lsn;
use crate::tuple::ToastChunks;
use crate::wal::RunningXacts;

use super::error::ReplayError;
use super::spill::{encode, FrameCursor, Frames, Registry, SpillFile};
use super::{Sink, TxnInfo};

pub(crate) use walfill_core::xid::precedes as xid_precedes;

/// One open top-level transaction.
#[derive(Debug, Default)]
pub(crate) struct Txn {
    /// Whether PostgreSQL would give it a snapshot (and print it even empty).
    pub(crate) has_snapshot: bool,
    /// Buffered changes, encoded as frames.
    frames: Frames,
    spill: Option<SpillFile>,
    aborted: HashSet<u32>,
    prepared: bool,
    /// TOAST chunks written by the transaction, for its next row.
    pub(crate) toast: ToastChunks,
    /// A speculative insert waiting for its confirmation: the subxid, the
    /// LSN of its record and the change, encoded.
    pub(crate) speculative: Option<(u32, u64, Vec<u8>)>,
    /// Subtransactions buffered before they were known to be this one's.
    orphans: Vec<Txn>,
}

impl Txn {
    fn memory(&self) -> usize {
        self.frames.capacity() + self.orphans.iter().map(Txn::memory).sum::<usize>()
    }
}

/// What the buffer holds and where decoding may start emitting.
#[derive(Debug)]
pub(crate) struct ReorderBuffer {
    txns: HashMap<u32, Txn>,
    parent: HashMap<u32, u32>,
    memory: usize,
    limit: usize,
    spill_dir: PathBuf,
    registry: Registry,
    /// Where a whole change is encoded before it joins its transaction's frames.
    scratch: Vec<u8>,
    /// Top-level xids preceding this began before decoding could see them
    /// whole; `None` until the first running-xacts record.
    horizon: Option<u32>,
    emit_from: Lsn,
    /// Transactions spilled so far (for statistics).
    pub(crate) spilled: u64,
}

impl ReorderBuffer {
    pub(crate) fn new(limit: usize, spill_dir: PathBuf, emit_from: Lsn) -> ReorderBuffer {
        ReorderBuffer {
            txns: HashMap::default(),
            parent: HashMap::default(),
            memory: 0,
            limit,
            spill_dir,
            registry: Registry::default(),
            scratch: Vec::new(),
            horizon: None,
            emit_from,
            spilled: 0,
        }
    }

    /// The top-level transaction of `xid`.
    pub(crate) fn top(&self, xid: u32) -> u32 {
        self.parent.get(&xid).copied().unwrap_or(xid)
    }

    /// Whether the changes of top-level `top` are decoded: it began after
    /// the decoder became able to see transactions whole.
    pub(crate) fn tracked(&self, top: u32) -> bool {
        top >= 3 && self.horizon.is_some_and(|h| !xid_precedes(top, h))
    }

    /// Whether decoding has reached a point from which transactions are
    /// seen whole.
    pub(crate) fn consistent(&self) -> bool {
        self.horizon.is_some()
    }

    /// The open transaction `top`, created if needed.
    pub(crate) fn txn(&mut self, top: u32) -> &mut Txn {
        self.txns.entry(top).or_default()
    }

    /// Ties subtransaction `sub` to top-level `top`.
    pub(crate) fn link(&mut self, sub: u32, top: u32, lsn: Lsn) -> Result<(), ReplayError> {
        if sub == top || sub == 0 || top == 0 {
            return Ok(());
        }
        let top = self.top(top);
        self.parent.insert(sub, top);
        if let Some(early) = self.txns.remove(&sub) {
            let wrote = early.spill.is_some() || !early.frames.is_empty();
            let parent = self.txn(top);
            parent.has_snapshot |= early.has_snapshot || wrote;
            if wrote {
                // Changes made before the tie was known: merged with the
                // parent's by LSN at its commit.
                parent.orphans.push(early);
            }
        }
        let _ = lsn;
        Ok(())
    }

    /// The number a relation is encoded with (see [`ChangeWriter`](super::spill::ChangeWriter)).
    pub(crate) fn relation_id(
        &mut self,
        relation: &std::sync::Arc<crate::change::Relation>,
    ) -> u32 {
        self.registry.id(relation)
    }

    /// Buffers `change`, made by `subxid` of `top` in the record at `lsn`.
    pub(crate) fn add(
        &mut self,
        top: u32,
        subxid: u32,
        lsn: Lsn,
        change: RowChange,
    ) -> Result<(), ReplayError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        encode(&mut scratch, &mut self.registry, &change);
        let added = self.add_encoded(top, subxid, lsn, &scratch);
        self.scratch = scratch;
        added
    }

    /// Buffers a change encoded by a [`ChangeWriter`](super::spill::ChangeWriter)
    /// (or [`encode`]), made by `subxid` of `top` in the record at `lsn`.
    pub(crate) fn add_encoded(
        &mut self,
        top: u32,
        subxid: u32,
        lsn: Lsn,
        change: &[u8],
    ) -> Result<(), ReplayError> {
        let txn = self.txns.entry(top).or_default();
        txn.has_snapshot = true;
        self.memory += txn.frames.push_change(subxid, lsn.0, change);
        if self.memory > self.limit {
            self.spill_largest()?;
        }
        Ok(())
    }

    fn spill_largest(&mut self) -> Result<(), ReplayError> {
        while self.memory > self.limit {
            let Some((&xid, _)) = self
                .txns
                .iter()
                .filter(|(_, t)| !t.frames.is_empty())
                .max_by_key(|(_, t)| t.frames.capacity())
            else {
                return Ok(());
            };
            let txn = self.txns.get_mut(&xid).expect("chosen above");
            if txn.spill.is_none() {
                txn.spill = Some(SpillFile::create(&self.spill_dir, xid)?);
                self.spilled += 1;
            }
            let spill = txn.spill.as_mut().expect("created above");
            self.memory -= txn.frames.spill_to(spill)?;
        }
        Ok(())
    }

    /// A subtransaction (and its listed children) rolled back, or a whole
    /// transaction aborted.
    pub(crate) fn abort(&mut self, xid: u32, subxacts: &[u32]) {
        let top = self.top(xid);
        if top == xid {
            if let Some(txn) = self.txns.remove(&xid) {
                if txn.prepared {
                    // A prepared transaction only ends with ABORT PREPARED.
                    self.txns.insert(xid, txn);
                    return;
                }
                self.memory -= txn.memory();
            }
            // Subtransactions not yet tied to it go with it. So do those
            // tied to a top-level transaction when `xid` is a subtransaction
            // that wrote nothing itself (so was never tied to it): its abort
            // record lists the children released into it.
            for sub in subxacts {
                if let Some(txn) = self.txns.remove(sub) {
                    self.memory -= txn.memory();
                } else if let Some(txn) = self.txns.get_mut(&self.top(*sub)) {
                    txn.aborted.insert(*sub);
                }
            }
            return;
        }
        let Some(txn) = self.txns.get_mut(&top) else {
            return;
        };
        // The subtransaction's buffered changes are skipped at commit.
        let gone = std::iter::once(xid).chain(subxacts.iter().copied());
        txn.aborted.extend(gone);
        if txn
            .speculative
            .as_ref()
            .is_some_and(|(s, _, _)| txn.aborted.contains(s))
        {
            txn.speculative = None;
        }
    }

    /// `PREPARE TRANSACTION`: keep it until COMMIT or ROLLBACK PREPARED.
    pub(crate) fn prepare(&mut self, xid: u32) {
        if let Some(txn) = self.txns.get_mut(&xid) {
            txn.prepared = true;
        }
    }

    /// `ROLLBACK PREPARED`.
    pub(crate) fn abort_prepared(&mut self, xid: u32) {
        if let Some(txn) = self.txns.remove(&xid) {
            self.memory -= txn.memory();
        }
    }

    /// A commit (or COMMIT PREPARED) of top-level `xid`: emits it whole to
    /// `sink` unless it is not one this decoding outputs.
    pub(crate) fn commit(
        &mut self,
        info: &TxnInfo,
        subxacts: &[u32],
        other_database: bool,
        sink: &mut dyn Sink,
    ) -> Result<bool, ReplayError> {
        for sub in subxacts {
            self.link(*sub, info.xid, info.commit_lsn)?;
        }
        let Some(mut txn) = self.txns.remove(&info.xid) else {
            return Ok(false);
        };
        self.memory -= txn.memory();
        for sub in subxacts {
            self.parent.remove(sub);
        }
        if other_database || !txn.has_snapshot || info.commit_lsn < self.emit_from {
            return Ok(false);
        }
        sink.begin(info).map_err(ReplayError::Sink)?;
        let mut orphans = std::mem::take(&mut txn.orphans);
        let mut aborted = std::mem::take(&mut txn.aborted);
        for orphan in &mut orphans {
            aborted.extend(orphan.aborted.drain());
        }
        // One cursor per buffer (the transaction's, then each orphan's),
        // merged by LSN: each is in LSN order already.
        let mut cursors = Vec::with_capacity(1 + orphans.len());
        for t in std::iter::once(&mut txn).chain(orphans.iter_mut()) {
            let mut cursor = FrameCursor::new(t.spill.as_mut(), &t.frames)?;
            cursor.advance()?;
            cursors.push(cursor);
        }
        loop {
            let i = match cursors.as_slice() {
                [only] => only.lsn().map(|_| 0),
                _ => cursors
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| c.lsn().map(|lsn| (lsn, i)))
                    .min()
                    .map(|(_, i)| i),
            };
            let Some(i) = i else {
                break;
            };
            let cursor = &mut cursors[i];
            if let Some((subxid, change)) = cursor.current(&self.registry)? {
                if aborted.is_empty() || !aborted.contains(&subxid) {
                    sink.change_ref(info, change).map_err(ReplayError::Sink)?;
                }
            }
            cursor.advance()?;
        }
        sink.commit(info).map_err(ReplayError::Sink)?;
        Ok(true)
    }

    /// A running-xacts record: the first one sets the horizon; each one
    /// forgets transactions that can no longer be running (their backend
    /// crashed before writing a commit or abort).
    pub(crate) fn running_xacts(&mut self, r: &RunningXacts) {
        if self.horizon.is_none() {
            self.horizon = Some(r.next_xid);
        }
        self.forget_before(r.oldest_running_xid);
    }

    /// A shutdown checkpoint or end of recovery: nothing but prepared
    /// transactions is running; `next_xid` is the next xid to be assigned.
    pub(crate) fn nothing_running(&mut self, next_xid: u32) {
        if self.horizon.is_none() {
            self.horizon = Some(next_xid);
        }
        self.forget_before(next_xid);
    }

    fn forget_before(&mut self, oldest: u32) {
        let gone: Vec<u32> = self
            .txns
            .iter()
            .filter(|(&xid, t)| !t.prepared && xid_precedes(xid, oldest))
            .map(|(&xid, _)| xid)
            .collect();
        for xid in gone {
            if let Some(txn) = self.txns.remove(&xid) {
                self.memory -= txn.memory();
            }
        }
        self.parent.retain(|_, top| !xid_precedes(*top, oldest));
    }

    /// Bytes of changes held in memory now.
    pub(crate) fn memory(&self) -> usize {
        self.memory
            + self
                .txns
                .values()
                .map(|t| t.toast.bytes_held())
                .sum::<usize>()
    }

    /// Open (not yet committed) transactions.
    pub(crate) fn open_transactions(&self) -> usize {
        self.txns.len()
    }
}
