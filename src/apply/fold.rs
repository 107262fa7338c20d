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
        let mut positions = Vec::new();
        for column in plan.source.replicated_columns() {
            let position = relation.column_index(&column.name);
            let read = plan.referenced.contains(&column.name) || plan.key.contains(&column.name);
            match position {
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
                relation
                    .column_index(k)
                    .expect("key columns are checked above")
            })
            .collect();
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

    /// Takes the pending writes out.
    pub fn drain(&mut self) -> impl Iterator<Item = (Vec<String>, Entry)> + '_ {
        self.entries.drain()
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
                self.entries.insert(map.key(new)?, entry);
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
                    self.entries.insert(
                        old_key,
                        Entry {
                            op: Op::Delete,
                            version,
                            values: Vec::new(),
                            fill_key: None,
                        },
                    );
                }
                self.entries.insert(
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
                self.entries.insert(map.key(old)?, entry);
            }
            RowChange::Truncate { .. } => {}
        }
        Ok(())
    }
}
