//! What the decoder knows about relations: schemas by relation file.
//!
//! Physical WAL names a relation by its file, `(tablespace, database,
//! relfilenode)`, and tuples carry no schema. A [`Catalog`] maps files to
//! [`RelationSchema`]s (columns with their storage layout and types), and
//! relation OIDs (which TRUNCATE records use) to the same. It is filled
//! from the live catalog or, later, from the catalog journal in the WAL.

use std::collections::HashMap;
use std::sync::Arc;

use crate::change::{Column, Relation};
use crate::tuple::RelSchema;
use crate::types::TypeInfo;
use crate::wal::RelFileLocator;

/// One relation as the decoder needs it.
#[derive(Clone, Debug)]
pub struct RelationSchema {
    /// Its description: files, attributes, types, identity.
    pub spec: NewRelation,
    /// The relation as changes describe it: non-dropped columns.
    pub relation: Arc<Relation>,
}

/// Everything [`RelationSchema::new`] needs; also the form a catalog is
/// saved in.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewRelation {
    /// `pg_class.oid`.
    pub oid: u32,
    /// Schema (namespace) name.
    pub schema: String,
    /// Relation name.
    pub name: String,
    /// Where its rows are stored.
    pub file: RelFileLocator,
    /// Its toast table's file, if any.
    pub toast_file: Option<RelFileLocator>,
    /// Every attribute, dropped ones included.
    pub attrs: RelSchema,
    /// Type of each attribute (`None` for dropped ones).
    pub types: Vec<Option<TypeInfo>>,
    /// `format_type` name of each attribute's type (without modifier).
    pub type_names: Vec<String>,
    /// Replica identity columns.
    pub key: Vec<String>,
    /// `REPLICA IDENTITY FULL`.
    pub full_identity: bool,
}

impl RelationSchema {
    /// Builds the schema of a relation.
    pub fn new(r: NewRelation) -> RelationSchema {
        let columns = r
            .attrs
            .attrs
            .iter()
            .zip(&r.type_names)
            .filter(|(a, _)| !a.dropped)
            .map(|(a, type_name)| Column {
                attnum: a.attnum,
                name: a.name.clone(),
                type_oid: a.type_oid,
                type_modifier: a.typmod,
                type_name: type_name.clone(),
                is_key: r.full_identity || r.key.contains(&a.name),
            })
            .collect();
        let relation = Arc::new(Relation {
            oid: r.oid,
            schema: r.schema.clone(),
            name: r.name.clone(),
            columns,
            full_identity: r.full_identity,
        });
        RelationSchema { spec: r, relation }
    }

    /// `schema.name`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.relation.schema, self.relation.name)
    }
}

/// The relations of one database, by file and by OID.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// OID of the database whose changes are decoded.
    pub database: u32,
    by_file: HashMap<RelFileLocator, Arc<RelationSchema>>,
    by_oid: HashMap<u32, Arc<RelationSchema>>,
    toast_files: HashMap<RelFileLocator, u32>,
    /// Partitioned tables: no storage, but TRUNCATE records name them.
    partitioned: HashMap<u32, Arc<Relation>>,
}

impl Catalog {
    /// An empty catalog for database `database`.
    pub fn new(database: u32) -> Catalog {
        Catalog {
            database,
            ..Catalog::default()
        }
    }

    /// Adds (or replaces) a relation.
    pub fn insert(&mut self, schema: RelationSchema) {
        let schema = Arc::new(schema);
        if let Some(old) = self.by_oid.insert(schema.spec.oid, schema.clone()) {
            self.by_file.remove(&old.spec.file);
            if let Some(toast) = old.spec.toast_file {
                self.toast_files.remove(&toast);
            }
        }
        if let Some(toast) = schema.spec.toast_file {
            self.toast_files.insert(toast, schema.spec.oid);
        }
        self.by_file.insert(schema.spec.file, schema);
    }

    /// The relation stored in `file`, if it is one the catalog knows.
    pub fn by_file(&self, file: &RelFileLocator) -> Option<&Arc<RelationSchema>> {
        self.by_file.get(file)
    }

    /// The relation with OID `oid`.
    pub fn by_oid(&self, oid: u32) -> Option<&Arc<RelationSchema>> {
        self.by_oid.get(&oid)
    }

    /// The relation whose toast table is stored in `file`.
    pub fn by_toast_file(&self, file: &RelFileLocator) -> Option<&Arc<RelationSchema>> {
        self.toast_files
            .get(file)
            .and_then(|oid| self.by_oid.get(oid))
    }

    /// Adds (or replaces) a partitioned table.
    pub fn insert_partitioned(&mut self, oid: u32, schema: String, name: String) {
        let relation = Relation {
            oid,
            schema,
            name,
            columns: Vec::new(),
            full_identity: false,
        };
        self.partitioned.insert(oid, Arc::new(relation));
    }

    /// The partitioned table with OID `oid`.
    pub fn partitioned(&self, oid: u32) -> Option<&Arc<Relation>> {
        self.partitioned.get(&oid)
    }

    /// Forgets relation `oid`.
    pub fn remove(&mut self, oid: u32) {
        self.partitioned.remove(&oid);
        if let Some(old) = self.by_oid.remove(&oid) {
            self.by_file.remove(&old.spec.file);
            if let Some(toast) = old.spec.toast_file {
                self.toast_files.remove(&toast);
            }
        }
    }

    /// Whether `file` is the toast table of a known relation.
    pub fn is_toast(&self, file: &RelFileLocator) -> bool {
        self.toast_files.contains_key(file)
    }

    /// Every known relation.
    pub fn relations(&self) -> impl Iterator<Item = &Arc<RelationSchema>> {
        self.by_oid.values()
    }

    /// The catalog in a form that can be saved (JSON, say) and loaded back.
    pub fn snapshot(&self) -> CatalogSnapshot {
        let mut relations: Vec<NewRelation> =
            self.by_oid.values().map(|r| r.spec.clone()).collect();
        relations.sort_by_key(|r| r.oid);
        CatalogSnapshot {
            database: self.database,
            relations,
        }
    }

    /// A catalog from a saved snapshot.
    pub fn from_snapshot(snapshot: CatalogSnapshot) -> Catalog {
        let mut catalog = Catalog::new(snapshot.database);
        for r in snapshot.relations {
            catalog.insert(RelationSchema::new(r));
        }
        catalog
    }
}

/// A catalog's content, for saving and loading.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CatalogSnapshot {
    /// OID of the database.
    pub database: u32,
    /// Its relations.
    pub relations: Vec<NewRelation>,
}
