//! From WAL records to committed transactions of row changes, the way
//! PostgreSQL's logical decoding assembles them.
//!
//! [`Decoder::process`] takes records in WAL order. Heap records of known
//! relations become [`RowChange`]s (tuples decoded with the [`Catalog`]'s
//! schemas, TOAST values reassembled from the transaction's own toast
//! inserts), buffered per transaction in a reorder buffer and handed to a
//! [`Sink`] at commit: begin, each change, commit, in the order of the
//! commit records. The same transactions PostgreSQL's `test_decoding`
//! prints come out, with the same changes in the same order.
//!
//! # Where decoding starts
//!
//! Decoding may start at any record boundary (usually a slot's restart LSN
//! or a segment start). Transactions that began before the first
//! running-xacts record (or shutdown checkpoint) cannot be seen whole and
//! are never emitted; every transaction beginning after it is. Only
//! transactions whose commit record starts at or after
//! [`DecodeOptions::emit_from`] are emitted.

mod catalog;
mod error;
mod events;
mod held;
mod identity;
mod journal;
mod reorder;
mod row;
mod spill;
mod summarized;
mod truncate;
mod typeinfo;

pub use catalog::{Catalog, CatalogSnapshot, NewRelation, RelationSchema};
pub use error::{ReplayError, SinkError, UnsupportedColumn};
pub use identity::Identity;
pub use journal::{
    changed_without_rows, parse as parse_journal, Creation, JournalMessage, JournalUpdate,
    LostRelation, ERROR_PREFIX as JOURNAL_ERROR_PREFIX, PREFIX as JOURNAL_PREFIX,
};
pub use row::is_supported;
pub use spill::{ChangeRef, DatumIter, DatumRef, Datums};
pub use typeinfo::{TypeAttr, TypeRow, TypeRows};

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::change::{Datum, RowChange};
use crate::lsn::Lsn;
use crate::tuple::decode_chunk;
use crate::wal::{interpret, PgMajor, Record, RelFileLocator, RmgrId, TupleFragment, WalEvent};

use events::At;
use held::{Held, HeldRows};
use journal::JournalTracker;
use reorder::ReorderBuffer;
use row::{decode_row, ValueText};
use spill::{ChangeWriter, RowKind};

/// Whether `record` shows that the page `block` writes is no table's: a
/// record of a resource manager other than the heap's and the page images'
/// (an index's, a sequence's), or an uncompressed page image with special
/// space (every index page has some, a heap page none). A compressed image
/// tells nothing here.
fn not_a_table_page(record: &Record, block: &crate::wal::BlockRef) -> bool {
    match record.rmid {
        RmgrId::HEAP | RmgrId::HEAP2 => false,
        RmgrId::XLOG => block.image.as_ref().is_some_and(|image| {
            if image.compression() != crate::wal::ImageCompression::None
                || (image.hole_length > 0 && image.hole_offset < 18)
            {
                return false;
            }
            let bytes = record.image_bytes(image);
            let page = bytes.len() + usize::from(image.hole_length);
            bytes
                .get(16..18)
                .is_some_and(|s| usize::from(u16::from_le_bytes([s[0], s[1]])) < page)
        }),
        _ => true,
    }
}

/// `XLOG_HEAP_TRUNCATE`, the heap opcode of a TRUNCATE.
const XLOG_HEAP_TRUNCATE: u8 = 0x30;

/// `wal_level` = logical in a parameter-change record.
const WAL_LEVEL_LOGICAL: i32 = 2;

/// A committed transaction as the sink sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnInfo {
    /// Top-level xid.
    pub xid: u32,
    /// LSN of the commit record (start): the version of its changes.
    pub commit_lsn: Lsn,
    /// LSN just past the commit record.
    pub end_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 UTC.
    pub commit_time: i64,
}

/// Receives decoded transactions. Errors stop decoding.
pub trait Sink {
    /// A committed transaction starts.
    fn begin(&mut self, txn: &TxnInfo) -> Result<(), SinkError>;
    /// One of its changes, in order.
    fn change(&mut self, txn: &TxnInfo, change: RowChange) -> Result<(), SinkError>;
    /// One of its changes, in order, borrowed from the decoder's buffer: what
    /// the decoder calls. The default hands [`change`](Sink::change) an owned
    /// copy; a sink that only reads the values can take them from here
    /// without that copy.
    fn change_ref(&mut self, txn: &TxnInfo, change: ChangeRef<'_>) -> Result<(), SinkError> {
        self.change(txn, change.into_owned())
    }
    /// It ends.
    fn commit(&mut self, txn: &TxnInfo) -> Result<(), SinkError>;
    /// A non-transactional logical message, delivered where it was written.
    fn message(&mut self, lsn: Lsn, prefix: &str, content: &[u8]) -> Result<(), SinkError>;
}

/// A sink that keeps nothing: for a decode run for what the decoder
/// learns on the way (the catalog journal, restart points), not for its
/// changes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Discard;

impl Sink for Discard {
    fn begin(&mut self, _: &TxnInfo) -> Result<(), SinkError> {
        Ok(())
    }
    fn change(&mut self, _: &TxnInfo, _: RowChange) -> Result<(), SinkError> {
        Ok(())
    }
    fn commit(&mut self, _: &TxnInfo) -> Result<(), SinkError> {
        Ok(())
    }
    fn message(&mut self, _: Lsn, _: &str, _: &[u8]) -> Result<(), SinkError> {
        Ok(())
    }
}

/// How to decode.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    /// Emit only transactions whose commit record starts at or after this.
    pub emit_from: Lsn,
    /// Buffered changes beyond this many bytes spill to disk.
    pub memory_limit: usize,
    /// Where spill files go.
    pub spill_dir: PathBuf,
    /// Decode rows of these relation OIDs only (all when `None`).
    pub only: Option<BTreeSet<u32>>,
    /// Leave out relations in these schemas (by the schema name the
    /// relation has where its change is decoded, the one printed with it).
    pub exclude_schemas: BTreeSet<String>,
    /// Stop at a value of a type the decoder cannot print (otherwise report
    /// it in [`Decoder::unsupported`] and go on).
    pub strict_types: bool,
    /// Values of types the decoder cannot print become NULL (otherwise a
    /// marker naming the type), when not strict.
    pub unsupported_as_null: bool,
    /// Follow only transactions and the catalog journal: skip every data
    /// record (a fast scan for schemas, creations and restart points).
    pub journal_only: bool,
    /// Records before this LSN are read as with `journal_only`: reading
    /// starts earlier than changes matter only to learn the catalog journal
    /// from an earlier point (see `walfill decode`).
    pub changes_from: Lsn,
    /// Files the catalog does not name that belong to these relations (by
    /// OID), as recorded outside the WAL: a table's files after a `CLUSTER`
    /// or `VACUUM FULL`, before the journal message that names them. Such a
    /// change is decoded with the relation's description at its LSN.
    pub known_files: rustc_hash::FxHashMap<RelFileLocator, u32>,
    /// Relations consulted last, when neither the catalog (as the journal
    /// keeps it) nor `known_files` names a file: the source's tables as they
    /// are now, for tables the journal never described.
    pub fallback: Option<std::sync::Arc<Catalog>>,
    /// Decode every change to a relation file created while decoding,
    /// whatever transaction made it. For a replay from a table's creation:
    /// no change to a table can come before the record that creates its
    /// file, so a transaction that began before decoding started (and so
    /// cannot be seen whole) is still seen whole for the table's files.
    pub follow_new_files: bool,
    /// Whose WAL it must be: WAL of another cluster, or of a timeline the
    /// source's history does not go through, is refused.
    pub identity: Option<Identity>,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            emit_from: Lsn::INVALID,
            memory_limit: 256 * 1024 * 1024,
            spill_dir: std::env::temp_dir(),
            only: None,
            exclude_schemas: BTreeSet::new(),
            strict_types: true,
            unsupported_as_null: false,
            journal_only: false,
            changes_from: Lsn::INVALID,
            known_files: Default::default(),
            fallback: None,
            follow_new_files: false,
            identity: None,
        }
    }
}

/// Counters of what decoding saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Records processed.
    pub records: u64,
    /// Transactions emitted.
    pub transactions: u64,
    /// Changes emitted.
    pub changes: u64,
    /// Transactions whose changes were spilled to disk.
    pub spilled_transactions: u64,
    /// Heap records of relation files the catalog does not know.
    pub unknown_relation_records: u64,
}

/// Rows written to a relation file nothing describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Undescribed {
    /// Records carrying row data for logical decoding (so of a user table,
    /// not of a system catalog).
    pub records: u64,
    /// The first one's LSN.
    pub first: Lsn,
}

/// Decodes records into transactions.
pub struct Decoder {
    catalog: Catalog,
    options: DecodeOptions,
    reorder: ReorderBuffer,
    journal: JournalTracker,
    restart_points: Vec<(Lsn, u32)>,
    unsupported: BTreeSet<UnsupportedColumn>,
    stats: DecodeStats,
    /// Relation files created while decoding (with `follow_new_files`).
    new_files: rustc_hash::FxHashSet<RelFileLocator>,
    /// Files of this database written with row data that no description
    /// names, from `changes_from` on.
    undescribed: rustc_hash::FxHashMap<RelFileLocator, Undescribed>,
    /// Rows written to files their transaction created, before a journal
    /// message describes them (CREATE TABLE AS).
    held: Held,
    /// The server's `wal_level` since the last parameter-change record
    /// (0 minimal, 1 replica, 2 logical); `None` before one.
    wal_level: Option<i32>,
    /// The change being encoded (reused for every one).
    body: Vec<u8>,
    /// The text of the value being decoded (reused for every one), in the
    /// dialect of the server that wrote the record.
    text: ValueText,
}

impl Decoder {
    /// A decoder over `catalog`'s relations.
    pub fn new(catalog: Catalog, options: DecodeOptions) -> Decoder {
        let reorder = ReorderBuffer::new(
            options.memory_limit,
            options.spill_dir.clone(),
            options.emit_from,
        );
        Decoder {
            held: Held::new(options.memory_limit / 4),
            catalog,
            options,
            reorder,
            journal: JournalTracker::default(),
            restart_points: Vec::new(),
            unsupported: BTreeSet::new(),
            stats: DecodeStats::default(),
            new_files: Default::default(),
            undescribed: Default::default(),
            wal_level: None,
            body: Vec::new(),
            text: ValueText::default(),
        }
    }

    /// Columns met whose type could not be printed (non-strict mode).
    pub fn unsupported(&self) -> &BTreeSet<UnsupportedColumn> {
        &self.unsupported
    }

    /// What decoding saw so far.
    pub fn stats(&self) -> DecodeStats {
        DecodeStats {
            spilled_transactions: self.reorder.spilled,
            ..self.stats
        }
    }

    /// Bytes buffered in memory now.
    pub fn memory(&self) -> usize {
        self.reorder.memory()
    }

    /// Transactions begun and not yet finished.
    pub fn open_transactions(&self) -> usize {
        self.reorder.open_transactions()
    }

    /// Whose WAL the decoder accepts, when told.
    pub fn identity(&self) -> Option<&Identity> {
        self.options.identity.as_ref()
    }

    /// The catalog as of the last commit decoded (journal entries applied).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Files of this database written with row data (so of user tables)
    /// that neither the catalog, the journal nor `known_files` describes.
    pub fn undescribed(&self) -> &rustc_hash::FxHashMap<RelFileLocator, Undescribed> {
        &self.undescribed
    }

    /// Relations whose changes could not be followed from some commit on.
    pub fn lost(&self) -> &[LostRelation] {
        &self.journal.lost
    }

    /// Relations whose creation was decoded, by OID.
    pub fn created(&self) -> &rustc_hash::FxHashMap<u32, Creation> {
        &self.journal.created
    }

    /// Running-xacts records seen so far: `(LSN, next xid)`. Decoding that
    /// starts at one of them sees whole every transaction whose xid is at
    /// least that next xid.
    pub fn restart_points(&self) -> &[(Lsn, u32)] {
        &self.restart_points
    }

    /// Processes one record.
    pub fn process(
        &mut self,
        record: &Record,
        major: PgMajor,
        sink: &mut dyn Sink,
    ) -> Result<(), ReplayError> {
        self.stats.records += 1;
        self.text.dialect = crate::types::Dialect::of(major);
        let lsn = record.lsn;
        if let Some(top) = record.toplevel_xid {
            self.reorder.link(record.xid, top, lsn)?;
        }
        let top = self.reorder.top(record.xid);
        if self.held.creating() {
            for block in &record.blocks {
                self.held
                    .wrote(&block.rel, || not_a_table_page(record, block));
            }
        }
        let changes = !self.options.journal_only && lsn >= self.options.changes_from;
        if self.passes_over(record, top, changes) {
            return Ok(());
        }
        let at = At {
            lsn,
            end_lsn: record.end_lsn,
            xid: record.xid,
            top,
        };
        let event = interpret(record, major)?;
        match event {
            WalEvent::Commit(c) => self.commit(at, c, sink)?,
            WalEvent::Abort(a) => self.abort(a)?,
            WalEvent::Prepare(p) => {
                self.journal.prepared(p.xid);
                self.reorder.prepare(p.xid);
            }
            WalEvent::Assignment { top, subxacts } => {
                for sub in subxacts {
                    self.reorder.link(sub, top, lsn)?;
                }
            }
            WalEvent::RunningXacts(r) => self.running_xacts(at, r)?,
            WalEvent::CheckpointShutdown(c) => self.checkpoint_shutdown(c),
            WalEvent::Insert(ins) => self.insert(at, ins)?,
            WalEvent::MultiInsert(multi) => self.multi_insert(at, multi)?,
            WalEvent::Update(up) => self.update(at, up)?,
            WalEvent::Delete(del) => self.delete(at, del)?,
            WalEvent::Truncate(t) => self.truncate(at, t, changes)?,
            WalEvent::Confirm(_) => self.confirm(at)?,
            WalEvent::LogicalMessage(m) => self.message(at, m, major, sink)?,
            WalEvent::SmgrCreate { rel, fork } => self.smgr_create(at, rel, fork),
            // A transaction that logged invalidations changed the catalog as
            // far as decoding knows, and gets a snapshot at its commit even
            // with no other record (a temporary table ON COMMIT DELETE ROWS
            // emptied).
            WalEvent::Invalidations { .. } if record.xid != 0 => {
                self.snapshot(top);
            }
            WalEvent::ParameterChange { wal_level } => {
                self.wal_level = Some(wal_level);
            }
            // An in-place catalog update by a transaction gives it a
            // snapshot too (PostgreSQL 15-17).
            WalEvent::Other { rmid, info }
                if rmid == RmgrId::HEAP && info & 0x70 == 0x70 && record.xid != 0 =>
            {
                self.snapshot(top);
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether `record` is passed over without being interpreted: a row of
    /// another database, or, before changes matter (`changes` false), a
    /// record that cannot change the catalog or a transaction's fate.
    fn passes_over(&mut self, record: &Record, top: u32, changes: bool) -> bool {
        if let Some(snapshot) = self.other_database_row(record) {
            // Another database's row: nothing of it is decoded. Its
            // transaction gets a snapshot all the same, as PostgreSQL's
            // decoding gives it one before looking at the database.
            if snapshot && changes {
                self.snapshot(top);
            }
            return true;
        }
        // A TRUNCATE moves tables to new files: the catalog follows it even
        // where changes do not matter.
        let truncate = record.rmid == RmgrId::HEAP && record.info & 0x70 == XLOG_HEAP_TRUNCATE;
        if !changes
            && !truncate
            && !matches!(
                record.rmid,
                RmgrId::XACT
                    | RmgrId::STANDBY
                    | RmgrId::LOGICAL_MESSAGE
                    | RmgrId::XLOG
                    | RmgrId::SMGR
            )
        {
            if matches!(record.rmid, RmgrId::HEAP | RmgrId::HEAP2) {
                if let Some(block) = record.blocks.first() {
                    self.note_unknown(top, &block.rel);
                    if self.wal_level.is_some_and(|l| l < WAL_LEVEL_LOGICAL) {
                        let catalog = self.journal.catalog_for(top, &self.catalog);
                        if let Some(rel) = catalog.by_file(&block.rel).cloned() {
                            self.check_wal_level(&rel, record.lsn);
                        }
                    }
                }
            }
            return true;
        }
        false
    }

    /// For a heap record of another database's relation (not a TRUNCATE,
    /// which names its database elsewhere): whether its transaction gets a
    /// snapshot from it (a row change, an in-place update).
    fn other_database_row(&self, record: &Record) -> Option<bool> {
        let block = record.blocks.first()?;
        if block.rel.db == self.catalog.database {
            return None;
        }
        let op = record.rmgr_info() & 0x70;
        match record.rmid {
            RmgrId::HEAP if op == XLOG_HEAP_TRUNCATE => None,
            // Insert, delete, update, HOT update, confirm; in place.
            RmgrId::HEAP => Some(match op {
                0x00 | 0x10 | 0x20 | 0x40 | 0x50 => true,
                0x70 => record.xid != 0,
                _ => false,
            }),
            // Multi-insert.
            RmgrId::HEAP2 => Some(op == 0x50),
            _ => None,
        }
    }

    fn wanted(&self, rel: &RelationSchema) -> bool {
        self.wanted_oid(rel.spec.oid, &rel.relation.schema)
    }

    fn wanted_oid(&self, oid: u32, schema: &str) -> bool {
        self.options
            .only
            .as_ref()
            .is_none_or(|only| only.contains(&oid))
            && !self.options.exclude_schemas.contains(schema)
    }

    /// The relation `file` belongs to, when it is wanted. `has_data`: the
    /// record carries row data for logical decoding.
    fn relation(
        &mut self,
        top: u32,
        file: &crate::wal::RelFileLocator,
        lsn: Lsn,
        has_data: bool,
    ) -> Option<std::sync::Arc<RelationSchema>> {
        let catalog = self.journal.catalog_for(top, &self.catalog);
        match self.resolve(catalog, file) {
            Some(rel) if self.wanted(rel) => Some(rel.clone()),
            Some(_) => {
                // A left-out table's change: the TOAST chunks written just
                // before it are its own, and no row decoded later needs them.
                self.reorder.txn(top).toast.clear();
                None
            }
            None => {
                self.stats.unknown_relation_records += 1;
                if has_data && file.db == self.catalog.database {
                    self.note_undescribed(*file, 1, lsn);
                }
                self.journal.unknown_file(top, *file);
                None
            }
        }
    }

    /// Counts `records` written with row data to `file`, which nothing
    /// describes.
    fn note_undescribed(&mut self, file: RelFileLocator, records: u64, first: Lsn) {
        let seen = self
            .undescribed
            .entry(file)
            .or_insert(Undescribed { records: 0, first });
        seen.records += records;
        seen.first = seen.first.min(first);
    }

    /// Holds the rows `top` writes to a file it created that nothing
    /// describes yet (see [`held`]); `false` when they are not held.
    fn hold(
        &mut self,
        top: u32,
        file: &RelFileLocator,
        xid: u32,
        lsn: Lsn,
        tuples: impl FnOnce() -> Vec<TupleFragment>,
    ) -> bool {
        if !self.held.may_hold(top, file)
            || self
                .journal
                .catalog_for(top, &self.catalog)
                .by_file(file)
                .is_some()
        {
            return false;
        }
        self.stats.unknown_relation_records += 1;
        self.journal.unknown_file(top, *file);
        let toast = std::mem::take(&mut self.reorder.txn(top).toast);
        let rows = HeldRows {
            xid,
            lsn,
            tuples: tuples(),
            toast,
        };
        self.held.hold(top, *file, rows);
        true
    }

    /// Decodes the held rows of `top` that its journal message now
    /// describes, as the changes they were, in WAL order, when the message's
    /// statement created the table with its rows (CREATE TABLE AS, SELECT
    /// INTO, CREATE MATERIALIZED VIEW). The rows
    /// a rewrite copies into a table's new file (ALTER COLUMN TYPE, REFRESH
    /// MATERIALIZED VIEW) are no changes: PostgreSQL's decoding skips them
    /// too.
    fn release_held(&mut self, top: u32, fills: bool) -> Result<(), ReplayError> {
        let catalog = self.journal.catalog_for(top, &self.catalog);
        let released = self
            .held
            .take_described(top, |f| catalog.by_file(f).is_some());
        for (file, rows) in released {
            self.journal.seen(top, &file);
            if !fills {
                continue;
            }
            let Some(rel) = self
                .journal
                .catalog_for(top, &self.catalog)
                .by_file(&file)
                .cloned()
            else {
                continue;
            };
            if !self.wanted(&rel) {
                continue;
            }
            // The held rows' TOAST chunks stand in for the transaction's
            // own while they are encoded.
            let own = std::mem::take(&mut self.reorder.txn(top).toast);
            let encoded = self.add_held(&rel, top, rows);
            self.reorder.txn(top).toast = own;
            encoded?;
        }
        Ok(())
    }

    /// Buffers `rows` of `rel` as the inserts they were.
    fn add_held(
        &mut self,
        rel: &RelationSchema,
        top: u32,
        rows: Vec<HeldRows>,
    ) -> Result<(), ReplayError> {
        for held in rows {
            if !held.toast.is_empty() {
                self.reorder.txn(top).toast = held.toast;
            }
            for tuple in &held.tuples {
                self.encode_change(rel, top, held.lsn, RowKind::Insert, Some(tuple), None)?;
                self.add_encoded(top, held.xid, held.lsn)?;
            }
        }
        Ok(())
    }

    /// A TRUNCATE by `subxid` (in `top`) of `relids`: the tables it gave
    /// new files move to them in the transaction's catalog (see
    /// [`truncate`]); those whose files cannot be told are lost from its
    /// commit on.
    fn truncated(&mut self, top: u32, subxid: u32, lsn: Lsn, relids: &[u32]) {
        if top == 0 {
            return;
        }
        let created = self.held.created_before(top, lsn);
        let catalog = self.journal.catalog_for(top, &self.catalog);
        let fallback = self.options.fallback.as_deref();
        let out = truncate::new_files(relids, subxid, &created, catalog, |oid| {
            catalog
                .by_oid(oid)
                .or_else(|| fallback.and_then(|f| f.by_oid(oid)))
                .map(|r| &r.spec)
        });
        self.held.adopt(top, subxid, &out.files);
        if !out.moved.is_empty() {
            let message = JournalMessage {
                creates: false,
                fills: false,
                matview: false,
                updates: out.moved.into_iter().map(JournalUpdate::Upsert).collect(),
            };
            self.journal.message(top, subxid, message, &self.catalog);
        }
        if !out.unknown.is_empty() {
            self.journal.lose(
                top,
                subxid,
                out.unknown,
                "a TRUNCATE gave it new files that its WAL does not tell apart (the WAL read \
                 does not reach back to the TRUNCATE's transaction start)",
            );
        }
    }

    /// Remembers that `top` wrote `file` while no known relation had it.
    fn note_unknown(&mut self, top: u32, file: &crate::wal::RelFileLocator) {
        let catalog = self.journal.catalog_for(top, &self.catalog);
        if file.db == self.catalog.database
            && catalog.by_file(file).is_none()
            && !catalog.is_toast(file)
        {
            self.journal.unknown_file(top, *file);
        }
    }

    /// Marks that `top` would have a snapshot in PostgreSQL's decoding.
    fn snapshot(&mut self, top: u32) {
        if top != 0 && self.reorder.tracked(top) {
            self.reorder.txn(top).has_snapshot = true;
        }
    }

    fn add(
        &mut self,
        top: u32,
        subxid: u32,
        lsn: Lsn,
        change: RowChange,
    ) -> Result<(), ReplayError> {
        self.stats.changes += 1;
        self.reorder.add(top, subxid, lsn, change)
    }

    /// Buffers the change [`encode_change`](Decoder::encode_change) encoded last.
    fn add_encoded(&mut self, top: u32, subxid: u32, lsn: Lsn) -> Result<(), ReplayError> {
        self.stats.changes += 1;
        self.reorder.add_encoded(top, subxid, lsn, &self.body)
    }

    /// Encodes a row change of `rel` into `self.body`: an insert of `new`,
    /// an update to `new` (from `old`, when logged), a delete of `old`
    /// (none for a table without a row identity).
    fn encode_change(
        &mut self,
        rel: &RelationSchema,
        top: u32,
        lsn: Lsn,
        kind: RowKind,
        new: Option<&TupleFragment>,
        old: Option<&TupleFragment>,
    ) -> Result<(), ReplayError> {
        let mut body = std::mem::take(&mut self.body);
        let id = self.reorder.relation_id(&rel.relation);
        let mut out = ChangeWriter::begin(&mut body, kind, id);
        let mut encode = || {
            if let Some(new) = new {
                self.row(rel, top, new, lsn, &mut out)?;
            }
            if kind == RowKind::Update {
                out.old_row(old.is_some());
            }
            match old {
                Some(old) if kind != RowKind::Insert => self.row(rel, top, old, lsn, &mut out),
                None if kind == RowKind::Delete => {
                    out.begin_row();
                    out.end_row();
                    Ok(())
                }
                _ => Ok(()),
            }
        };
        let encoded = encode();
        self.body = body;
        encoded
    }

    /// Whether changes to `file` by top-level `top` are decoded: `top`
    /// began after decoding could see transactions whole, or the file was
    /// created while decoding (with `follow_new_files`).
    fn follows(&self, top: u32, file: &RelFileLocator) -> bool {
        self.reorder.tracked(top) || self.is_new_file(file)
    }

    fn is_new_file(&self, file: &RelFileLocator) -> bool {
        self.options.follow_new_files && self.new_files.contains(file)
    }

    /// A change of `rel` under a `wal_level` below logical lacks what
    /// decoding needs (a delete's old key; an insert's data may sit only in
    /// a full-page image): its relation is lost from here.
    fn check_wal_level(&mut self, rel: &RelationSchema, lsn: Lsn) {
        if self
            .wal_level
            .is_some_and(|level| level < WAL_LEVEL_LOGICAL)
        {
            self.journal.lost_changes(
                rel.spec.oid,
                rel.qualified_name(),
                lsn,
                "it was changed while the server ran with wal_level below logical, which \
                 leaves out what decoding needs"
                    .into(),
            );
        }
    }

    /// A heap record of `file` without the data logical decoding needs.
    fn not_logical(&mut self, top: u32, file: &RelFileLocator, lsn: Lsn, what: &str) {
        if file.db != self.catalog.database {
            return;
        }
        let catalog = self.journal.catalog_for(top, &self.catalog);
        let Some(rel) = catalog.by_file(file).filter(|r| self.wanted(r)).cloned() else {
            return;
        };
        self.journal.lost_changes(
            rel.spec.oid,
            rel.qualified_name(),
            lsn,
            format!(
                "{what} at {lsn} was logged without the row data logical decoding needs (WAL \
                 written with wal_level below logical)"
            ),
        );
    }

    fn toast_chunk(
        &mut self,
        top: u32,
        tuple: &TupleFragment,
        lsn: Lsn,
    ) -> Result<(), ReplayError> {
        let chunk = decode_chunk(tuple.infomask2, tuple.infomask, tuple.hoff, &tuple.data)
            .map_err(|source| ReplayError::Tuple {
                relation: "a toast table".into(),
                lsn,
                source,
            })?;
        self.reorder
            .txn(top)
            .toast
            .add_chunk(chunk.chunk_id, chunk.chunk_seq, chunk.data)
            .map_err(|source| ReplayError::Tuple {
                relation: "a toast table".into(),
                lsn,
                source,
            })
    }

    fn row(
        &mut self,
        rel: &RelationSchema,
        top: u32,
        tuple: &TupleFragment,
        lsn: Lsn,
        out: &mut ChangeWriter<'_>,
    ) -> Result<(), ReplayError> {
        let strict = self.options.strict_types;
        let as_null = self.options.unsupported_as_null;
        let unsupported = &mut self.unsupported;
        let mut report = |column: UnsupportedColumn| {
            if strict {
                return Err(ReplayError::Unsupported(column.clone()));
            }
            let value = if as_null {
                Datum::Null
            } else {
                Datum::Text(format!("<unsupported type {}>", column.type_name))
            };
            unsupported.insert(column);
            Ok(value)
        };
        let toast = &self.reorder.txn(top).toast;
        decode_row(rel, tuple, toast, lsn, &mut report, out, &mut self.text)
    }
}
