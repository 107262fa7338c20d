//! The catalog journal: table schemas walfill's setup makes the source write
//! into its own WAL as transactional logical messages (prefix
//! [`PREFIX`]), at exactly the LSN where they change.
//!
//! Each message is a JSON object `{"v":1, "event", "tag", "relations":
//! [...], "dropped": [relid...]}`; every relation carries its files,
//! replica identity, every attribute (dropped ones included, with storage
//! layout and missing values) and every type its columns reach.

use serde::Deserialize;

use crate::tuple::{Align, AttrSchema, RelSchema, Storage};
use crate::wal::RelFileLocator;

use super::catalog::NewRelation;
use super::typeinfo::{TypeRow, TypeRows};

/// Prefix of journal messages.
pub const PREFIX: &str = "walfill.journal";
/// Prefix of the message the journal writes when it failed to journal.
pub const ERROR_PREFIX: &str = "walfill.journal.error";

/// What one journal message changes.
#[derive(Clone, Debug, PartialEq)]
pub enum JournalUpdate {
    /// A relation's description as of this point.
    Upsert(NewRelation),
    /// A relation that no longer exists (or left the journal).
    Drop(u32),
    /// A partitioned table (no storage; TRUNCATE names it): OID, schema,
    /// name.
    Partitioned(u32, String, String),
}

#[derive(Deserialize)]
struct Message {
    v: u32,
    #[serde(default)]
    tag: String,
    #[serde(default)]
    relations: Vec<JRelation>,
    #[serde(default)]
    dropped: Vec<u32>,
}

#[derive(Deserialize)]
struct JRelation {
    relid: u32,
    schema: String,
    name: String,
    kind: String,
    spc: u32,
    relfilenode: Option<u32>,
    toast_relfilenode: Option<u32>,
    toast_spc: Option<u32>,
    replident: String,
    #[serde(default)]
    key: Vec<String>,
    attrs: Vec<JAttr>,
    #[serde(default)]
    types: Vec<TypeRow>,
}

#[derive(Deserialize)]
struct JAttr {
    attnum: i16,
    name: String,
    typid: u32,
    typmod: i32,
    len: i16,
    byval: bool,
    align: String,
    storage: String,
    dropped: bool,
    missing: Option<String>,
    #[serde(default)]
    type_name: String,
    #[serde(default)]
    generated: String,
}

#[derive(Deserialize)]
struct ErrorMessage {
    #[serde(default)]
    relids: Vec<u32>,
}

fn code(text: &str) -> u8 {
    text.bytes().next().unwrap_or(b'?')
}

/// A parsed journal message.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalMessage {
    /// Whether the statement created the relations it names (`CREATE
    /// TABLE`, `CREATE TABLE AS`, `SELECT INTO`): their history starts here.
    pub creates: bool,
    /// Whether the statement created a relation and wrote its first rows
    /// (`CREATE TABLE AS`, `SELECT INTO`, `CREATE MATERIALIZED VIEW`): rows
    /// PostgreSQL's decoding prints, written before this message.
    pub fills: bool,
    /// Whether the statement was `CREATE MATERIALIZED VIEW`: from
    /// PostgreSQL 17 on it fills the view the way `REFRESH` does (into a
    /// new file swapped in), rows PostgreSQL's decoding does not print.
    pub matview: bool,
    /// What it changes.
    pub updates: Vec<JournalUpdate>,
}

/// Parses a journal message written in database `database`.
pub fn parse(content: &[u8], database: u32) -> Result<JournalMessage, String> {
    let message: Message =
        serde_json::from_slice(content).map_err(|e| format!("unreadable journal message: {e}"))?;
    if message.v != 1 {
        return Err(format!(
            "journal message version {} is newer than this walfill understands",
            message.v
        ));
    }
    let creates = matches!(
        message.tag.as_str(),
        "CREATE TABLE" | "CREATE TABLE AS" | "SELECT INTO"
    );
    let fills = matches!(
        message.tag.as_str(),
        "CREATE TABLE AS" | "SELECT INTO" | "CREATE MATERIALIZED VIEW"
    );
    let mut updates: Vec<JournalUpdate> = message
        .dropped
        .into_iter()
        .map(JournalUpdate::Drop)
        .collect();
    for r in message.relations {
        // Partitioned tables have no storage: their partitions' rows are
        // theirs, and TRUNCATE names them.
        if r.kind == "p" {
            updates.push(JournalUpdate::Partitioned(r.relid, r.schema, r.name));
            continue;
        }
        let Some(relfilenode) = r.relfilenode else {
            continue;
        };
        let types = TypeRows::new(r.types);
        let mut attrs = Vec::with_capacity(r.attrs.len());
        let mut infos = Vec::with_capacity(r.attrs.len());
        let mut names = Vec::with_capacity(r.attrs.len());
        for a in r.attrs {
            infos.push((!a.dropped).then(|| types.info(a.typid)));
            names.push(a.type_name);
            attrs.push(AttrSchema {
                name: a.name,
                attnum: a.attnum,
                type_oid: a.typid,
                typmod: a.typmod,
                len: a.len,
                byval: a.byval,
                align: Align::from_code(code(&a.align)).unwrap_or(Align::Int),
                storage: Storage::from_code(code(&a.storage)).unwrap_or(Storage::Plain),
                dropped: a.dropped,
                missing: a.missing,
                generated: !a.generated.is_empty(),
            });
        }
        updates.push(JournalUpdate::Upsert(NewRelation {
            oid: r.relid,
            schema: r.schema,
            name: r.name,
            file: RelFileLocator {
                spc: r.spc,
                db: database,
                rel: relfilenode,
            },
            toast_file: r.toast_relfilenode.map(|rel| RelFileLocator {
                spc: r.toast_spc.unwrap_or(r.spc),
                db: database,
                rel,
            }),
            attrs: RelSchema { attrs },
            types: infos,
            type_names: names,
            key: r.key,
            full_identity: r.replident == "f",
        }));
    }
    Ok(JournalMessage {
        creates,
        fills,
        matview: message.tag == "CREATE MATERIALIZED VIEW",
        updates,
    })
}

/// The relations a journal error message names (empty when it could not
/// say which).
pub(crate) fn parse_error(content: &[u8]) -> Vec<u32> {
    serde_json::from_slice::<ErrorMessage>(content)
        .map(|m| m.relids)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_becomes_relations_and_drops() {
        let json = r#"{"v":1,"event":"ddl","tag":"ALTER TABLE","dropped":[77],
          "relations":[{"relid":16390,"schema":"public","name":"t","kind":"r","persistence":"p",
            "spc":1663,"relfilenode":16401,"toast_relfilenode":16404,"toast_spc":1663,
            "replident":"d","key":["id"],
            "attrs":[
              {"attnum":1,"name":"id","typid":23,"typmod":-1,"len":4,"byval":true,"align":"i",
               "storage":"p","dropped":false,"generated":"","missing":null,"type_name":"integer"},
              {"attnum":2,"name":"........pg.dropped.2........","typid":0,"typmod":-1,"len":-1,
               "byval":false,"align":"i","storage":"x","dropped":true,"generated":"","missing":null,"type_name":""},
              {"attnum":3,"name":"m","typid":50000,"typmod":-1,"len":4,"byval":true,"align":"i",
               "storage":"p","dropped":false,"generated":"","missing":"ok","type_name":"mood"}],
            "types":[{"oid":50000,"name":"mood","type":"e","len":4,"byval":true,"align":"i",
               "elem":0,"base":0,"delim":",","is_array":false,"labels":[[900,"sad"],[901,"ok"]]}]},
           {"relid":16500,"schema":"public","name":"parted","kind":"p","persistence":"p","spc":1663,
            "relfilenode":null,"toast_relfilenode":null,"toast_spc":null,"replident":"d","key":[],
            "attrs":[],"types":[]}]}"#;
        let message = parse(json.as_bytes(), 5).unwrap();
        assert!(!message.creates);
        let updates = message.updates;
        assert_eq!(updates.len(), 3);
        assert_eq!(updates[0], JournalUpdate::Drop(77));
        assert_eq!(
            updates[2],
            JournalUpdate::Partitioned(16500, "public".into(), "parted".into())
        );
        let JournalUpdate::Upsert(r) = &updates[1] else {
            panic!("{updates:?}")
        };
        assert_eq!(
            r.file,
            RelFileLocator {
                spc: 1663,
                db: 5,
                rel: 16401
            }
        );
        assert_eq!(r.toast_file.map(|f| f.rel), Some(16404));
        assert_eq!(r.attrs.attrs.len(), 3);
        assert!(r.attrs.attrs[1].dropped && r.types[1].is_none());
        assert_eq!(r.attrs.attrs[2].missing.as_deref(), Some("ok"));
        assert!(matches!(
            r.types[2].as_ref().map(|t| &t.kind),
            Some(crate::types::TypeKind::Enum { .. })
        ));
        assert!(parse(br#"{"v":2}"#, 5).unwrap_err().contains("newer"));
        assert!(parse(b"not json", 5).is_err());
        assert_eq!(
            parse_error(br#"{"v":1,"error":"x","relids":[4,5]}"#),
            vec![4, 5]
        );
    }
}

/// A relation the decoder lost track of: its file changed without a journal
/// entry (VACUUM FULL or CLUSTER, which fire no event trigger), or the
/// journal reported a failure for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostRelation {
    /// Relation OID (0 when the journal could not say which).
    pub relid: u32,
    /// `schema.name`, when known.
    pub name: String,
    /// The commit from which its changes can no longer be decoded.
    pub lsn: crate::lsn::Lsn,
    /// Why.
    pub reason: String,
    /// When only one column's values are lost: the changes stay right for
    /// a consumer that does not read it. Its name then.
    pub column: Option<String>,
    /// That column's attribute number (its identity).
    pub attnum: Option<i16>,
}

/// Why a relation is lost after a journal failure message.
const JOURNAL_FAILED: &str = "the catalog journal failed to record a change";

/// Journal entries of transactions not yet committed, and the catalog each
/// such transaction sees (its own schema changes included).
#[derive(Debug, Default)]
pub(crate) struct JournalTracker {
    pending: rustc_hash::FxHashMap<u32, Vec<(u32, Pending)>>,
    overlays: rustc_hash::FxHashMap<u32, super::Catalog>,
    prepared: rustc_hash::FxHashSet<u32>,
    /// Relations whose creation was seen, by OID.
    pub(crate) created: rustc_hash::FxHashMap<u32, Creation>,
    /// Relations lost so far.
    pub(crate) lost: Vec<LostRelation>,
    /// Files each open transaction wrote while no known relation had them.
    unseen: rustc_hash::FxHashMap<u32, rustc_hash::FxHashSet<crate::wal::RelFileLocator>>,
}

#[derive(Clone, Debug)]
enum Pending {
    Update(JournalUpdate, bool),
    /// Relations whose changes cannot be decoded from the commit on, and
    /// why (none named: the journal could not say which).
    Lost(Vec<u32>, &'static str),
    /// A column whose stored values the statement changed without a row
    /// change in the WAL.
    Rewritten {
        relid: u32,
        name: String,
        column: String,
        attnum: i16,
        reason: String,
    },
}

/// Where a relation's history starts: the commit of the statement that
/// created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creation {
    /// Commit LSN of the creating transaction.
    pub commit_lsn: crate::lsn::Lsn,
    /// Its top-level xid.
    pub xid: u32,
}

impl JournalTracker {
    /// The catalog transaction `top` sees.
    pub(crate) fn catalog_for<'a>(
        &'a self,
        top: u32,
        global: &'a super::Catalog,
    ) -> &'a super::Catalog {
        self.overlays.get(&top).unwrap_or(global)
    }

    /// A journal message of `subxid` (in `top`) at its LSN.
    pub(crate) fn message(
        &mut self,
        top: u32,
        subxid: u32,
        message: JournalMessage,
        global: &super::Catalog,
    ) {
        let overlay = self.overlays.entry(top).or_insert_with(|| global.clone());
        let mut rewritten = Vec::new();
        for u in &message.updates {
            if let JournalUpdate::Upsert(new) = u {
                if let Some(old) = overlay.by_oid(new.oid) {
                    rewritten.extend(rewritten_columns(&old.spec, new));
                }
            }
            apply(overlay, u);
        }
        let pending = self.pending.entry(top).or_default();
        pending.extend(rewritten.into_iter().map(|p| (subxid, p)));
        let creates = message.creates;
        self.pending.entry(top).or_default().extend(
            message
                .updates
                .into_iter()
                .map(|u| (subxid, Pending::Update(u, creates))),
        );
    }

    /// Whether some transaction has catalog changes not yet committed.
    pub(crate) fn has_overlays(&self) -> bool {
        !self.overlays.is_empty()
    }

    /// Transaction `top` wrote `file`, which no relation it knows of has.
    pub(crate) fn unknown_file(&mut self, top: u32, file: crate::wal::RelFileLocator) {
        if top != 0 {
            self.unseen.entry(top).or_default().insert(file);
        }
    }

    /// A journal message of `top` described `file` after all.
    pub(crate) fn seen(&mut self, top: u32, file: &crate::wal::RelFileLocator) {
        if let Some(files) = self.unseen.get_mut(&top) {
            files.remove(file);
        }
    }

    /// A journal failure message of `subxid` (in `top`).
    pub(crate) fn failure(&mut self, top: u32, subxid: u32, relids: Vec<u32>) {
        self.lose(top, subxid, relids, JOURNAL_FAILED);
    }

    /// `subxid` (in `top`) gave relations `relids` files the decoder cannot
    /// tell: their changes are lost from its commit on.
    pub(crate) fn lose(&mut self, top: u32, subxid: u32, relids: Vec<u32>, why: &'static str) {
        self.pending
            .entry(top)
            .or_default()
            .push((subxid, Pending::Lost(relids, why)));
    }

    /// Subtransactions rolled back: their journal entries never happened.
    pub(crate) fn rolled_back(&mut self, top: u32, subxids: &[u32], global: &super::Catalog) {
        let Some(entries) = self.pending.get_mut(&top) else {
            return;
        };
        let before = entries.len();
        entries.retain(|(s, _)| !subxids.contains(s));
        if entries.len() != before {
            let mut overlay = global.clone();
            for (_, p) in entries.iter() {
                if let Pending::Update(u, _) = p {
                    apply(&mut overlay, u);
                }
            }
            self.overlays.insert(top, overlay);
        }
    }

    /// Changes of relation `relid` from `lsn` on cannot be decoded.
    pub(crate) fn lost_changes(
        &mut self,
        relid: u32,
        name: String,
        lsn: crate::lsn::Lsn,
        reason: String,
    ) {
        // The latest loss of a relation is enough to tell whether a replay
        // from any point is affected (see how losses are read).
        if let Some(known) = self
            .lost
            .iter_mut()
            .find(|l| l.relid == relid && l.column.is_none() && l.reason == reason)
        {
            known.lsn = known.lsn.max(lsn);
            return;
        }
        self.lost.push(LostRelation {
            relid,
            name,
            lsn,
            reason,
            column: None,
            attnum: None,
        });
    }

    /// A top-level transaction aborted (or crashed).
    pub(crate) fn aborted(&mut self, top: u32) {
        self.unseen.remove(&top);
        self.pending.remove(&top);
        self.overlays.remove(&top);
        self.prepared.remove(&top);
    }

    /// `PREPARE TRANSACTION`: its entries wait for COMMIT PREPARED.
    pub(crate) fn prepared(&mut self, xid: u32) {
        self.prepared.insert(xid);
    }

    /// Forgets transactions that can no longer be running (prepared ones
    /// can).
    pub(crate) fn forget(&mut self, gone: impl Fn(u32) -> bool) {
        let prepared = &self.prepared;
        self.pending
            .retain(|xid, _| prepared.contains(xid) || !gone(*xid));
        self.overlays
            .retain(|xid, _| prepared.contains(xid) || !gone(*xid));
        self.unseen
            .retain(|xid, _| prepared.contains(xid) || !gone(*xid));
    }

    /// A transaction committed at `lsn`, dropping `dropped_files` and
    /// having created `created_files` (main forks, in WAL order): its
    /// journal entries join `global`. A known relation whose file it dropped
    /// without a journal entry was rewritten by `CLUSTER` or `VACUUM FULL`,
    /// which create the new heap first (then its TOAST table, then the
    /// indexes) and fire no trigger: it moves to those files. When the
    /// transaction created none, the relation is lost, unless `moved_to`
    /// names another file of it (recorded outside the WAL).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn committed(
        &mut self,
        top: u32,
        lsn: crate::lsn::Lsn,
        dropped_files: &[crate::wal::RelFileLocator],
        created_files: &[crate::wal::RelFileLocator],
        global: &mut super::Catalog,
        moved_to: impl Fn(u32, &crate::wal::RelFileLocator) -> bool,
    ) {
        self.overlays.remove(&top);
        self.prepared.remove(&top);
        let unseen = self.unseen.remove(&top).unwrap_or_default();
        for (_, p) in self.pending.remove(&top).unwrap_or_default() {
            match p {
                Pending::Update(u, creates) => {
                    if let (true, JournalUpdate::Upsert(r)) = (creates, &u) {
                        self.created.entry(r.oid).or_insert(Creation {
                            commit_lsn: lsn,
                            xid: top,
                        });
                        // CREATE TABLE AS writes rows before the journal
                        // can describe the table: they cannot be decoded.
                        if unseen.contains(&r.file) {
                            self.lost.push(LostRelation {
                                relid: r.oid,
                                name: format!("{}.{}", r.schema, r.name),
                                lsn,
                                reason: "the statement that created it also wrote its first \
                                         rows (CREATE TABLE AS, SELECT INTO), before the \
                                         catalog journal could describe it; a base snapshot \
                                         (which a snapshot backfill writes) can replace them"
                                    .into(),
                                column: None,
                                attnum: None,
                            });
                        }
                    }
                    apply(global, &u)
                }
                Pending::Rewritten {
                    relid,
                    name,
                    column,
                    attnum,
                    reason,
                } => self.lost.push(LostRelation {
                    relid,
                    name,
                    lsn,
                    reason: format!("column {column} {reason}"),
                    column: Some(column),
                    attnum: Some(attnum),
                }),
                Pending::Lost(relids, why) => {
                    let reason = why.to_string();
                    if relids.is_empty() {
                        self.lost.push(LostRelation {
                            relid: 0,
                            name: String::new(),
                            lsn,
                            reason: reason.clone(),
                            column: None,
                            attnum: None,
                        });
                    }
                    for relid in relids {
                        let name = global
                            .by_oid(relid)
                            .map(|r| r.qualified_name())
                            .unwrap_or_default();
                        global.remove(relid);
                        self.lost.push(LostRelation {
                            relid,
                            name,
                            lsn,
                            reason: reason.clone(),
                            column: None,
                            attnum: None,
                        });
                    }
                }
            }
        }
        for file in dropped_files {
            let owner = global
                .by_file(file)
                .cloned()
                .or_else(|| global.by_toast_file(file).cloned());
            if let Some(rel) = owner {
                if rel.spec.file != *file && dropped_files.contains(&rel.spec.file) {
                    // Its TOAST file: the main file's drop decides.
                    continue;
                }
                let mut new_files = created_files
                    .iter()
                    .filter(|f| global.by_file(f).is_none() && !global.is_toast(f));
                if let (true, Some(heap)) = (rel.spec.file == *file, new_files.next()) {
                    let mut spec = rel.spec.clone();
                    spec.file = *heap;
                    spec.toast_file = spec.toast_file.and_then(|_| new_files.next().copied());
                    global.insert(super::RelationSchema::new(spec));
                    continue;
                }
                if moved_to(rel.spec.oid, file) {
                    continue;
                }
                global.remove(rel.spec.oid);
                self.lost.push(LostRelation {
                    relid: rel.spec.oid,
                    name: rel.qualified_name(),
                    lsn,
                    reason: "its storage was rewritten without a catalog journal entry \
                             (VACUUM FULL or CLUSTER)"
                        .into(),
                    column: None,
                    attnum: None,
                });
            }
        }
    }
}

/// Columns whose stored values a schema change from `old` to `new` changed
/// without row changes in the WAL: a column added with a default existing
/// rows take, or retyped (or added) while the table was rewritten. Each as
/// `(attnum, name, why)`.
pub fn changed_without_rows(old: &NewRelation, new: &NewRelation) -> Vec<(i16, String, String)> {
    rewritten_columns(old, new)
        .into_iter()
        .filter_map(|p| match p {
            Pending::Rewritten {
                attnum,
                column,
                reason,
                ..
            } => Some((attnum, column, reason)),
            _ => None,
        })
        .collect()
}

fn rewritten_columns(old: &NewRelation, new: &NewRelation) -> Vec<Pending> {
    let rewrite = old.file != new.file;
    let mut out = Vec::new();
    for attr in new.attrs.attrs.iter().filter(|a| !a.dropped) {
        let before = old
            .attrs
            .attrs
            .iter()
            .find(|o| o.attnum == attr.attnum && !o.dropped);
        let reason = match before {
            None if attr.missing.is_some() => {
                "was added with a default that existing rows take".to_string()
            }
            None if rewrite => "was added while the table was rewritten".to_string(),
            Some(o) if rewrite && (o.type_oid != attr.type_oid || o.typmod != attr.typmod) => {
                "changed type, and the table was rewritten with converted values".to_string()
            }
            // A rename changes nothing: columns are matched by number.
            _ => continue,
        };
        out.push(Pending::Rewritten {
            relid: new.oid,
            name: format!("{}.{}", new.schema, new.name),
            column: attr.name.clone(),
            attnum: attr.attnum,
            reason,
        });
    }
    out
}

fn apply(catalog: &mut super::Catalog, update: &JournalUpdate) {
    match update {
        JournalUpdate::Upsert(r) => catalog.insert(super::RelationSchema::new(r.clone())),
        JournalUpdate::Drop(relid) => catalog.remove(*relid),
        JournalUpdate::Partitioned(oid, schema, name) => {
            catalog.remove(*oid);
            catalog.insert_partitioned(*oid, schema.clone(), name.clone())
        }
    }
}
