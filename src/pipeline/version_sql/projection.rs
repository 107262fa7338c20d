//! The transform evaluated on the source: a chunk's select list there, and
//! the `COPY` that takes its finished rows straight into the version.
//!
//! Only for a portable transform (see `portable`) on a matching server
//! (see `crate::pipeline::source::evaluate`). The rows are those the destination's
//! own statements would store for a fresh chunk: each key's derived row,
//! or, where a filter leaves the row out, the key's tombstone (as
//! `store_once` does), so that the stream's changes are decided against
//! the chunk's version either way.

use walfill_core::sql::quote_ident;
use walfill_snapshot::Projection;

use super::sql::FENCE;
use super::{Plan, RESERVED_PREFIX};

/// The alias of the derived row beside the source row.
const DERIVED: &str = "_walfill_derived";

impl Plan {
    /// The select list the source evaluates over each row of a chunk: the
    /// version table's columns, in order, up to its version columns.
    pub fn source_projection(&self) -> Projection {
        let alias = self.source.name.clone();
        let a = quote_ident(&alias);
        let hidden = self.hidden_values(&a);
        let (select, join) = match self.passes() {
            None => (format!("{}{hidden}", self.def.select), String::new()),
            Some(passes) => {
                // The derived row's alias is walfill's own: the source table
                // (aliased by its name) may be called `t`.
                let outputs = self.outputs_from(&a, DERIVED);
                (
                    format!("{outputs}{hidden}, {DERIVED}.{RESERVED_PREFIX}live IS NULL"),
                    format!(
                        " LEFT JOIN LATERAL (SELECT true AS {RESERVED_PREFIX}live, {} \
                         WHERE {passes} {FENCE}) AS {DERIVED} ON true",
                        self.def.select
                    ),
                )
            }
        };
        Projection {
            alias,
            names: self.source.columns.iter().map(|c| c.name.clone()).collect(),
            select,
            join,
            fields: self.outputs.len() + self.hidden.len() + usize::from(self.passes().is_some()),
        }
    }

    /// `COPY` of a chunk's rows as [`Plan::source_projection`] gives them
    /// into the version's table, each row followed by its chunk's version.
    pub fn projected_copy_sql(&self) -> String {
        let mut columns: Vec<String> = self
            .outputs
            .iter()
            .map(|o| quote_ident(&o.name))
            .chain(self.hidden.iter().map(|h| quote_ident(&h.column)))
            .collect();
        if self.passes().is_some() {
            columns.push(format!("{RESERVED_PREFIX}deleted"));
        }
        columns.extend(["_walfill_lsn".to_string(), "_walfill_seq".to_string()]);
        format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            self.staging_table(),
            columns.join(", ")
        )
    }
}
