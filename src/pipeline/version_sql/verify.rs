//! The SQL `walfill verify` compares with. A range of source rows read into
//! the work table is compared by key, never by a range predicate evaluated
//! in the destination (whose collation may order the keys otherwise):
//!
//! - expected: the transform of the work table's rows that pass the filter
//!   and on which it does not fail;
//! - actual: the version's live rows whose keys are among the work table's.
//!
//! Both as a count and an md5 of the rows' text in key order. Keys the
//! version holds at a version newer than the source read (`$1`) are left
//! out of both sides: the read could not have seen those changes. Rows on
//! which the transform fails are marked in the work table (`_walfill_op =
//! 'x'`) and left out of the expected side: their keys must be absent from
//! the version, as dead letters are.
//!
//! Keys the version holds and the source does not (a stray row, a key the
//! source lost, above its last key or anywhere else) are found by probing
//! the source with the version's keys ([`Plan::missing_keys_sql`]).

use walfill_core::sql::quote_ident;

use super::sql::FENCE;
use super::{Plan, WORK_TABLE};

/// The temporary function that lists the work table's rows on which the
/// transform fails.
const FAILING_FUNCTION: &str = "pg_temp._walfill_verify_failing";

impl Plan {
    /// `(expected, actual)`: count and md5 of the transform of the work
    /// table's rows, and of the version's live rows with the same keys.
    /// Parameter: `$1` the LSN text the source was read at.
    pub fn verify_sql(&self) -> (String, String) {
        let table = self.staging_table();
        let order = self
            .key
            .iter()
            .map(|k| format!("t.{}", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let newer = format!(
            "(SELECT x._walfill_lsn > $1::text::pg_lsn FROM {table} AS x WHERE ({}) = ({}))",
            self.keys_of("x"),
            self.keys_of("w"),
        );
        let passes = self
            .passes()
            .map(|p| format!(" WHERE {p}"))
            .unwrap_or_default();
        let columns = self.source_columns_of("w");
        // Fenced, so that the filter sees only rows that are compared and
        // the select list only rows the filter takes.
        let expected = format!(
            "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY {order})), '') \
             FROM (SELECT {select} FROM (SELECT {columns} FROM pg_temp.{WORK_TABLE} AS w \
                   WHERE w._walfill_op <> 'x' AND NOT coalesce({newer}, false) {FENCE}) AS {alias}\
                   {passes} {FENCE}) AS t",
            select = self.def.select,
            alias = self.alias(),
        );
        let outputs = self
            .outputs
            .iter()
            .map(|o| format!("s.{}", quote_ident(&o.name)))
            .collect::<Vec<_>>()
            .join(", ");
        let actual = format!(
            "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY {order})), '') \
             FROM (SELECT {outputs} FROM {table} AS s \
                   WHERE NOT s._walfill_deleted AND s._walfill_lsn <= $1::text::pg_lsn \
                     AND EXISTS (SELECT FROM pg_temp.{WORK_TABLE} AS w WHERE ({w}) = ({s}))) AS t",
            w = self.keys_of("w"),
            s = self.keys_of("s"),
        );
        (expected, actual)
    }

    /// Creates (for the session) the function returning the `ctid`s of the
    /// work table's rows on which the filter or the select list fails with
    /// an error of the data (the classes dead letters are made of). The row
    /// is used whole (`t::text`): the planner drops a subquery's columns
    /// nothing reads, and would never compute the select list.
    pub fn verify_failing_function_sql(&self) -> String {
        let passes = self
            .passes()
            .map(|p| format!(" WHERE {p}"))
            .unwrap_or_default();
        let body = format!(
            "DECLARE r tid; \
             BEGIN \
               FOR r IN SELECT ctid FROM pg_temp.{WORK_TABLE} WHERE _walfill_op <> 'x' LOOP \
                 BEGIN \
                   PERFORM t::text FROM (SELECT {select} FROM (SELECT {columns} \
                     FROM pg_temp.{WORK_TABLE} AS w WHERE w.ctid = r {FENCE}) AS {alias}\
                     {passes} {FENCE}) AS t; \
                 EXCEPTION WHEN data_exception OR sql_routine_exception \
                   OR external_routine_exception OR external_routine_invocation_exception \
                   OR plpgsql_error THEN RETURN NEXT r; \
                 END; \
               END LOOP; \
             END",
            select = self.def.select,
            columns = self.source_columns_of("w"),
            alias = self.alias(),
        );
        let mut tag = "walfill".to_string();
        while body.contains(&format!("${tag}$")) {
            tag.push('_');
        }
        format!(
            "CREATE OR REPLACE FUNCTION {FAILING_FUNCTION}() RETURNS SETOF tid \
             LANGUAGE plpgsql AS ${tag}${body}${tag}$"
        )
    }

    /// Marks the work table's rows on which the transform fails, and
    /// returns their keys (text[]).
    pub fn verify_mark_failing_sql(&self) -> String {
        format!(
            "UPDATE pg_temp.{WORK_TABLE} AS w SET _walfill_op = 'x' \
              WHERE w.ctid IN (SELECT {FAILING_FUNCTION}()) RETURNING {}",
            self.key_text("w")
        )
    }

    /// The version's live keys (text[]) stored at or before `$1` (LSN
    /// text), in the version's own key order, `$2` keys after `after`.
    pub fn live_keys_sql(&self, after: Option<&[String]>) -> String {
        let after = after
            .map(|a| format!(" AND {}", self.keys_after(a)))
            .unwrap_or_default();
        format!(
            "SELECT {} FROM {} AS s WHERE NOT s._walfill_deleted \
               AND s._walfill_lsn <= $1::text::pg_lsn{after} ORDER BY {} LIMIT $2",
            self.key_text("s"),
            self.staging_table(),
            self.keys_of("s"),
        )
    }

    /// Of the keys given as one text[] parameter per key column, those the
    /// source table `source_table` (quoted) does not hold (text[] each).
    pub fn missing_keys_sql(&self, source_table: &str) -> String {
        let (keys, typed) = self.unnested_keys(1);
        format!(
            "SELECT ARRAY[{}]::text[] FROM {keys} \
              WHERE NOT EXISTS (SELECT FROM {source_table} AS s WHERE ({}) = ({typed}))",
            (0..self.key.len())
                .map(|i| format!("u.k{i}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.keys_of("s"),
        )
    }

    /// Of the keys given as one text[] parameter per key column after `$1`,
    /// those the version holds live at or before `$1` (LSN text).
    pub fn still_live_sql(&self) -> String {
        let (keys, typed) = self.unnested_keys(2);
        format!(
            "SELECT {} FROM {} AS s JOIN {keys} ON ({}) = ({typed}) \
              WHERE NOT s._walfill_deleted AND s._walfill_lsn <= $1::text::pg_lsn",
            self.key_text("s"),
            self.staging_table(),
            self.keys_of("s"),
        )
    }

    /// `unnest($first::text[], ...) AS u(k0, ...)` over one parameter per
    /// key column, and the values typed as the key columns.
    fn unnested_keys(&self, first: usize) -> (String, String) {
        let params: Vec<String> = (0..self.key.len())
            .map(|i| format!("${}::text[]", first + i))
            .collect();
        let names: Vec<String> = (0..self.key.len()).map(|i| format!("k{i}")).collect();
        let typed: Vec<String> = self
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let sql_type = self
                    .source
                    .column(k)
                    .map(|c| c.sql_type.as_str())
                    .unwrap_or("text");
                format!("u.k{i}::{sql_type}")
            })
            .collect();
        (
            format!("unnest({}) AS u({})", params.join(", "), names.join(", ")),
            typed.join(", "),
        )
    }

    /// The key of the row aliased `alias` as a text[].
    fn key_text(&self, alias: &str) -> String {
        format!(
            "ARRAY[{}]::text[]",
            self.key
                .iter()
                .map(|k| format!("{alias}.{}::text", quote_ident(k)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }

    /// The source's columns of the row aliased `alias`, each under its own
    /// name.
    fn source_columns_of(&self, alias: &str) -> String {
        self.source
            .columns
            .iter()
            .map(|c| {
                let name = quote_ident(&c.name);
                format!("{alias}.{name} AS {name}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The source's columns, quoted, comma-separated.
    pub fn source_columns(&self) -> String {
        walfill_core::sql::ident_list(self.source.columns.iter().map(|c| c.name.as_str()))
    }
}
