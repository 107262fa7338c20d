//! Which attributes a logical stream's rows carry.
//!
//! pgoutput sends a relation's columns by name and type, in attribute
//! order, leaving out dropped and generated columns, but not their
//! attribute numbers. A [`StreamDesc`] is that column list with the
//! attribute numbers, as of a point in the stream: the catalog journal moves
//! it at exactly the LSN of each schema change, and a version records it
//! with every stream cursor. Matching a pgoutput relation against it gives
//! each value its attribute number, so a column renamed is still the same
//! column, and one dropped and added again under the same name is not.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio_postgres::GenericClient;
use walfill_core::{Column, Relation};
use walfill_replay::decode::NewRelation;

use crate::error::{Error, Result};

/// One column the stream sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescColumn {
    /// Attribute number.
    pub attnum: i16,
    /// Name.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
}

/// The columns the stream sends for one relation, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamDesc {
    /// Non-dropped, non-generated columns in attribute order.
    pub columns: Vec<DescColumn>,
}

impl StreamDesc {
    /// The description a catalog journal entry gives.
    pub fn from_journal(relation: &NewRelation) -> StreamDesc {
        StreamDesc {
            columns: relation
                .attrs
                .attrs
                .iter()
                .filter(|a| !a.dropped && !a.generated)
                .map(|a| DescColumn {
                    attnum: a.attnum,
                    name: a.name.clone(),
                    type_oid: a.type_oid,
                })
                .collect(),
        }
    }

    /// The description the catalog gives now (or, read inside a snapshot,
    /// as of that snapshot).
    pub async fn from_catalog(client: &impl GenericClient, relid: u32) -> Result<StreamDesc> {
        let rows = client
            .query(
                "SELECT attnum, attname::text, atttypid FROM pg_catalog.pg_attribute
                  WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
                  ORDER BY attnum",
                &[&relid],
            )
            .await
            .map_err(|e| Error::source_query("reading the source table's columns", e))?;
        Ok(StreamDesc {
            columns: rows
                .iter()
                .map(|r| DescColumn {
                    attnum: r.get(0),
                    name: r.get(1),
                    type_oid: r.get(2),
                })
                .collect(),
        })
    }

    /// Whether `relation`, as pgoutput described it, has exactly these
    /// columns (names and types, in order).
    pub fn matches(&self, relation: &Relation) -> bool {
        self.columns.len() == relation.columns.len()
            && self
                .columns
                .iter()
                .zip(&relation.columns)
                .all(|(d, c)| d.name == c.name && d.type_oid == c.type_oid)
    }

    /// `relation` with the attribute numbers of this description, if it
    /// matches.
    pub fn resolve(&self, relation: &Relation) -> Option<Arc<Relation>> {
        if !self.matches(relation) {
            return None;
        }
        let mut resolved = relation.clone();
        for (column, desc) in resolved.columns.iter_mut().zip(&self.columns) {
            column.attnum = desc.attnum;
        }
        Some(Arc::new(resolved))
    }

    /// The column with attribute number `attnum`.
    pub fn column(&self, attnum: i16) -> Option<&DescColumn> {
        self.columns.iter().find(|c| c.attnum == attnum)
    }

    /// `a integer, b text` style, for messages.
    pub fn describe(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("{} (attnum {})", c.name, c.attnum))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `relation`'s column names and types, for messages.
pub fn describe_relation(relation: &Relation) -> String {
    relation
        .columns
        .iter()
        .map(|c: &Column| c.name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(cols: &[(&str, u32)]) -> Relation {
        Relation {
            oid: 9,
            schema: "s".into(),
            name: "t".into(),
            columns: cols
                .iter()
                .map(|(n, t)| Column {
                    attnum: 0,
                    name: n.to_string(),
                    type_oid: *t,
                    type_modifier: -1,
                    type_name: String::new(),
                    is_key: false,
                })
                .collect(),
            full_identity: false,
        }
    }

    fn desc(cols: &[(i16, &str, u32)]) -> StreamDesc {
        StreamDesc {
            columns: cols
                .iter()
                .map(|(a, n, t)| DescColumn {
                    attnum: *a,
                    name: n.to_string(),
                    type_oid: *t,
                })
                .collect(),
        }
    }

    #[test]
    fn values_get_the_attribute_numbers_of_the_description() {
        // v was dropped (attnum 2) and added again (attnum 3).
        let d = desc(&[(1, "id", 23), (3, "v", 25)]);
        let resolved = d.resolve(&rel(&[("id", 23), ("v", 25)])).unwrap();
        assert_eq!(resolved.columns[1].attnum, 3);
        assert!(d.resolve(&rel(&[("id", 23), ("w", 25)])).is_none());
        assert!(d.resolve(&rel(&[("id", 23), ("v", 23)])).is_none());
        assert!(d.resolve(&rel(&[("id", 23)])).is_none());
    }
}
