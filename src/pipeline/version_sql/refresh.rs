//! The SQL of a scoped refresh (`walfill request TARGET --where ...`) that
//! is not the chunk apply: the source's keys, read under the refresh's
//! snapshot into a temporary table, and tombstones for the version's keys
//! that are not among them.
//!
//! A scope cannot be evaluated on a key whose source row is gone, so the
//! anti-join covers the whole key space: a live row whose key the source
//! no longer has is stale whatever the scope.

use walfill_core::sql::{quote_ident, quote_literal};
use walfill_core::Lsn;

use super::Plan;

/// The temporary table the source's keys are loaded into.
const KEYS_TABLE: &str = "_walfill_source_keys";

impl Plan {
    /// Creates the keys table, typed as the source's key columns, for the
    /// current destination transaction.
    pub fn source_keys_ddl(&self) -> String {
        let columns: Vec<String> = self
            .key
            .iter()
            .map(|k| {
                let sql_type = self
                    .source
                    .column(k)
                    .map(|c| c.sql_type.as_str())
                    .unwrap_or("text");
                format!("{} {sql_type}{}", quote_ident(k), self.collations.clause(k))
            })
            .collect();
        format!(
            "DROP TABLE IF EXISTS pg_temp.{KEYS_TABLE};
             CREATE TEMP TABLE {KEYS_TABLE} ({}) ON COMMIT DROP",
            columns.join(", ")
        )
    }

    /// `COPY` of every key of the source table (`source_table`, quoted).
    pub fn source_keys_copy_out(&self, source_table: &str) -> String {
        format!(
            "COPY (SELECT {} FROM {source_table}) TO STDOUT",
            self.keys()
        )
    }

    /// `COPY` into the keys table.
    pub fn source_keys_copy_in(&self) -> String {
        format!("COPY pg_temp.{KEYS_TABLE} ({}) FROM STDIN", self.keys())
    }

    /// Turns every live row older than `(lsn, 0)` whose key is not in the
    /// keys table into a tombstone versioned `(lsn, 0)`. A row the stream
    /// makes newer meanwhile is left alone (the `UPDATE` re-checks the
    /// version of a row it waited for).
    pub fn tombstone_absent_sql(&self, lsn: Lsn) -> String {
        let version = format!("({}::pg_lsn, 0)", quote_literal(&lsn.to_string()));
        let mut sets: Vec<String> = self
            .outputs
            .iter()
            .filter(|o| !self.key.contains(&o.name))
            .map(|o| format!("{} = NULL", quote_ident(&o.name)))
            .collect();
        sets.extend(
            self.hidden
                .iter()
                .map(|h| format!("{} = NULL", quote_ident(&h.column))),
        );
        sets.push(format!(
            "_walfill_lsn = {}::pg_lsn",
            quote_literal(&lsn.to_string())
        ));
        sets.push("_walfill_seq = 0".into());
        sets.push("_walfill_deleted = true".into());
        format!(
            "UPDATE {table} AS s SET {sets} \
             WHERE NOT s._walfill_deleted AND (s._walfill_lsn, s._walfill_seq) < {version} \
               AND NOT EXISTS (SELECT FROM pg_temp.{KEYS_TABLE} AS k WHERE ({k}) = ({s}))",
            table = self.staging_table(),
            sets = sets.join(", "),
            k = self.keys_of("k"),
            s = self.keys_of("s"),
        )
    }
}
