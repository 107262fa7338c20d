//! The SQL that sets aside a batch's rows whose transform fails (dead
//! letters) and applies them again later.
//!
//! The failing rows are found in bulk, in the destination: a function
//! (`pg_temp`, created per session) runs the transform over each upsert
//! of the work table under its own exception block and returns the ones
//! that fail with their errors. Nothing is sent per row, and no ERROR per
//! row reaches the server's log. One statement then turns each failing
//! change into a delete (a change from the stream: stored as a tombstone
//! at its version, so no older row of its key stays) or drops a failing
//! copied row (after a tombstone at the chunk's version where rows of the
//! chunk's keys may be stored: what a refresh or an earlier attempt stored
//! is not left behind), and records them all in `walfill.dead_letters`
//! with their key, version, error and source row, in the same transaction.

use walfill_core::sql::quote_ident;

use super::sql::FENCE;
use super::{Plan, WORK_TABLE};

/// Statements over the work table for dead letters.
#[derive(Clone, Debug)]
pub struct DeadLetterSql {
    /// Creates (or replaces) the session's function that returns the
    /// upserts of the work table whose transform or filter fails, each
    /// `(walfill_failing_ctid tid, walfill_failing_error text)`.
    pub failing_function: String,
    /// How many upserts the work table holds. No parameters.
    pub candidates: String,
    /// Runs the transform and filter over every upsert of the work table,
    /// writing nothing: fails as the batch's statements would on a poison
    /// row. No parameters.
    pub check: String,
    /// Turns every failing change into a delete and records it as a dead
    /// letter; returns how many, one key and one error. Parameters: `$1`
    /// target, `$2` version, `$3` key columns (text[]), `$4` LSN text and
    /// `$5` seq of rows without their own.
    pub set_aside_changes: String,
    /// Drops every failing copied row and records it (parameters and
    /// result as above; `$4`, `$5`: the chunk's version).
    pub set_aside_copied: String,
    /// [`DeadLetterSql::set_aside_copied`] that also tombstones the failing
    /// rows' keys at the chunk's version, for a chunk whose keys may have
    /// rows stored.
    pub set_aside_copied_stored: String,
    /// Removes the dead letters of keys the batch writes anew (a newer
    /// version of the key was stored). Parameters: `$1` target, `$2`
    /// version, `$3` the LSN text of rows without one (a chunk's).
    pub resolve: String,
    /// Stores the upserts of the work table (dead letters applied again),
    /// each at its own version, where what is stored for its key is a
    /// tombstone no newer (or nothing). No parameters.
    pub retry: String,
    /// Loads dead letters into the work table as upserts: `$1` a JSON
    /// array of source rows, each with `_walfill_op`, `_walfill_lsn` and
    /// `_walfill_seq`.
    pub load_letters: String,
    /// Removes the dead letters of the work table's upserts (applied
    /// again, at the same version). Parameters: `$1` target, `$2` version.
    pub forget_retried: String,
    /// Removes dead letters as they were read (a newer letter of the same
    /// key, set aside meanwhile, stays): `$1` target, `$2` version, `$3` a
    /// JSON array of `{key, lsn, seq}`.
    pub forget: String,
}

impl Plan {
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
        // A failing copied row leaves the work table; its columns (and its
        // error) are read as `gone`.
        let gone = format!(
            "gone AS (DELETE FROM {work} AS m USING failing AS f \
             WHERE m.ctid = f.walfill_failing_ctid RETURNING m.*, f.walfill_failing_error), \
             poisoned AS (SELECT {key_text} AS key, {row_json} AS source_row, NULL::pg_lsn AS lsn, \
                                 NULL::integer AS seq, m.walfill_failing_error AS error \
                            FROM gone AS m)"
        );
        DeadLetterSql {
            // Rows are evaluated in one scan, in physical order (a TID range
            // scan, fetched one row at a time), until one fails; the scan
            // then starts again after that row. So an error costs one
            // subtransaction and one scan start, not every row.
            failing_function: format!(
                "CREATE OR REPLACE FUNCTION pg_temp.{function}() \
                 RETURNS TABLE (walfill_failing_ctid tid, walfill_failing_error text) \
                 LANGUAGE plpgsql SET enable_seqscan = off AS $walfill_failing$\n\
                 #variable_conflict use_column\n\
                 DECLARE walfill_from tid := '(0,0)'; walfill_at tid; walfill_out text; \
                         walfill_rows refcursor;\n\
                 BEGIN\n\
                   LOOP\n\
                     BEGIN\n\
                       OPEN walfill_rows NO SCROLL FOR \
                         SELECT m.ctid, t::text FROM {work} AS m \
                           LEFT JOIN LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t \
                             ON true \
                          WHERE m.ctid > walfill_from AND m._walfill_op = 'u';\n\
                       LOOP\n\
                         FETCH walfill_rows INTO walfill_at, walfill_out;\n\
                         EXIT WHEN NOT FOUND;\n\
                         walfill_from := walfill_at;\n\
                       END LOOP;\n\
                       CLOSE walfill_rows;\n\
                       RETURN;\n\
                     EXCEPTION WHEN data_exception OR sql_routine_exception \
                                 OR external_routine_exception \
                                 OR external_routine_invocation_exception OR plpgsql_error THEN\n\
                       SELECT m.ctid INTO walfill_at FROM {work} AS m \
                        WHERE m.ctid > walfill_from AND m._walfill_op = 'u' LIMIT 1;\n\
                       walfill_failing_ctid := walfill_at;\n\
                       walfill_failing_error := \
                         'ERROR: ' || SQLERRM || ' [SQLSTATE ' || SQLSTATE || ']';\n\
                       RETURN NEXT;\n\
                       walfill_from := walfill_at;\n\
                     END;\n\
                   END LOOP;\n\
                 END $walfill_failing$",
                function = self.failing_function_name(),
            ),
            candidates: format!("SELECT count(*) FROM {work} AS m WHERE m._walfill_op = 'u'"),
            check: format!(
                "SELECT count(t::text) FROM {work} AS m, \
                 LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t \
                 WHERE m._walfill_op = 'u'"
            ),
            set_aside_changes: self.set_aside_sql(&format!(
                "poisoned AS (UPDATE {work} AS m SET _walfill_op = 'd' FROM failing AS f \
                 WHERE m.ctid = f.walfill_failing_ctid \
                 RETURNING {key_text} AS key, {row_json} AS source_row, m._walfill_lsn AS lsn, \
                           m._walfill_seq AS seq, f.walfill_failing_error AS error)"
            )),
            set_aside_copied: self.set_aside_sql(&gone),
            set_aside_copied_stored: self.set_aside_sql(&format!(
                "{gone}, tombstones AS (\
                 INSERT INTO {table} AS s ({columns}) \
                 SELECT {keys}{hidden}, $4::text::pg_lsn, $5, true FROM gone AS {alias} {tombstone})",
                columns = self.insert_columns(true),
                keys = self.keys_of(&alias),
                hidden = self.hidden_values(&alias),
                tombstone = self.upsert_conflict(true),
            )),
            resolve: format!(
                "DELETE FROM walfill.dead_letters d USING {work} AS m \
                 WHERE d.target = $1 AND d.version = $2 AND d.key = {key_text} \
                   AND (d.lsn, d.seq) < (coalesce(m._walfill_lsn, $3::text::pg_lsn), \
                                         coalesce(m._walfill_seq, 0))"
            ),
            retry: format!(
                "INSERT INTO {table} AS s ({columns}) \
                 SELECT t.*{hidden}, m._walfill_lsn, m._walfill_seq, false \
                 FROM {work} AS m, LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t \
                 WHERE m._walfill_op = 'u' {conflict}",
                columns = self.insert_columns(false),
                hidden = self.hidden_values("m"),
            ),
            load_letters: format!(
                "INSERT INTO {work} ({columns}) SELECT {columns} \
                 FROM jsonb_populate_recordset(NULL::{work}, $1::jsonb)",
                columns = self.work_copy_columns(),
            ),
            forget_retried: format!(
                "DELETE FROM walfill.dead_letters d USING {work} AS m \
                 WHERE d.target = $1 AND d.version = $2 AND m._walfill_op = 'u' \
                   AND d.key = {key_text} \
                   AND (d.lsn, d.seq) = (m._walfill_lsn, m._walfill_seq)"
            ),
            forget: "DELETE FROM walfill.dead_letters AS d \
                      USING jsonb_to_recordset($3::jsonb) AS f(key text[], lsn pg_lsn, seq integer) \
                      WHERE d.target = $1 AND d.version = $2 \
                        AND (d.key, d.lsn, d.seq) = (f.key, f.lsn, f.seq)"
                .into(),
        }
    }

    /// The name of the session's failing-rows function of this plan: one
    /// per transform, filter and version table.
    fn failing_function_name(&self) -> String {
        let identity = format!(
            "{}|{}|{}",
            self.staging_table(),
            self.def.select,
            self.def.filter.as_deref().unwrap_or("")
        );
        format!(
            "walfill_failing_{:016x}",
            walfill_core::name::fnv1a(identity.as_bytes())
        )
    }

    /// The statement that records as dead letters the rows `poisoned`
    /// yields (`key`, `source_row`, `lsn`, `seq`, `error`), the failing
    /// rows coming from the session's function as `failing`; `ctes`
    /// defines `poisoned` (and whatever else it needs).
    fn set_aside_sql(&self, ctes: &str) -> String {
        format!(
            "WITH failing AS (SELECT * FROM pg_temp.{function}()), {ctes}, \
             recorded AS (\
               INSERT INTO walfill.dead_letters AS d \
                      (target, version, key, key_columns, lsn, seq, error, source_row) \
               SELECT $1, $2, key, $3, coalesce(lsn, $4::text::pg_lsn), coalesce(seq, $5), \
                      error, source_row \
                 FROM poisoned \
               ON CONFLICT (target, version, key) DO UPDATE \
                  SET lsn = excluded.lsn, seq = excluded.seq, error = excluded.error, \
                      source_row = excluded.source_row, created_at = now(), \
                      attempts = d.attempts + 1 \
               RETURNING key, error) \
             SELECT count(*), (array_agg(key::text))[1], (array_agg(error))[1] FROM recorded",
            function = self.failing_function_name(),
        )
    }
}
