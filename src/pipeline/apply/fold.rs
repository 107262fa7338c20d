//! Folding a run of source changes to one pending write per key.
//!
//! Within a batch only the last change to each key matters, provided values
//! an update did not resend (unchanged TOAST) are carried over from the
//! earlier change to the same row. A key change becomes a tombstone for the
//! old key and a write for the new one; when the new row still lacks values,
//! it remembers which stored row to take them from (`fill_key`).

mod arena;
pub(crate) mod record;

use std::collections::HashMap;
use std::sync::Arc;

use arena::Arena;
pub(crate) use arena::Sorted;

use walfill_core::{Datum, Relation, RowChange, Version};

use crate::error::{Error, Result};
use crate::pipeline::version_sql::Plan;

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
    /// Its transaction's xid (32 bits, as the stream sends it), when known:
    /// it decides against rows of a chunked copy.
    pub xid: Option<u32>,
    /// Values of the plan's replicated source columns, in order.
    pub values: Vec<Datum>,
    /// The key of the stored row to take still-unchanged values from, when it
    /// differs from this entry's own key.
    pub fill_key: Option<Vec<String>>,
}

/// Pending writes by key, for one plan.
#[derive(Debug, Default)]
pub struct Fold {
    entries: Arena,
    /// Keys of entries whose still-unchanged values are to come from
    /// another key's row (`fill_key`), once asked to track them.
    pending_fills: Option<Vec<Vec<String>>>,
}

/// Whether a relation description comes from the table's past (replayed
/// WAL) or from the present (the live stream, a snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// An earlier description: a column the table did not have yet reads as
    /// NULL, and a value of a column retyped since is cast to its current
    /// type. (Schema changes that changed stored values without row changes
    /// are refused before: see [`crate::pipeline::version_sql::Plan::blocking_loss`].)
    Past,
    /// The version's own time: a column the transform reads must be there
    /// with the type the version was planned with.
    Present,
}

/// How a relation's columns line up with the plan's source columns: by
/// attribute number, never by name. A column dropped and added again under
/// the same name is a new column; a renamed one is the same.
#[derive(Debug)]
pub struct ColumnMap {
    relation: Arc<Relation>,
    /// For each plan column, its index in the relation, when the relation
    /// has that attribute and the transform reads it (the others are NULL).
    positions: Vec<Option<usize>>,
    /// For each key column, its index in the relation.
    key_positions: Vec<usize>,
}

impl ColumnMap {
    /// Lines up `relation` with `plan`; fails (for the present) when a
    /// column the transform reads is gone or changed type, which needs a
    /// new version.
    pub fn build(plan: &Plan, relation: Arc<Relation>, era: Era) -> Result<ColumnMap> {
        ColumnMap::build_keeping(plan, relation, era, false)
    }

    /// [`ColumnMap::build`]; with `every`, the values of columns the
    /// transform does not read are kept too (for a base snapshot of the
    /// table's rows), where the description has them.
    pub fn build_keeping(
        plan: &Plan,
        relation: Arc<Relation>,
        era: Era,
        every: bool,
    ) -> Result<ColumnMap> {
        let mut positions = Vec::new();
        for column in plan.source.replicated_columns() {
            if !plan.reads(&column.name) {
                positions.push(if every {
                    relation.position(column.attnum)
                } else {
                    None
                });
                continue;
            }
            let position = relation.position(column.attnum);
            match (position, era) {
                (None, Era::Present) => {
                    return Err(schema_changed(
                        plan,
                        &format!(
                            "column {} (attribute {}) is gone from {}",
                            column.name,
                            column.attnum,
                            relation.qualified_name()
                        ),
                    ))
                }
                (Some(p), Era::Present) if relation.columns[p].type_oid != column.type_oid => {
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
                let attnum = plan.source.column(k).map(|c| c.attnum).unwrap_or(0);
                relation.position(attnum).ok_or_else(|| {
                    plan.schema_changed(format!(
                        "key column {k} of {} (attribute {attnum}) is missing from a \
                         description of the table ({})",
                        plan.source,
                        relation.qualified_name()
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
                _ => Err(Error::Internal(format!(
                    "a change to {} arrived without its key value",
                    self.relation.qualified_name()
                ))),
            })
            .collect()
    }

    /// The plan's values of `row`, moved out of it.
    fn values(&self, row: &mut [Datum]) -> Vec<Datum> {
        self.positions
            .iter()
            .map(|p| {
                p.and_then(|p| row.get_mut(p))
                    .map(|d| std::mem::replace(d, Datum::Null))
                    .unwrap_or(Datum::Null)
            })
            .collect()
    }
}

fn schema_changed(plan: &Plan, what: &str) -> Error {
    plan.schema_changed(format!(
        "source table {} changed under version {} of target {}: {what}, and the transform \
         reads it",
        plan.source, plan.def.version, plan.def.target
    ))
}

/// Folds source changes of one plan's table into pending writes, with the
/// column map of each description of the table met. Needs no database, so
/// a replay folds on its decoding thread.
pub struct Folder {
    plan: Plan,
    era: Era,
    /// Keep every column's values, not only those the transform reads.
    every: bool,
    /// Column maps by the address of the description they were built for.
    maps: HashMap<usize, ColumnMap>,
}

impl Folder {
    /// A folder of `plan`'s table, for descriptions of `era`.
    pub fn new(plan: Plan, era: Era) -> Folder {
        Folder {
            plan,
            era,
            every: false,
            maps: HashMap::new(),
        }
    }

    /// This folder, keeping the values of every column (a replay that
    /// leaves a base snapshot of the table's rows).
    pub fn keeping_every_column(mut self) -> Folder {
        self.every = true;
        self
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn map_for(&mut self, relation: &Arc<Relation>) -> Result<&ColumnMap> {
        let key = Arc::as_ptr(relation) as usize;
        if !self.maps.get(&key).is_some_and(|m| m.is_for(relation)) {
            // Descriptions are few; forget them all when one is new.
            if self.maps.len() > 64 {
                self.maps.clear();
            }
            let map = ColumnMap::build_keeping(&self.plan, relation.clone(), self.era, self.every)?;
            self.maps.insert(key, map);
        }
        Ok(&self.maps[&key])
    }

    /// Folds one row change with its version into `pending`; false if it is
    /// not an insert, update or delete of the plan's table (relation OID).
    /// A TRUNCATE is the caller's.
    pub fn fold(
        &mut self,
        pending: &mut Fold,
        version: Version,
        xid: Option<u32>,
        change: RowChange,
    ) -> Result<bool> {
        let Some(relation) = change.relation() else {
            return Ok(false);
        };
        if relation.oid != self.plan.source.oid {
            return Ok(false);
        }
        let relation = relation.clone();
        let map = self.map_for(&relation)?;
        pending.add(map, change, version, xid)?;
        Ok(true)
    }
}

impl Fold {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// Rows pending (one per key).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The memory the pending writes take (overwritten ones included,
    /// until the fold drops them).
    pub fn bytes(&self) -> usize {
        self.entries.bytes()
    }

    /// Takes the pending writes out.
    pub fn drain(&mut self) -> impl Iterator<Item = (Vec<String>, Entry)> {
        self.entries.take()
    }

    /// Takes the pending writes out, in key order.
    pub(crate) fn take_sorted(&mut self) -> Sorted {
        self.entries.take_sorted()
    }

    /// Puts back an entry taken out with [`Fold::drain`], or replaces
    /// one of the same version.
    pub fn restore(&mut self, key: Vec<String>, entry: Entry) {
        self.insert(key, entry);
    }

    /// The pending write for `key`.
    pub fn entry(&self, key: &[String]) -> Option<Entry> {
        self.entries.get(key)
    }

    /// From now on, remembers which entries still lack values that must
    /// come from another key's row (see [`Fold::take_pending_fills`]).
    pub fn track_fills(&mut self) {
        self.pending_fills.get_or_insert_with(Vec::new);
    }

    /// The keys of entries added since the last call whose unchanged
    /// values must come from the row of their `fill_key`, which this fold
    /// does not hold.
    pub fn take_pending_fills(&mut self) -> Vec<Vec<String>> {
        self.pending_fills
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn insert(&mut self, key: Vec<String>, entry: Entry) {
        // Changes come in commit order, except a replay's that follow a
        // base snapshot whose parts were read at different positions: a
        // change older than what the fold holds for its key lost already.
        self.entries.insert(&key, &entry);
    }

    /// Adds one row change (not a truncate) of the plan's table, made by
    /// transaction `xid` if known.
    pub fn add(
        &mut self,
        map: &ColumnMap,
        change: RowChange,
        version: Version,
        xid: Option<u32>,
    ) -> Result<()> {
        match change {
            RowChange::Insert { mut new, .. } => {
                let key = map.key(&new)?;
                let entry = Entry {
                    op: Op::Upsert,
                    version,
                    xid,
                    values: map.values(&mut new),
                    fill_key: None,
                };
                self.insert(key, entry);
            }
            RowChange::Update {
                mut old, mut new, ..
            } => {
                let new_key = map.key(&new)?;
                let old_key = match &old {
                    Some(old) => map.key(old)?,
                    None => new_key.clone(),
                };
                let mut values = map.values(&mut new);
                let mut fill_key = None;
                if values.contains(&Datum::Unchanged) {
                    // A whole old row (REPLICA IDENTITY FULL) has every value;
                    // a key image has nulls for everything but the key.
                    let old_full = old
                        .as_mut()
                        .filter(|_| map.relation.full_identity)
                        .map(|o| map.values(o))
                        .filter(|o| !o.contains(&Datum::Unchanged));
                    let earlier = self.entries.get(&old_key).filter(|e| e.op == Op::Upsert);
                    let earlier = earlier.as_ref();
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
                if let (Some(pending), Some(_)) = (self.pending_fills.as_mut(), &fill_key) {
                    if values.contains(&Datum::Unchanged) {
                        pending.push(new_key.clone());
                    }
                }
                if old_key != new_key {
                    self.insert(
                        old_key,
                        Entry {
                            op: Op::Delete,
                            version,
                            xid,
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
                        xid,
                        values,
                        fill_key,
                    },
                );
            }
            RowChange::Delete { old, .. } => {
                let entry = Entry {
                    op: Op::Delete,
                    version,
                    xid,
                    values: Vec::new(),
                    fill_key: None,
                };
                self.insert(map.key(&old)?, entry);
            }
            RowChange::Truncate { .. } | RowChange::Message { .. } => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
