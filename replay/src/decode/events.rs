//! One handler per kind of WAL event, for [`Decoder::process`]: how each
//! record changes the decoder's transactions, catalog and held rows.

use crate::change::RowChange;
use crate::lsn::Lsn;
use crate::wal::{
    Abort, Checkpoint, Commit, Delete, ForkNumber, Insert, LogicalMessage, MultiInsert, PgMajor,
    RelFileLocator, RunningXacts, Truncate, Update,
};

use super::error::ReplayError;
use super::journal::{self, ERROR_PREFIX as JOURNAL_ERROR_PREFIX, PREFIX as JOURNAL_PREFIX};
use super::reorder::xid_precedes;
use super::spill::RowKind;
use super::{Decoder, Sink, TxnInfo};

/// Where a record stands: its LSN, where the next record starts, the xid
/// that wrote it and its top-level transaction.
#[derive(Clone, Copy, Debug)]
pub(super) struct At {
    pub(super) lsn: Lsn,
    pub(super) end_lsn: Lsn,
    pub(super) xid: u32,
    pub(super) top: u32,
}

impl Decoder {
    /// Commit records: the transaction's catalog changes take effect and
    /// its changes go to the sink, in commit order.
    pub(super) fn commit(
        &mut self,
        at: At,
        c: Commit,
        sink: &mut dyn Sink,
    ) -> Result<(), ReplayError> {
        let lsn = at.lsn;
        let info = TxnInfo {
            xid: c.xid,
            commit_lsn: lsn,
            end_lsn: at.end_lsn,
            commit_time: c.commit_time,
        };
        let other_db = c.db.is_some_and(|db| db != self.catalog.database);
        // The files a rewrite (CLUSTER, VACUUM FULL) may have moved
        // a table to: not an index's or a sequence's.
        let created: Vec<RelFileLocator> = self
            .held
            .created_by(c.xid)
            .iter()
            .filter(|c| !c.not_a_table)
            .map(|c| c.file)
            .collect();
        for (file, records, first) in self.held.finish(c.xid) {
            self.note_undescribed(file, records, first);
        }
        if !other_db {
            let known = &self.options.known_files;
            self.journal.committed(
                c.xid,
                lsn,
                &c.dropped_rels,
                &created,
                &mut self.catalog,
                |oid, dropped| known.iter().any(|(f, o)| *o == oid && f != dropped),
            );
        }
        if self.reorder.commit(&info, &c.subxacts, other_db, sink)? {
            self.stats.transactions += 1;
        }
        Ok(())
    }

    /// An abort: of a top-level or prepared transaction (its changes and
    /// catalog changes are forgotten), or of subtransactions alone.
    pub(super) fn abort(&mut self, a: Abort) -> Result<(), ReplayError> {
        let abort_top = self.reorder.top(a.xid);
        if a.twophase.is_some() || abort_top == a.xid {
            // A subtransaction that wrote nothing itself is not tied
            // to its top-level transaction; its children are.
            for sub in &a.subxacts {
                let sub_top = self.reorder.top(*sub);
                if sub_top != *sub && sub_top != a.xid {
                    self.journal.rolled_back(sub_top, &[*sub], &self.catalog);
                }
            }
            self.held.finish(a.xid);
            self.journal.aborted(a.xid);
        } else {
            let rolled: Vec<u32> = std::iter::once(a.xid)
                .chain(a.subxacts.iter().copied())
                .collect();
            self.journal.rolled_back(abort_top, &rolled, &self.catalog);
        }
        match a.twophase {
            Some(_) => self.reorder.abort_prepared(a.xid),
            None => self.reorder.abort(a.xid, &a.subxacts),
        }
        Ok(())
    }

    /// A snapshot of running transactions: a restart point, and what no
    /// running transaction can still need is forgotten.
    pub(super) fn running_xacts(&mut self, at: At, r: RunningXacts) -> Result<(), ReplayError> {
        let lsn = at.lsn;
        if let Some((previous, _)) = self.restart_points.last() {
            self.held.forget_orphans(*previous);
        }
        self.restart_points.push((lsn, r.next_xid));
        let oldest = r.oldest_running_xid;
        self.journal.forget(|xid| xid_precedes(xid, oldest));
        self.held.forget(|xid| xid_precedes(xid, oldest));
        self.reorder.running_xacts(&r);
        Ok(())
    }

    /// An insert: a row, a TOAST chunk, a speculative insert waiting for
    /// its confirmation, or a row held until its table is described.
    pub(super) fn insert(&mut self, at: At, ins: Insert) -> Result<(), ReplayError> {
        let (lsn, top) = (at.lsn, at.top);
        self.snapshot(top);
        if !self.follows(top, &ins.rel) {
            return Ok(());
        }
        let Some(tuple) = ins.tuple.as_ref() else {
            if !ins.on_toast_relation() {
                self.not_logical(top, &ins.rel, lsn, "an insert");
            }
            return Ok(());
        };
        if ins.on_toast_relation() {
            return self.toast_chunk(top, tuple, lsn);
        }
        if ins.rel.db != self.catalog.database {
            return Ok(());
        }
        if !ins.is_speculative() && self.hold(top, &ins.rel, at.xid, lsn, || vec![tuple.clone()]) {
            self.reorder.txn(top).toast.clear();
            return Ok(());
        }
        let Some(rel) = self.relation(top, &ins.rel, lsn, true) else {
            return Ok(());
        };
        self.check_wal_level(&rel, lsn);
        self.encode_change(&rel, top, lsn, RowKind::Insert, Some(tuple), None)?;
        let txn = self.reorder.txn(top);
        txn.toast.clear();
        if ins.is_speculative() {
            txn.speculative = Some((at.xid, lsn.0, self.body.clone()));
        } else {
            self.add_encoded(top, at.xid, lsn)?;
        }
        Ok(())
    }

    /// The rows of one page of a COPY or multi-insert.
    pub(super) fn multi_insert(&mut self, at: At, multi: MultiInsert) -> Result<(), ReplayError> {
        let (lsn, top) = (at.lsn, at.top);
        self.snapshot(top);
        if !self.follows(top, &multi.rel) || multi.rel.db != self.catalog.database {
            return Ok(());
        }
        if !multi.tuples.is_empty()
            && self.hold(top, &multi.rel, at.xid, lsn, || multi.tuples.clone())
        {
            if multi.is_last_in_multi() {
                self.reorder.txn(top).toast.clear();
            }
            return Ok(());
        }
        if let Some(rel) = self.relation(top, &multi.rel, lsn, !multi.tuples.is_empty()) {
            self.check_wal_level(&rel, lsn);
            if multi.tuples.is_empty() {
                self.not_logical(top, &multi.rel, lsn, "an insert");
            }
            for tuple in &multi.tuples {
                self.encode_change(&rel, top, lsn, RowKind::Insert, Some(tuple), None)?;
                self.add_encoded(top, at.xid, lsn)?;
            }
        }
        if multi.is_last_in_multi() {
            self.reorder.txn(top).toast.clear();
        }
        Ok(())
    }

    /// An update, with the old key where the table logs one.
    pub(super) fn update(&mut self, at: At, up: Update) -> Result<(), ReplayError> {
        let (lsn, top) = (at.lsn, at.top);
        self.snapshot(top);
        if !self.follows(top, &up.rel) || up.rel.db != self.catalog.database {
            return Ok(());
        }
        let Some(rel) = self.relation(top, &up.rel, lsn, up.new.is_some()) else {
            return Ok(());
        };
        self.check_wal_level(&rel, lsn);
        let Some(new) = up.new.as_ref() else {
            self.not_logical(top, &up.rel, lsn, "an update");
            return Ok(());
        };
        self.encode_change(&rel, top, lsn, RowKind::Update, Some(new), up.old.as_ref())?;
        self.reorder.txn(top).toast.clear();
        self.add_encoded(top, at.xid, lsn)?;
        Ok(())
    }

    /// A delete, or a speculative insert that lost its conflict.
    pub(super) fn delete(&mut self, at: At, del: Delete) -> Result<(), ReplayError> {
        let (lsn, top) = (at.lsn, at.top);
        self.snapshot(top);
        if !self.follows(top, &del.rel) {
            return Ok(());
        }
        if del.is_super() {
            // The speculative insert lost its conflict: forget it.
            let txn = self.reorder.txn(top);
            txn.speculative = None;
            txn.toast.clear();
            return Ok(());
        }
        if del.rel.db != self.catalog.database {
            return Ok(());
        }
        let Some(rel) = self.relation(top, &del.rel, lsn, del.old.is_some()) else {
            return Ok(());
        };
        self.check_wal_level(&rel, lsn);
        // A table with a row identity always logs the old key at
        // wal_level=logical; one without has none to log.
        if del.old.is_none() && (rel.spec.full_identity || !rel.spec.key.is_empty()) {
            self.not_logical(top, &del.rel, lsn, "a delete");
            return Ok(());
        }
        self.encode_change(&rel, top, lsn, RowKind::Delete, None, del.old.as_ref())?;
        self.add_encoded(top, at.xid, lsn)?;
        Ok(())
    }

    /// A TRUNCATE of the tables followed among `t.relids`.
    pub(super) fn truncate(
        &mut self,
        at: At,
        t: Truncate,
        changes: bool,
    ) -> Result<(), ReplayError> {
        let (lsn, top) = (at.lsn, at.top);
        self.snapshot(top);
        if t.db != self.catalog.database {
            return Ok(());
        }
        self.truncated(top, at.xid, lsn, &t.relids);
        if !changes {
            return Ok(());
        }
        let tracked = self.reorder.tracked(top);
        let catalog = self.journal.catalog_for(top, &self.catalog);
        let relations: Vec<_> = t
            .relids
            .iter()
            .filter_map(|oid| {
                let fallback = self.options.fallback.as_deref();
                let found = catalog
                    .by_oid(*oid)
                    .or_else(|| fallback.and_then(|f| f.by_oid(*oid)));
                match found {
                    Some(r) => (self.wanted(r) && (tracked || self.is_new_file(&r.spec.file)))
                        .then(|| r.relation.clone()),
                    None => catalog
                        .partitioned(*oid)
                        .or_else(|| fallback.and_then(|f| f.partitioned(*oid)))
                        .filter(|p| tracked && self.wanted_oid(p.oid, &p.schema))
                        .cloned(),
                }
            })
            .collect();
        if !relations.is_empty() {
            let change = RowChange::Truncate {
                relations,
                cascade: t.cascade,
                restart_seqs: t.restart_seqs,
            };
            self.add(top, at.xid, lsn, change)?;
        }
        Ok(())
    }

    /// A speculative insert confirmed: its row joins the transaction.
    pub(super) fn confirm(&mut self, at: At) -> Result<(), ReplayError> {
        let top = at.top;
        self.snapshot(top);
        let txn = self.reorder.txn(top);
        if let Some((subxid, at, change)) = txn.speculative.take() {
            self.stats.changes += 1;
            self.reorder.add_encoded(top, subxid, Lsn(at), &change)?;
        }
        Ok(())
    }

    /// A logical message: the catalog journal's, or any other passed on
    /// (transactional in its transaction, else at once).
    pub(super) fn message(
        &mut self,
        at: At,
        m: LogicalMessage,
        major: PgMajor,
        sink: &mut dyn Sink,
    ) -> Result<(), ReplayError> {
        let (lsn, top) = (at.lsn, at.top);
        if m.db != self.catalog.database {
            return Ok(());
        }
        let prefix = String::from_utf8_lossy(&m.prefix).into_owned();
        if m.transactional && prefix == JOURNAL_PREFIX {
            match journal::parse(&m.payload, self.catalog.database) {
                Ok(message) => {
                    let fills = message.fills && !(message.matview && major >= PgMajor::Pg17);
                    self.journal.message(top, at.xid, message, &self.catalog);
                    self.release_held(top, fills)?;
                }
                Err(_) => self.journal.failure(top, at.xid, Vec::new()),
            }
        } else if m.transactional && prefix == JOURNAL_ERROR_PREFIX {
            let relids = journal::parse_error(&m.payload);
            self.journal.failure(top, at.xid, relids);
        }
        if m.transactional {
            self.snapshot(top);
            if self.reorder.tracked(top) {
                let change = RowChange::Message {
                    prefix,
                    content: m.payload,
                };
                self.add(top, at.xid, lsn, change)?;
            }
        } else if self.reorder.consistent() && lsn >= self.options.emit_from {
            sink.message(lsn, &prefix, &m.payload)
                .map_err(ReplayError::Sink)?;
        }
        Ok(())
    }

    /// A shutdown checkpoint: no transaction runs past it but prepared
    /// ones, so what only running ones could need is forgotten.
    pub(super) fn checkpoint_shutdown(&mut self, c: Checkpoint) {
        let next = c.next_full_xid as u32;
        self.journal.forget(|xid| xid_precedes(xid, next));
        self.held.forget(|xid| xid_precedes(xid, next));
        self.reorder.nothing_running(next);
    }

    /// A relation file created: perhaps a new table's (or a rewritten
    /// one's), whose rows are held until the journal describes it.
    pub(super) fn smgr_create(&mut self, at: At, rel: RelFileLocator, fork: ForkNumber) {
        // Only this database's files can become its tables'.
        if fork == ForkNumber::MAIN && rel.db == self.catalog.database {
            self.held.created(at.top, at.xid, rel, at.lsn);
        }
        if self.options.follow_new_files {
            self.new_files.insert(rel);
        }
    }
}
