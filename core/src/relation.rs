//! Relations as history sources describe them.
//!
//! A relation is named by its OID: names are for people, and a rename
//! changes nothing a version depends on. A column is named by its attribute
//! number: a column dropped and another added under the same name are two
//! columns, and a renamed column is still the same one.

/// A column of a relation as a history source describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Attribute number (`pg_attribute.attnum`), from 1. 0 while a stream's
    /// description has not been matched to the catalog yet (pgoutput sends
    /// no attribute numbers).
    pub attnum: i16,
    /// Column name, as of the change that refers to it.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
    /// Type modifier (-1 if none).
    pub type_modifier: i32,
    /// The type's name as `format_type` prints it without a modifier, when
    /// the source knows it (the WAL decoder does; pgoutput does not say).
    pub type_name: String,
    /// Whether the column belongs to the replica identity (the key sent with
    /// updates and deletes).
    pub is_key: bool,
}

/// A source relation, as of the change that refers to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relation {
    /// The relation's OID in the source database: its identity.
    pub oid: u32,
    /// Schema name, as of the change.
    pub schema: String,
    /// Relation name, as of the change.
    pub name: String,
    /// The columns a change carries values for, in attribute order (dropped
    /// and generated columns left out).
    pub columns: Vec<Column>,
    /// `REPLICA IDENTITY FULL`: updates and deletes carry the whole old row
    /// (otherwise only the key, with every other column null).
    pub full_identity: bool,
}

impl Relation {
    /// Position of the column with attribute number `attnum`.
    pub fn position(&self, attnum: i16) -> Option<usize> {
        self.columns.iter().position(|c| c.attnum == attnum)
    }

    /// Position of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// `schema.name`, for messages.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}
