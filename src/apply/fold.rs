//! Folding a run of source changes to one pending write per key.
//!
//! Within a batch only the last change to each key matters, provided values
//! an update did not resend (unchanged TOAST) are carried over from the
//! earlier change to the same row. A key change becomes a tombstone for the
//! old key and a write for the new one; when the new row still lacks values,
//! it remembers which stored row to take them from (`fill_key`).

use std::collections::HashMap;
use std::sync::Arc;

use walfill_replay::{Datum, Relation, RowChange, Version};

use crate::error::{Error, Result};
use crate::plan::Plan;

/// What to do with a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Store this row (subject to the filter and the version rule).
    Upsert,
    /// Store a tombstone.
    Delete,
}

/// The pending write for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Upsert or tombstone.
    pub op: Op,
    /// The version of the change that produced it.
    pub version: Version,
    /// Values of the plan's replicated source columns, in order.
    pub values: Vec<Datum>,
    /// The key of the stored row to take still-unchanged values from, when it
    /// differs from this entry's own key.
    pub fill_key: Option<Vec<String>>,
}

/// Pending writes by key, for one plan.
#[derive(Debug, Default)]
pub struct Fold {
    entries: HashMap<Vec<String>, Entry>,
    /// Memory taken by entries added, overwritten ones included.
    bytes: usize,
}

/// Bytes a value takes beyond its text (the allocator's share included), and
/// an entry beyond its key and values (the hash table's spare room included:
/// it doubles when it grows).
const PER_VALUE: usize = std::mem::size_of::<Datum>() + 32;
const PER_ENTRY: usize =
    2 * (std::mem::size_of::<Entry>() + std::mem::size_of::<Vec<String>>()) + 32;

fn size_of_values<'a>(values: impl IntoIterator<Item = &'a Datum>) -> usize {
    values
        .into_iter()
        .map(|v| match v {
            Datum::Text(t) => PER_VALUE + t.len(),
            _ => PER_VALUE,
        })
        .sum()
}

/// How a relation's columns line up with the plan's replicated columns.
#[derive(Debug)]
pub struct ColumnMap {
    relation: Arc<Relation>,
    /// For each plan column, its index in the relation (None if absent).
    positions: Vec<Option<usize>>,
    /// For each key column, its index in the relation.
    key_positions: Vec<usize>,
}

impl ColumnMap {
    /// Lines up `relation` with `plan`; fails when a column the transform
    /// reads is gone or changed type, which needs a new version.
    pub fn new(plan: &Plan, relation: Arc<Relation>) -> Result<ColumnMap> {
        ColumnMap::build(plan, relation, false)
    }

    /// Lines up an earlier description of the table with `plan`, for
    /// replayed history: a column the table did not have yet reads as NULL,
    /// and a value of a column since retyped is cast to its current type.
    /// (Schema changes that changed stored values without row changes are
    /// caught before: see [`crate::planner::blocking_loss`].)
    pub fn historical(plan: &Plan, relation: Arc<Relation>) -> Result<ColumnMap> {
        ColumnMap::build(plan, relation, true)
    }

    fn build(plan: &Plan, relation: Arc<Relation>, historical: bool) -> Result<ColumnMap> {
        let mut positions = Vec::new();
        for column in plan.source.replicated_columns() {
            let position = relation.column_index(&column.name);
            let read = plan.referenced.contains(&column.name) || plan.key.contains(&column.name);
            match position {
                _ if historical && !plan.key.contains(&column.name) => positions.push(position),
                None if read => {
                    return Err(schema_changed(
                        plan,
                        &format!("column {} was dropped", column.name),
                    ))
                }
                Some(p) if read && relation.columns[p].type_oid != column.type_oid => {
                    return Err(schema_changed(
                        plan,
                        &format!("column {} changed type", column.name),
                    ))
                }
                _ => positions.push(position),
            }
        }
        let key_positions = plan
            .key
            .iter()
            .map(|k| {
                relation.column_index(k).ok_or_else(|| {
                    Error::History(format!(
                        "key column {k} of {} is missing from an earlier description of the \
                         table",
                        plan.source
                    ))
                })
            })
            .collect::<Result<_>>()?;
        Ok(ColumnMap {
            relation,
            positions,
            key_positions,
        })
    }

    /// Whether this map was built for exactly this relation description.
    pub fn is_for(&self, relation: &Arc<Relation>) -> bool {
        Arc::ptr_eq(&self.relation, relation) || *self.relation == **relation
    }

    fn key(&self, row: &[Datum]) -> Result<Vec<String>> {
        self.key_positions
            .iter()
            .map(|&p| match row.get(p) {
                Some(Datum::Text(t)) => Ok(t.clone()),
                _ => Err(Error::State(format!(
                    "a change to {}.{} arrived without its key value",
                    self.relation.schema, self.relation.name
                ))),
            })
            .collect()
    }

    fn values(&self, row: &[Datum]) -> Vec<Datum> {
        self.positions
            .iter()
            .map(|p| p.and_then(|p| row.get(p).cloned()).unwrap_or(Datum::Null))
            .collect()
    }
}

fn schema_changed(plan: &Plan, what: &str) -> Error {
    Error::State(format!(
        "source table {} changed under version {} of target {}: {what}, and the transform \
         reads it; update the target's select and build a new version",
        plan.source, plan.def.version, plan.def.target
    ))
}

impl Fold {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// About how much memory the pending writes take (an overestimate:
    /// overwritten entries still count until the fold is drained).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes the pending writes out.
    pub fn drain(&mut self) -> impl Iterator<Item = (Vec<String>, Entry)> + '_ {
        self.bytes = 0;
        self.entries.drain()
    }

    fn insert(&mut self, key: Vec<String>, entry: Entry) {
        self.bytes += PER_ENTRY
            + key.iter().map(|k| PER_VALUE + k.len()).sum::<usize>()
            + size_of_values(&entry.values);
        self.entries.insert(key, entry);
    }

    /// Adds one row change (not a truncate) of the plan's table.
    pub fn add(&mut self, map: &ColumnMap, change: &RowChange, version: Version) -> Result<()> {
        match change {
            RowChange::Insert { new, .. } => {
                let entry = Entry {
                    op: Op::Upsert,
                    version,
                    values: map.values(new),
                    fill_key: None,
                };
                self.insert(map.key(new)?, entry);
            }
            RowChange::Update { old, new, .. } => {
                let new_key = map.key(new)?;
                let old_key = match old {
                    Some(old) => map.key(old)?,
                    None => new_key.clone(),
                };
                let mut values = map.values(new);
                let mut fill_key = None;
                if values.contains(&Datum::Unchanged) {
                    // A whole old row (REPLICA IDENTITY FULL) has every value;
                    // a key image has nulls for everything but the key.
                    let old_full = old
                        .as_ref()
                        .filter(|_| map.relation.full_identity)
                        .map(|o| map.values(o))
                        .filter(|o| !o.contains(&Datum::Unchanged));
                    let earlier = self.entries.get(&old_key).filter(|e| e.op == Op::Upsert);
                    let source = old_full.as_deref().or(earlier.map(|e| e.values.as_slice()));
                    if let Some(source) = source {
                        for (value, prior) in values.iter_mut().zip(source) {
                            if *value == Datum::Unchanged {
                                *value = prior.clone();
                            }
                        }
                    }
                    if values.contains(&Datum::Unchanged) {
                        fill_key = match earlier {
                            Some(e) => e.fill_key.clone().or_else(|| Some(old_key.clone())),
                            None => Some(old_key.clone()),
                        }
                        .filter(|k| *k != new_key);
                    }
                }
                if old_key != new_key {
                    self.insert(
                        old_key,
                        Entry {
                            op: Op::Delete,
                            version,
                            values: Vec::new(),
                            fill_key: None,
                        },
                    );
                }
                self.insert(
                    new_key,
                    Entry {
                        op: Op::Upsert,
                        version,
                        values,
                        fill_key,
                    },
                );
            }
            RowChange::Delete { old, .. } => {
                let entry = Entry {
                    op: Op::Delete,
                    version,
                    values: Vec::new(),
                    fill_key: None,
                };
                self.insert(map.key(old)?, entry);
            }
            RowChange::Truncate { .. } | RowChange::Message { .. } => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::QualifiedName;
    use crate::plan::{Definition, OutputColumn};
    use walfill_replay::{Column, Lsn};
    use walfill_snapshot::{ReplicaIdentity, SourceTable, TableColumn};

    fn plan() -> Plan {
        let col = |attnum, name: &str, type_oid, len| TableColumn {
            attnum,
            name: name.into(),
            sql_type: "x".into(),
            type_oid,
            len,
            storage: 'x',
            generated: None,
        };
        Plan {
            def: Definition {
                target: "t".into(),
                version: "v1".into(),
                dest_schema: "public".into(),
                source: QualifiedName {
                    schema: "public".into(),
                    name: "docs".into(),
                },
                key: None,
                select: "id, body".into(),
                filter: None,
            },
            source: SourceTable {
                schema: "public".into(),
                name: "docs".into(),
                oid: 1,
                columns: vec![
                    col(1, "id", 23, 4),
                    col(2, "body", 25, -1),
                    col(3, "n", 23, 4),
                ],
                replica_identity: ReplicaIdentity::Default,
                key: vec!["id".into()],
                estimated_rows: 0,
            },
            key: vec!["id".into()],
            outputs: vec![OutputColumn {
                name: "id".into(),
                sql_type: "integer".into(),
            }],
            hidden: Vec::new(),
            referenced: vec!["id".into(), "body".into()],
        }
    }

    fn relation(full: bool) -> Arc<Relation> {
        let col = |name: &str, type_oid, is_key| Column {
            name: name.into(),
            type_oid,
            type_modifier: -1,
            type_name: String::new(),
            is_key,
        };
        Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: "docs".into(),
            // The stream's column order differs from the table's: mapped by name.
            columns: vec![
                col("n", 23, full),
                col("id", 23, true),
                col("body", 25, full),
            ],
            full_identity: full,
        })
    }

    fn t(s: &str) -> Datum {
        Datum::Text(s.into())
    }

    fn v(lsn: u64, seq: u32) -> Version {
        Version {
            commit_lsn: Lsn(lsn),
            seq,
        }
    }

    #[test]
    fn last_change_per_key_wins_and_values_are_reordered() {
        let rel = relation(false);
        let map = ColumnMap::new(&plan(), rel.clone()).unwrap();
        let mut fold = Fold::default();
        let insert = RowChange::Insert {
            relation: rel.clone(),
            new: vec![t("7"), t("1"), t("a")],
        };
        let update = RowChange::Update {
            relation: rel.clone(),
            old: None,
            new: vec![t("8"), t("1"), Datum::Unchanged],
        };
        fold.add(&map, &insert, v(10, 1)).unwrap();
        fold.add(&map, &update, v(10, 2)).unwrap();
        let entries: HashMap<_, _> = fold.drain().collect();
        assert_eq!(entries.len(), 1);
        let e = &entries[&vec!["1".to_string()]];
        assert_eq!(e.version, v(10, 2));
        // The unchanged body came from the insert earlier in the batch.
        assert_eq!(e.values, vec![t("1"), t("a"), t("8")]);
        assert_eq!(e.fill_key, None);
    }

    #[test]
    fn key_change_leaves_a_tombstone_and_remembers_where_to_fill_from() {
        let rel = relation(false);
        let map = ColumnMap::new(&plan(), rel.clone()).unwrap();
        let mut fold = Fold::default();
        let moved = RowChange::Update {
            relation: rel.clone(),
            old: Some(vec![Datum::Null, t("1"), Datum::Null]),
            new: vec![t("3"), t("2"), Datum::Unchanged],
        };
        fold.add(&map, &moved, v(20, 1)).unwrap();
        let moved_again = RowChange::Update {
            relation: rel.clone(),
            old: Some(vec![Datum::Null, t("2"), Datum::Null]),
            new: vec![t("4"), t("5"), Datum::Unchanged],
        };
        fold.add(&map, &moved_again, v(21, 1)).unwrap();
        let entries: HashMap<_, _> = fold.drain().collect();
        let key = |k: &str| vec![k.to_string()];
        assert_eq!(entries[&key("1")].op, Op::Delete);
        assert_eq!(entries[&key("2")].op, Op::Delete);
        assert_eq!(entries[&key("2")].version, v(21, 1));
        let last = &entries[&key("5")];
        assert_eq!(last.op, Op::Upsert);
        assert_eq!(last.values[1], Datum::Unchanged);
        // Still unknown: fill from the stored row of the first key.
        assert_eq!(last.fill_key, Some(key("1")));
    }

    #[test]
    fn a_key_image_is_not_a_whole_old_row_but_a_full_identity_row_is() {
        let mut fold = Fold::default();
        let rel = relation(false);
        let map = ColumnMap::new(&plan(), rel.clone()).unwrap();
        let change = RowChange::Update {
            relation: rel,
            old: Some(vec![Datum::Null, t("1"), Datum::Null]),
            new: vec![t("3"), t("2"), Datum::Unchanged],
        };
        fold.add(&map, &change, v(30, 1)).unwrap();
        let entries: HashMap<_, _> = fold.drain().collect();
        assert_eq!(entries[&vec!["2".to_string()]].values[1], Datum::Unchanged);

        let rel = relation(true);
        let map = ColumnMap::new(&plan(), rel.clone()).unwrap();
        let change = RowChange::Update {
            relation: rel,
            old: Some(vec![t("3"), t("1"), t("old body")]),
            new: vec![t("3"), t("1"), Datum::Unchanged],
        };
        fold.add(&map, &change, v(31, 1)).unwrap();
        let entries: HashMap<_, _> = fold.drain().collect();
        let e = &entries[&vec!["1".to_string()]];
        assert_eq!(e.values[1], t("old body"));
        assert_eq!(e.fill_key, None);
    }

    #[test]
    fn a_dropped_column_the_transform_reads_is_refused() {
        let rel = Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: "docs".into(),
            columns: vec![Column {
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
                type_name: String::new(),
                is_key: true,
            }],
            full_identity: false,
        });
        let err = ColumnMap::new(&plan(), rel).unwrap_err().to_string();
        assert!(err.contains("column body was dropped"), "{err}");
        assert!(err.contains("build a new version"), "{err}");
    }
}
