//! A version's plan: the source table, the transform checked against it, and
//! the shape of the staging table.
//!
//! The transform (a select list and an optional filter) runs in the
//! destination database over rows shaped like the source table, held in a
//! session's temporary *work table*. Checking it there, before anything is
//! written, tells walfill the output columns and their types, whether the key
//! passes through unchanged, and which source columns the transform reads (so
//! it knows which TOASTed values it must remember for updates that do not
//! resend them), and whether the transform would give the same values on
//! the source (`portable`), where a snapshot copy may then evaluate it
//! (`projection`, and `crate::pipeline::source::evaluate`).

mod check;
mod collation;
mod dead;
mod meaning;
mod portable;
mod projection;
mod refresh;
mod sql;
mod verify;

pub use check::{build, create_work_table, describe, unusable};
pub use collation::{Collations, Mapping};
pub use dead::DeadLetterSql;
pub use meaning::{earlier as earlier_meaning, mentioned as mentioned_columns, MEANING};
pub use sql::{chunk_seq, BatchSql};

use walfill_core::sql::quote_ident;
use walfill_core::Lsn;
use walfill_replay::decode::LostRelation;
use walfill_snapshot::SourceTable;

use crate::config::{QualifiedName, Target};

/// Name of the session's temporary work table.
pub const WORK_TABLE: &str = "_walfill_rows";
/// Prefix of walfill's own columns; transforms may not produce such names.
pub const RESERVED_PREFIX: &str = "_walfill_";

/// What a version is built from: the target's definition as recorded.
#[derive(Clone, Debug)]
pub struct Definition {
    /// Target name (and view name).
    pub target: String,
    /// Version name.
    pub version: String,
    /// Destination schema.
    pub dest_schema: String,
    /// Source table.
    pub source: QualifiedName,
    /// Key columns given in the configuration.
    pub key: Option<Vec<String>>,
    /// The select list.
    pub select: String,
    /// The filter.
    pub filter: Option<String>,
    /// The version's table (in `dest_schema`): `TARGET__VERSION`, or another
    /// name for a version rebuilt beside the table readers still see.
    pub table: String,
}

impl Definition {
    /// The definition of the version a target's configuration asks for.
    pub fn from_config(target: &Target) -> Definition {
        Definition {
            target: target.name.clone(),
            version: target.version.clone(),
            dest_schema: target.schema.clone(),
            source: target.source.clone(),
            key: target.key.clone(),
            select: target.select.clone(),
            filter: target.filter.clone(),
            table: target.version_table(&target.version),
        }
    }

    /// The version's logical slot: `walfill_<target>_<version>_<tag>`, where
    /// `tag` tells deployments apart (slot names are global to a cluster, and
    /// two destinations may follow the same source). Shortened with a hash
    /// when it would exceed PostgreSQL's 63 characters.
    pub fn slot_name(&self, tag: &str) -> String {
        let name = format!("walfill_{}_{}_{tag}", self.target, self.version);
        if name.len() <= 63 {
            return name;
        }
        format!(
            "{}_{:016x}",
            &name[..46],
            walfill_core::name::fnv1a(name.as_bytes())
        )
    }
}

/// A column the transform produces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputColumn {
    /// Column name.
    pub name: String,
    /// Its type as SQL spells it.
    pub sql_type: String,
    /// Its collation where it is not the database's default: the one the
    /// transform's output has on the source (quoted, qualified where
    /// needed), so readers' `ORDER BY` and the key index agree with it.
    pub collation: Option<String>,
}

/// A source column kept beside the derived row because the transform reads
/// it and its value may be TOASTed: an update that leaves it alone does not
/// resend it, and walfill takes it from here instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HiddenColumn {
    /// The source column.
    pub source: String,
    /// The staging table's column holding it.
    pub column: String,
    /// Its type as SQL spells it.
    pub sql_type: String,
}

/// A checked version plan.
#[derive(Clone, Debug)]
pub struct Plan {
    /// What the version is built from.
    pub def: Definition,
    /// The source table as it is now.
    pub source: SourceTable,
    /// Key columns: the source's row identity, passed through unchanged.
    pub key: Vec<String>,
    /// The transform's output columns, in order.
    pub outputs: Vec<OutputColumn>,
    /// Source columns remembered for unchanged-TOAST updates.
    pub hidden: Vec<HiddenColumn>,
    /// Source columns the transform (select and filter) reads.
    pub referenced: Vec<String>,
    /// What the operator should know about the transform (volatile functions).
    pub warnings: Vec<String>,
    /// Whether the transform is the identity: no filter, and every
    /// replicated source column in order, each a plain reference to
    /// itself (see [`Plan::is_identity`]).
    pub identity: bool,
    /// Why the transform might not give the same values on the source as
    /// in the destination, even on the same server version with the same
    /// collations (see `portable`); `None` when it would.
    pub not_portable: Option<String>,
    /// Where each source column's collation lands in the destination.
    pub collations: Collations,
}

impl Plan {
    /// Whether the version needs the values of source column `name`: the
    /// transform reads it, or it is part of the key.
    pub fn reads(&self, name: &str) -> bool {
        self.referenced.iter().any(|r| r == name) || self.key.iter().any(|k| k == name)
    }

    /// Whether the version reads the column with attribute number `attnum`.
    pub fn reads_attnum(&self, attnum: i16) -> bool {
        self.source
            .column_by_attnum(attnum)
            .is_some_and(|c| self.reads(&c.name))
    }

    /// The first loss in `lost` that makes a replay of this version from
    /// `from` wrong: one of its table (or of an unknown table) at or after
    /// `from`, unless it concerns only a column the version does not read.
    pub fn blocking_loss<'a>(
        &self,
        lost: &'a [LostRelation],
        from: Lsn,
    ) -> Option<&'a LostRelation> {
        lost.iter().find(|l| {
            (l.relid == self.source.oid || l.relid == 0)
                && l.lsn >= from
                && l.attnum.is_none_or(|a| self.reads_attnum(a))
        })
    }

    /// The error of a change in the source this version cannot follow:
    /// `change` says what changed (the error adds the fix, a new version).
    pub fn schema_changed(&self, change: impl Into<String>) -> crate::error::Error {
        crate::error::Error::schema_changed(&self.def.target, change)
    }

    /// `"schema"."target__version"`.
    pub fn staging_table(&self) -> String {
        format!(
            "{}.{}",
            quote_ident(&self.def.dest_schema),
            quote_ident(&self.def.table)
        )
    }

    /// `"schema"."target"`: the view readers use.
    pub fn view(&self) -> String {
        format!(
            "{}.{}",
            quote_ident(&self.def.dest_schema),
            quote_ident(&self.def.target)
        )
    }
}

impl Plan {
    /// Fails when an existing staging table no longer matches what the
    /// transform produces (the source table changed shape since it was made).
    pub async fn verify_staging(&self, dest: &tokio_postgres::Client) -> crate::error::Result<()> {
        let found: Vec<(String, String)> = dest
            .query(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
                  WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped
                    AND attname NOT IN ('_walfill_lsn', '_walfill_seq', '_walfill_deleted')
                  ORDER BY attnum",
                &[&self.staging_table()],
            )
            .await
            .map_err(|e| {
                crate::error::Error::destination("reading the staging table's columns", e)
            })?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let expected: Vec<(String, String)> = self
            .outputs
            .iter()
            .map(|o| (o.name.clone(), o.sql_type.clone()))
            .chain(
                self.hidden
                    .iter()
                    .map(|h| (h.column.clone(), h.sql_type.clone())),
            )
            .collect();
        if found == expected {
            return Ok(());
        }
        let show = |cols: &[(String, String)]| {
            cols.iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(self.schema_changed(format!(
            "the version's table {} has columns ({}) but the transform produces ({})",
            self.staging_table(),
            show(&found),
            show(&expected)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_fit_postgres_limits() {
        let mut def = Definition {
            target: "orders".into(),
            version: "v1".into(),
            dest_schema: "public".into(),
            source: QualifiedName {
                schema: "public".into(),
                name: "orders".into(),
            },
            key: None,
            select: "id".into(),
            filter: None,
            table: "orders__v1".into(),
        };
        assert_eq!(def.slot_name("0a1b2c3d"), "walfill_orders_v1_0a1b2c3d");
        assert_ne!(def.slot_name("0a1b2c3d"), def.slot_name("99999999"));
        def.target = "t".repeat(60);
        let long = def.slot_name("0a1b2c3d");
        assert_eq!(long.len(), 63);
        def.version = "v2".into();
        assert_ne!(
            def.slot_name("0a1b2c3d"),
            long,
            "versions get distinct slots"
        );
    }
}
