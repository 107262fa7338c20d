//! Taking a segment's summary in place of its records.
//!
//! A summary stands in for its segment only when the records it leaves out
//! could change nothing the decoder emits or keeps: no row change of a
//! wanted relation, no file or catalog journal of this database, nothing
//! while a transaction is creating files (whose every write the decoder
//! watches). Then feeding its whole records and touches leaves the decoder
//! as reading every record would have, and getting the choice wrong can
//! only cost reading a segment whole.

use crate::lsn::Lsn;
use crate::summary::{touch, SegmentSummary, SummaryEvent};
use crate::wal::{PgMajor, Record, RelFileLocator, RmgrId};

use super::error::ReplayError;
use super::{Decoder, RelationSchema, Sink, WAL_LEVEL_LOGICAL};

impl Decoder {
    /// Why the segment `summary` stands for must be read whole, or `None`
    /// when the summary can take its place.
    pub fn summary_verdict(&self, summary: &SegmentSummary) -> Option<&'static str> {
        let journal_only = self.journal_only_before(summary.last_end);
        if !journal_only && summary.start < self.options.changes_from {
            return Some("decoding starts to follow changes inside it");
        }
        if self.held.creating() {
            return Some("a transaction is creating relation files");
        }
        if self.wal_level.is_some_and(|l| l < WAL_LEVEL_LOGICAL) {
            return Some("the server ran with wal_level below logical");
        }
        let ours = self.catalog.database;
        if journal_only {
            // Only transactions and the journal are followed, and the whole
            // records are all of those: a file created here is the one
            // thing whose later writes (in this segment) would matter.
            let creates = summary.events.iter().any(|e| {
                matches!(e, SummaryEvent::Kept { db, rmid, .. }
                    if RmgrId(*rmid) == RmgrId::SMGR && (*db == ours || *db == u32::MAX))
            });
            return creates.then_some("it creates a file of this database");
        }
        if self.journal.has_overlays() {
            return Some("a transaction has changed this database's catalog");
        }
        for event in &summary.events {
            match event {
                SummaryEvent::Kept { db, rmid, .. } => {
                    let any_db =
                        matches!(RmgrId(*rmid), RmgrId::XACT | RmgrId::STANDBY | RmgrId::XLOG);
                    if !any_db && (*db == ours || *db == u32::MAX) {
                        return Some("it holds a file, TRUNCATE or message of this database");
                    }
                }
                SummaryEvent::Touch { file, kind, .. } if file.db == ours => {
                    if kind & touch::TOAST != 0 && !self.other_toast(file) {
                        return Some("it holds TOAST chunks of a wanted table");
                    }
                    if kind & (touch::LOOKUP | touch::CONFIRM) != 0 {
                        match self.resolve(&self.catalog, file) {
                            Some(rel) if self.wanted(rel) => {
                                return Some("it changes a wanted table")
                            }
                            Some(_) => {}
                            None if kind & touch::DATA != 0 || kind & touch::CONFIRM != 0 => {
                                return Some("it changes a table no description names")
                            }
                            None => {}
                        }
                    }
                }
                SummaryEvent::Touch { .. } | SummaryEvent::Link { .. } => {}
            }
        }
        None
    }

    /// Feeds the events of `summary` before `to` in place of the segment's
    /// records; `summary_verdict` must have accepted it. Returns where the
    /// last one fed ends, and whether a record at or after `to` starts in
    /// the segment (decoding stops there).
    pub fn apply_summary(
        &mut self,
        summary: &SegmentSummary,
        major: PgMajor,
        to: Option<Lsn>,
        sink: &mut dyn Sink,
    ) -> Result<(Lsn, bool), ReplayError> {
        let ours = self.catalog.database;
        for event in &summary.events {
            let lsn = event.lsn();
            if to.is_some_and(|to| lsn >= to) {
                return Ok((lsn, true));
            }
            match event {
                SummaryEvent::Kept { end, bytes, .. } => {
                    let record = Record::parse(lsn, *end, bytes.clone())?;
                    self.process(&record, major, sink)?;
                }
                SummaryEvent::Link { sub, top, .. } => self.reorder.link(*sub, *top, lsn)?,
                // Another database's change only gives its transaction a
                // snapshot (see `process`).
                // (Every touch stands for a record that gives one.)
                SummaryEvent::Touch { xid, file, .. } if file.db != ours => {
                    if !self.journal_only_before(lsn.advance(1)) {
                        let top = self.reorder.top(*xid);
                        self.snapshot(top);
                    }
                }
                SummaryEvent::Touch {
                    xid, file, kind, ..
                } => {
                    let top = self.reorder.top(*xid);
                    if self.journal_only_before(lsn.advance(1)) {
                        self.note_unknown(top, file);
                        continue;
                    }
                    self.snapshot(top);
                    if !self.follows(top, file) {
                        continue;
                    }
                    if kind & touch::SUPER != 0 {
                        let txn = self.reorder.txn(top);
                        txn.speculative = None;
                        txn.toast.clear();
                    }
                    if kind & touch::LOOKUP != 0 {
                        let catalog = self.journal.catalog_for(top, &self.catalog);
                        if self.resolve(catalog, file).is_some() {
                            // Another table's change: its TOAST chunks are
                            // its own.
                            self.reorder.txn(top).toast.clear();
                        } else {
                            self.stats.unknown_relation_records += 1;
                            self.journal.unknown_file(top, *file);
                        }
                    }
                }
            }
        }
        // A record starts at `to` (a record boundary) when the last one
        // starting here ends after it: decoding by the bytes would stop
        // there too, whatever that record is.
        Ok((summary.last_end, to.is_some_and(|to| to < summary.last_end)))
    }

    /// Whether every record before `end` is read for transactions and the
    /// journal only.
    fn journal_only_before(&self, end: Lsn) -> bool {
        self.options.journal_only || end <= self.options.changes_from
    }

    /// The relation a file belongs to, as the decoder looks it up: the
    /// catalog, then files recorded outside the WAL, then the fallback.
    pub(super) fn resolve<'a>(
        &'a self,
        catalog: &'a super::Catalog,
        file: &RelFileLocator,
    ) -> Option<&'a std::sync::Arc<RelationSchema>> {
        let fallback = self.options.fallback.as_deref();
        catalog
            .by_file(file)
            .or_else(|| {
                self.options
                    .known_files
                    .get(file)
                    .and_then(|oid| catalog.by_oid(*oid))
            })
            .or_else(|| fallback.and_then(|f| f.by_file(file)))
    }

    /// Whether `file` is the TOAST table of a relation that is not wanted.
    fn other_toast(&self, file: &RelFileLocator) -> bool {
        let fallback = self.options.fallback.as_deref();
        self.catalog
            .by_toast_file(file)
            .or_else(|| fallback.and_then(|f| f.by_toast_file(file)))
            .is_some_and(|owner| !self.wanted(owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{Catalog, DecodeOptions, Discard};
    use crate::summary::ObjectId;

    fn summary(events: Vec<SummaryEvent>) -> SegmentSummary {
        SegmentSummary {
            object: ObjectId {
                name: "wal/000000010000000000000001".into(),
                size: 1 << 20,
            },
            next: None,
            system_id: 1,
            timeline: 1,
            magic: PgMajor::Pg15.magic(),
            start: Lsn(0x10_0000),
            last_end: Lsn(0x10_0200),
            events,
        }
    }

    fn file(db: u32) -> RelFileLocator {
        RelFileLocator {
            spc: 1663,
            db,
            rel: 16400,
        }
    }

    /// Decoding by the bytes stops at the first record at or after `to`,
    /// whatever it is; a summary lists only some records, so it stops
    /// wherever a record it stands for ends after `to`.
    #[test]
    fn a_summary_stops_at_a_record_it_leaves_out() {
        let mut decoder = Decoder::new(Catalog::new(5), DecodeOptions::default());
        let s = summary(vec![SummaryEvent::Touch {
            lsn: Lsn(0x10_0028),
            xid: 700,
            file: file(6),
            kind: touch::LOOKUP | touch::DATA,
        }]);
        let major = PgMajor::Pg15;
        let stop = |d: &mut Decoder, to| d.apply_summary(&s, major, Some(to), &mut Discard);
        assert!(stop(&mut decoder, Lsn(0x10_0100)).unwrap().1);
        assert!(stop(&mut decoder, Lsn(0x10_0028)).unwrap().1);
        assert!(!stop(&mut decoder, Lsn(0x10_0200)).unwrap().1);
        assert_eq!(
            decoder
                .apply_summary(&s, major, None, &mut Discard)
                .unwrap(),
            (Lsn(0x10_0200), false)
        );
    }

    /// Another database's rows never make a segment be read whole; a
    /// wanted table's, a TOAST table of no known owner's and a file of
    /// this database always do.
    #[test]
    fn what_makes_a_segment_be_read_whole() {
        let decoder = Decoder::new(Catalog::new(5), DecodeOptions::default());
        let touch = |db, kind| {
            summary(vec![SummaryEvent::Touch {
                lsn: Lsn(0x10_0028),
                xid: 700,
                file: file(db),
                kind,
            }])
        };
        assert_eq!(
            decoder.summary_verdict(&touch(6, touch::LOOKUP | touch::DATA)),
            None
        );
        assert_eq!(decoder.summary_verdict(&touch(6, touch::TOAST)), None);
        // No description names the file: it may be a table's.
        assert!(decoder
            .summary_verdict(&touch(5, touch::LOOKUP | touch::DATA))
            .is_some());
        assert!(decoder.summary_verdict(&touch(5, touch::TOAST)).is_some());
        // A catalog's change (no row data) is no table's.
        assert_eq!(decoder.summary_verdict(&touch(5, touch::LOOKUP)), None);
        let kept = |db, rmid: RmgrId| {
            summary(vec![SummaryEvent::Kept {
                lsn: Lsn(0x10_0028),
                end: Lsn(0x10_0060),
                db,
                rmid: rmid.0,
                bytes: Vec::new(),
            }])
        };
        assert!(decoder.summary_verdict(&kept(5, RmgrId::SMGR)).is_some());
        assert!(decoder
            .summary_verdict(&kept(5, RmgrId::LOGICAL_MESSAGE))
            .is_some());
        assert_eq!(decoder.summary_verdict(&kept(6, RmgrId::SMGR)), None);
        assert_eq!(decoder.summary_verdict(&kept(0, RmgrId::XACT)), None);
    }
}
