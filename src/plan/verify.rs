//! The SQL `walfill verify` compares a key range with: the transform of the
//! source rows read into the work table, against the version's rows of the
//! same range, both as a count and an md5 of the rows' text in key order.
//! Keys the version holds at a version newer than the source read (`$1`) are
//! left out of both sides: the read could not have seen those changes.

use walfill_core::sql::quote_ident;

use super::{Plan, WORK_TABLE};

impl Plan {
    /// `(expected, actual)`: count and md5 of the transform of the work
    /// table's rows, and of the version's live rows, in the key range
    /// `range` (a condition on the key columns). Parameter: `$1` the LSN
    /// text the source was read at.
    pub fn verify_sql(&self, range: &str) -> (String, String) {
        let table = self.staging_table();
        let order = self
            .key
            .iter()
            .map(|k| format!("t.{}", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let newer = format!(
            "({keys}) IN (SELECT {keys} FROM {table} WHERE {range} \
             AND _walfill_lsn > $1::text::pg_lsn)",
            keys = self.keys(),
        );
        let passes = self
            .passes()
            .map(|p| format!(" AND {p}"))
            .unwrap_or_default();
        let columns = self.source_columns();
        let expected = format!(
            "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY {order})), '') \
             FROM (SELECT {select} FROM (SELECT {columns} FROM pg_temp.{WORK_TABLE}) AS {alias} \
                   WHERE NOT {newer}{passes}) AS t",
            select = self.def.select,
            alias = self.alias(),
        );
        let outputs = self
            .outputs
            .iter()
            .map(|o| quote_ident(&o.name))
            .collect::<Vec<_>>()
            .join(", ");
        let actual = format!(
            "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY {order})), '') \
             FROM (SELECT {outputs} FROM {table} \
                   WHERE {range} AND NOT _walfill_deleted \
                     AND _walfill_lsn <= $1::text::pg_lsn) AS t"
        );
        (expected, actual)
    }

    /// The source's columns, quoted, comma-separated.
    pub fn source_columns(&self) -> String {
        walfill_core::sql::ident_list(self.source.columns.iter().map(|c| c.name.as_str()))
    }
}
