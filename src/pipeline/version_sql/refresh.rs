//! The SQL of a scoped refresh (`walfill request TARGET --where ...`) that
//! is not the chunk apply: the source's keys, read under the refresh's
//! snapshot into a temporary table, and the version's keys that are not
//! among them, which the apply loop makes tombstones.
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
    /// destination session (replacing one an earlier attempt left).
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
             CREATE TEMP TABLE {KEYS_TABLE} ({})",
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

    /// The next `limit` keys (as text) of the version's live rows older
    /// than `(lsn, 0)` that the keys table lacks, after key `after`, in
    /// the destination's key order: the keys the source lost, which the
    /// refresh makes tombstones versioned `(lsn, 0)`.
    pub fn absent_keys_sql(&self, lsn: Lsn, after: Option<&[String]>, limit: i64) -> String {
        let text = self
            .key
            .iter()
            .map(|k| format!("s.{}::text", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let after = after
            .map(|a| format!(" AND {}", self.keys_after(a)))
            .unwrap_or_default();
        format!(
            "SELECT ARRAY[{text}] FROM {table} AS s \
             WHERE NOT s._walfill_deleted \
               AND (s._walfill_lsn, s._walfill_seq) < ({lsn}::pg_lsn, 0){after} \
               AND NOT EXISTS (SELECT FROM pg_temp.{KEYS_TABLE} AS k WHERE ({k}) = ({s})) \
             ORDER BY {s} LIMIT {limit}",
            table = self.staging_table(),
            lsn = quote_literal(&lsn.to_string()),
            k = self.keys_of("k"),
            s = self.keys_of("s"),
        )
    }
}
