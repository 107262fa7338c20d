//! The SQL that sets aside a batch's rows whose transform fails (dead
//! letters) and applies them again later.
//!
//! A row is probed alone, by its place in the work table; one that fails
//! is turned into a delete (a change from the stream: stored as a
//! tombstone at its version, so no older row of its key stays) or, a row
//! copied from a snapshot, dropped after a tombstone at the chunk's version
//! keeps out what a refresh or an earlier attempt stored for its key; and
//! recorded in `walfill.dead_letters` with its key, version, error and the
//! source row, in the same transaction.

use walfill_core::sql::{quote_ident, quote_literal};
use walfill_core::Lsn;

use super::sql::FENCE;
use super::{Plan, WORK_TABLE};

/// Statements over the work table for dead letters.
#[derive(Clone, Debug)]
pub struct DeadLetterSql {
    /// The rows to probe: `ctid` of each upsert.
    pub candidates: String,
    /// Runs the transform and filter over one row. Parameter: `$1` ctid text.
    pub probe: String,
    /// Runs the transform and filter over every upsert of the work table,
    /// writing nothing: fails as the batch's statements would on a poison
    /// row. No parameters.
    pub check: String,
    /// Turns a change into a delete; returns its key (text[]) and source
    /// row (jsonb), version LSN (text) and seq. Parameter: `$1` ctid text.
    pub poison_change: String,
    /// Drops a copied row; returns its key and source row. Parameter: `$1`.
    /// (Its key is kept out by [`Plan::tombstone_copied_sql`] first.)
    pub poison_copied: String,
    /// Removes the dead letters of keys the batch writes anew (a newer
    /// version of the key was stored). Parameters: `$1` target, `$2`
    /// version, `$3` the LSN text of rows without one (a chunk's).
    pub resolve: String,
    /// Stores one row of the work table at its version if what is stored
    /// for its key is a tombstone no newer (or nothing). No parameters.
    pub retry: String,
}

impl Plan {
    /// Stores a tombstone at a copied chunk's version `(lsn, seq)` for the
    /// key of one of its rows (`$1`: ctid text) whose transform fails, where
    /// what is stored for the key is older: a stored row of the key (a
    /// refresh's, an earlier attempt's) is not left behind.
    pub fn tombstone_copied_sql(&self, lsn: Lsn, seq: i32) -> String {
        format!(
            "INSERT INTO {table} AS s ({columns}) \
             SELECT {keys}{hidden}, {lsn}::pg_lsn, {seq}, true FROM {rows} {conflict}",
            table = self.staging_table(),
            columns = self.insert_columns(true),
            keys = self.keys_of(&self.alias()),
            hidden = self.hidden_values(&self.alias()),
            lsn = quote_literal(&lsn.to_string()),
            rows = self.source_rows(" WHERE ctid = $1::text::tid"),
            conflict = self.upsert_conflict(true),
        )
    }

    /// The dead-letter statements of this plan.
    pub fn dead_letter_sql(&self) -> DeadLetterSql {
        let work = format!("pg_temp.{WORK_TABLE}");
        let key_text = format!(
            "ARRAY[{}]::text[]",
            self.key
                .iter()
                .map(|k| format!("m.{}::text", quote_ident(k)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let row = self.source_row_of("m");
        let alias = self.alias();
        let row_json = format!("(SELECT to_jsonb({alias}) FROM {row})");
        let passes = self
            .passes()
            .map(|p| format!(" WHERE {p}"))
            .unwrap_or_default();
        let select = &self.def.select;
        let table = self.staging_table();
        let conflict = self.upsert_conflict_when(
            false,
            "s._walfill_deleted \
             AND (s._walfill_lsn, s._walfill_seq) <= (EXCLUDED._walfill_lsn, EXCLUDED._walfill_seq)",
        );
        DeadLetterSql {
            candidates: format!("SELECT m.ctid::text FROM {work} AS m WHERE m._walfill_op = 'u'"),
            probe: format!(
                "SELECT t::text FROM {work} AS m, LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t \
                 WHERE m.ctid = $1::text::tid"
            ),
            check: format!(
                "SELECT count(t::text) FROM {work} AS m, \
                 LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t \
                 WHERE m._walfill_op = 'u'"
            ),
            poison_change: format!(
                "UPDATE {work} AS m SET _walfill_op = 'd' WHERE m.ctid = $1::text::tid \
                 RETURNING {key_text}, {row_json}, m._walfill_lsn::text, m._walfill_seq"
            ),
            poison_copied: format!(
                "DELETE FROM {work} AS m WHERE m.ctid = $1::text::tid \
                 RETURNING {key_text}, {row_json}, NULL::text, NULL::integer"
            ),
            resolve: format!(
                "DELETE FROM walfill.dead_letters d USING {work} AS m \
                 WHERE d.target = $1 AND d.version = $2 AND d.key = {key_text} \
                   AND (d.lsn, d.seq) < (coalesce(m._walfill_lsn, $3::text::pg_lsn), \
                                         coalesce(m._walfill_seq, 0))"
            ),
            retry: format!(
                "INSERT INTO {table} AS s ({columns}) \
                 SELECT t.*{hidden}, m._walfill_lsn, m._walfill_seq, false \
                 FROM {work} AS m, LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t {conflict}",
                columns = self.insert_columns(false),
                hidden = self.hidden_values("m"),
            ),
        }
    }
}
