//! The files a `TRUNCATE` gives the tables it empties, read from the WAL.
//!
//! `TRUNCATE` fires no event trigger, and gives every table it empties a
//! new, empty heap file (and TOAST table) unless the table's file is the
//! current subtransaction's own (then it empties the file in place). Its WAL
//! shows, per table in the order its `XLOG_HEAP_TRUNCATE` record lists them:
//! an smgr create of the new heap, of the new TOAST table when the table has
//! one, then of each rebuilt index (the table's, then the TOAST table's),
//! each index build writing its first pages at once; then the sequences
//! `RESTART IDENTITY` resets (written at once too), then the truncate record.
//! The heaps and TOAST tables are the only files created and not written
//! before the record, so reading the statement's unwritten new files
//! backwards from the record pairs them with its tables, last to first.

use super::catalog::{Catalog, NewRelation};
use super::held::Created;
use crate::wal::RelFileLocator;
use walfill_core::xid::precedes as xid_precedes;

/// What a TRUNCATE did to the tables it names.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Truncated {
    /// Tables with their new files.
    pub(super) moved: Vec<NewRelation>,
    /// Orphan files (created without an xid) among the new ones.
    pub(super) files: Vec<RelFileLocator>,
    /// Tables whose new files could not be told apart.
    pub(super) unknown: Vec<u32>,
}

/// Pairs the tables `relids` (in the truncate record's order) that
/// subtransaction `subxid` truncated with the files `created` (its
/// transaction's, in WAL order, all before the record). `describe` finds a
/// table's description; a relation it does not know may be a partitioned
/// table (`partitioned`), which has no files.
pub(super) fn new_files<'a>(
    relids: &[u32],
    subxid: u32,
    created: &[Created],
    catalog: &Catalog,
    describe: impl Fn(u32) -> Option<&'a NewRelation>,
) -> Truncated {
    let mut out = Truncated::default();
    let mut fresh: Vec<&Created> = created
        .iter()
        .filter(|c| {
            !c.written
                && c.file.db == catalog.database
                && catalog.by_file(&c.file).is_none()
                && !catalog.is_toast(&c.file)
        })
        .collect();
    // Once a table's new files are unclear, so are those of every table
    // before it.
    let mut lost_track = false;
    for oid in relids.iter().rev() {
        let Some(rel) = describe(*oid) else {
            if catalog.partitioned(*oid).is_none() {
                lost_track = true;
            }
            continue;
        };
        if created
            .iter()
            .any(|c| c.file == rel.file && owns(subxid, c.subxid))
        {
            continue;
        }
        let needed = 1 + usize::from(rel.toast_file.is_some());
        if lost_track || fresh.len() < needed {
            lost_track = true;
            out.unknown.push(*oid);
            continue;
        }
        let toast = rel.toast_file.and_then(|_| fresh.pop());
        let heap = fresh.pop().expect("counted above");
        for c in [Some(heap), toast].into_iter().flatten() {
            if c.subxid == 0 {
                out.files.push(c.file);
            }
        }
        let mut moved = rel.clone();
        moved.file = heap.file;
        moved.toast_file = toast.map(|c| c.file);
        out.moved.push(moved);
    }
    out.moved.reverse();
    out.unknown.reverse();
    out
}

/// Whether a file subtransaction `creator` made is subtransaction
/// `subxid`'s own, so that its TRUNCATE empties it in place: made by it, or
/// by a subtransaction since released into it (PostgreSQL hands a released
/// subtransaction's new files to its parent). Only a descendant of `subxid`
/// can have got its xid after `subxid` did and ended before this TRUNCATE
/// (a subtransaction gets its xid after its parents' and a sibling's runs
/// after the earlier one ended); one rolled back left no file the catalog
/// still names.
fn owns(subxid: u32, creator: u32) -> bool {
    subxid != 0 && creator != 0 && (creator == subxid || xid_precedes(subxid, creator))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::RelationSchema;
    use crate::lsn::Lsn;
    use crate::tuple::RelSchema;

    fn file(rel: u32) -> RelFileLocator {
        RelFileLocator {
            spc: 1663,
            db: 5,
            rel,
        }
    }

    fn table(oid: u32, heap: u32, toast: Option<u32>) -> NewRelation {
        NewRelation {
            oid,
            schema: "public".into(),
            name: format!("t{oid}"),
            file: file(heap),
            toast_file: toast.map(file),
            attrs: RelSchema { attrs: Vec::new() },
            types: Vec::new(),
            type_names: Vec::new(),
            key: Vec::new(),
            full_identity: false,
        }
    }

    /// `(file, subxid, written)`, in WAL order.
    fn creates(list: &[(u32, u32, bool)]) -> Vec<Created> {
        list.iter()
            .enumerate()
            .map(|(i, &(rel, subxid, written))| Created {
                file: file(rel),
                subxid,
                lsn: Lsn(100 + i as u64),
                written,
                not_a_table: written,
            })
            .collect()
    }

    fn catalog(tables: &[NewRelation]) -> Catalog {
        let mut catalog = Catalog::new(5);
        for t in tables {
            catalog.insert(RelationSchema::new(t.clone()));
        }
        catalog
    }

    fn run(relids: &[u32], subxid: u32, created: &[Created], catalog: &Catalog) -> Truncated {
        new_files(relids, subxid, created, catalog, |oid| {
            catalog.by_oid(oid).map(|r| &r.spec)
        })
    }

    /// `TRUNCATE a, b RESTART IDENTITY` as PostgreSQL 15 logs it: a (TOAST,
    /// three indexes), b (no TOAST, a key), a sequence.
    #[test]
    fn pairs_heaps_and_toast_tables_past_indexes_and_sequences() {
        let a = table(10, 100, Some(101));
        let b = table(20, 200, None);
        let catalog = catalog(&[a.clone(), b.clone()]);
        let created = creates(&[
            (500, 7, false), // a's heap
            (501, 7, false), // a's TOAST table
            (502, 7, true),  // a's key
            (503, 7, true),  // a hash index
            (504, 7, true),  // a gist index
            (505, 7, true),  // the TOAST table's index
            (506, 7, false), // b's heap
            (507, 7, true),  // b's key
            (508, 7, true),  // the sequence
        ]);
        let out = run(&[10, 20], 7, &created, &catalog);
        assert!(out.unknown.is_empty());
        let files: Vec<_> = out
            .moved
            .iter()
            .map(|r| (r.oid, r.file.rel, r.toast_file.map(|f| f.rel)))
            .collect();
        assert_eq!(files, vec![(10, 500, Some(501)), (20, 506, None)]);
    }

    /// Files of earlier statements of the transaction are left alone: a
    /// table created (and described) before, another's CLUSTER.
    #[test]
    fn earlier_statements_files_are_not_taken() {
        let a = table(10, 100, None);
        let created_table = table(30, 300, None);
        let catalog = catalog(&[a, created_table]);
        let created = creates(&[
            (300, 7, false),
            (999, 7, false),
            (600, 7, false),
            (601, 7, true),
        ]);
        let out = run(&[10], 7, &created, &catalog);
        assert_eq!(out.moved.len(), 1);
        assert_eq!(out.moved[0].file.rel, 600);
    }

    /// A table whose file its own subtransaction created is emptied in
    /// place; one created by another subtransaction gets a new file; a
    /// partitioned table has none.
    #[test]
    fn in_place_and_partitioned_tables_take_no_file() {
        let own = table(10, 100, Some(101));
        let parent_sub = table(20, 200, None);
        let mut catalog = catalog(&[own, parent_sub]);
        catalog.insert_partitioned(5, "public".into(), "p".into());
        let created = creates(&[
            (100, 8, false),
            (101, 8, false),
            (200, 7, false),
            (700, 0, false),
        ]);
        let out = run(&[5, 10, 20], 8, &created, &catalog);
        assert_eq!(out.moved.len(), 1);
        assert_eq!((out.moved[0].oid, out.moved[0].file.rel), (20, 700));
        assert_eq!(out.files, vec![file(700)], "the orphan file is adopted");
    }

    /// A file a subtransaction made becomes its parent's when it is
    /// released (and so its ancestors' in turn): truncated by any of them
    /// later, the table is emptied in place. A subtransaction begun under
    /// the file's maker, or after it was released, gets new files.
    #[test]
    fn a_released_subtransactions_file_is_its_ancestors_own() {
        let a = table(10, 100, Some(101));
        let catalog = catalog(&[a]);
        // Made by 9; 7 is the top, 8 the savepoint 9 was released into.
        let created = creates(&[(100, 9, false), (101, 9, false), (600, 0, false)]);
        for ancestor in [9, 8, 7] {
            let out = run(&[10], ancestor, &created, &catalog);
            assert!(out.moved.is_empty() && out.unknown.is_empty(), "{ancestor}");
        }
        let created = creates(&[
            (100, 9, false),
            (101, 9, false),
            (600, 10, false),
            (601, 10, false),
        ]);
        let out = run(&[10], 10, &created, &catalog);
        assert_eq!(
            out.moved.iter().map(|r| r.file.rel).collect::<Vec<_>>(),
            vec![600]
        );
    }

    /// Too few new files, or a table nothing describes after others: the
    /// tables before it are named unknown, never paired by guess.
    #[test]
    fn unclear_files_are_reported_not_guessed() {
        let a = table(10, 100, Some(101));
        let b = table(20, 200, None);
        let catalog = catalog(&[a, b]);
        let created = creates(&[(500, 7, false), (506, 7, false)]);
        let out = run(&[10, 20], 7, &created, &catalog);
        assert_eq!(
            out.moved.iter().map(|r| r.oid).collect::<Vec<_>>(),
            vec![20]
        );
        assert_eq!(out.unknown, vec![10]);

        let created = creates(&[(500, 7, false), (501, 7, false), (600, 7, false)]);
        let out = run(&[10, 99, 20], 7, &created, &catalog);
        assert_eq!(
            out.moved.iter().map(|r| r.oid).collect::<Vec<_>>(),
            vec![20]
        );
        assert_eq!(out.unknown, vec![10]);
    }
}
