//! The SQL a plan runs in the destination: staging table, view, chunk load
//! and the versioned apply of change batches.
//!
//! Every write obeys one rule: a row change is stored only if its version
//! `(commit LSN, seq)` is newer than the version stored for its key, and
//! deletes are stored as tombstones with their version. A change that loses
//! is filtered out before the upsert (an `ON CONFLICT ... WHERE` that skips
//! would still lock and WAL-log the row), and the upsert's own `WHERE` keeps
//! the rule under concurrency.
//!
//! Rows of a chunked snapshot copy (each chunk read in a snapshot of its
//! own) are the exception: they are stored with a negative seq that names
//! their chunk (`seq = id - 2^31`), and a change from the stream replaces
//! one if the chunk's snapshot could not see the change's transaction, by
//! PostgreSQL's own visibility rule (`walfill.chunk_sees`), whatever their
//! LSNs. Only changes whose commit LSN is not past the chunk's need the
//! lookup: a transaction that committed later cannot be in the snapshot.

use walfill_core::sql::{ident_list, quote_ident, quote_literal};
use walfill_core::Lsn;
use walfill_snapshot::SourceTable;

use super::{Collations, Plan, RESERVED_PREFIX, WORK_TABLE};

/// Bookkeeping columns of the work table, after the source's columns.
pub(super) fn work_columns(table: &SourceTable, collations: &Collations) -> Vec<String> {
    let mut columns = vec![
        "_walfill_op \"char\" NOT NULL DEFAULT 'u'".to_string(),
        "_walfill_lsn pg_lsn".to_string(),
        "_walfill_seq integer".to_string(),
        "_walfill_unchanged text[]".to_string(),
        "_walfill_xid bigint".to_string(),
    ];
    for (i, key) in table.key.iter().enumerate() {
        let sql_type = table
            .column(key)
            .map(|c| c.sql_type.as_str())
            .unwrap_or("text");
        columns.push(format!(
            "_walfill_fk_{i} {sql_type}{}",
            collations.clause(key)
        ));
    }
    columns
}

/// The seq of the rows of chunk `id` of a chunked copy: negative, and
/// larger for a later chunk (a chunk read again after a crash replaces the
/// first reading's rows).
pub fn chunk_seq(id: i32) -> i32 {
    i32::MIN + id
}

/// Whether the row stored as `s` is older than a change at version
/// `(lsn, seq)` from transaction `xid` (SQL expressions; `xid` NULL for
/// rows and changes that carry none). See the module's notes.
pub(super) fn stored_loses(s: &str, lsn: &str, seq: &str, xid: &str) -> String {
    format!(
        "CASE WHEN {s}._walfill_seq >= 0 OR {s}._walfill_lsn < {lsn} OR {xid} IS NULL \
         THEN ({s}._walfill_lsn, {s}._walfill_seq) < ({lsn}, {seq}) \
         ELSE NOT walfill.chunk_sees(({s}._walfill_seq::bigint + 2147483648)::integer, {xid}) END"
    )
}

/// The `ON CONFLICT` condition of the versioned upsert. A change replacing
/// a chunked copy's row passed [`stored_loses`] just before (under
/// walfill's lock on the version); `EXCLUDED` does not carry its xid.
pub(super) const CONFLICT_NEWER: &str = "(s._walfill_lsn, s._walfill_seq) < \
     (EXCLUDED._walfill_lsn, EXCLUDED._walfill_seq) \
     OR (s._walfill_seq < 0 AND EXCLUDED._walfill_seq >= 0)";

/// Ends a subquery that evaluates the select list over one row after a
/// condition (the filter, which may guard the select list: `qty <> 0`
/// before `100 / qty`): a subquery with an `OFFSET` is never pulled up
/// into the query around it, so its condition is tested before its select
/// list is computed, on exactly the rows the condition takes. Pulled up,
/// the select list's expressions may be computed above the join (or
/// beside conditions the planner orders by cost), for rows the condition
/// rejects, and a row the filter leaves out, or a poison row turned into
/// a delete, would fail the whole statement.
pub(super) const FENCE: &str = "OFFSET 0";

/// Bytes of data a text or bytea value may have and still never be
/// compressed or stored out of line: with a 4-byte header it is 24 bytes,
/// not larger than an aligned TOAST pointer.
const SHORT_INLINE: usize = 20;

/// The statements that apply one batch of folded changes from the work table.
#[derive(Clone, Debug)]
pub struct BatchSql {
    /// Fills unchanged TOASTed values from the stored rows (absent when the
    /// plan remembers none).
    pub fill: Option<String>,
    /// Counts changes whose unchanged values had no stored row to come from.
    pub unfilled: Option<String>,
    /// Upserts rows that pass the filter. Parameters: truncate watermark
    /// `($1 lsn text, $2 seq)`.
    pub upsert: String,
    /// Stores tombstones for deletes and rows the filter rejects. Same parameters.
    pub tombstone: String,
    /// Returns a row when some key of the batch is already stored.
    pub any_stored: String,
    /// [`Self::upsert`] for a batch none of whose keys is stored: plain inserts.
    pub insert_fresh: String,
    /// [`Self::upsert`] and [`Self::tombstone`] for such a batch, in one
    /// pass over the work table: every change stored as a row or a tombstone.
    pub store_fresh: String,
    /// [`Self::store_fresh`] for a table being loaded from a replay's
    /// final rows: a row the filter rejects is kept as a tombstone only
    /// when one of its remembered values could be stored out of line (see
    /// [`Plan::may_be_toasted`]); nothing else reads it.
    pub load_fresh: String,
}

impl Plan {
    pub(super) fn keys(&self) -> String {
        ident_list(self.key.iter().map(String::as_str))
    }

    pub(super) fn keys_of(&self, alias: &str) -> String {
        self.key
            .iter()
            .map(|k| format!("{alias}.{}", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn alias(&self) -> String {
        quote_ident(&self.source.name)
    }

    /// The filter as a condition that is false where the filter is NULL.
    pub(super) fn passes(&self) -> Option<String> {
        self.def
            .filter
            .as_ref()
            .map(|f| format!("coalesce(({f}), false)"))
    }

    /// One work-table row (alias `m`) as the source's columns only, under
    /// the source table's name: read laterally, so the transform runs over
    /// each row without joining the work table to itself.
    pub(super) fn source_row_of(&self, m: &str) -> String {
        let columns = self
            .source
            .columns
            .iter()
            .map(|c| {
                let name = quote_ident(&c.name);
                format!("{m}.{name} AS {name}")
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!("(SELECT {columns}) AS {}", self.alias())
    }

    /// The work table's rows as the source's columns only, under the source
    /// table's name, so the transform reads them as it would read the table.
    fn source_rows(&self, condition: &str) -> String {
        let columns = ident_list(self.source.columns.iter().map(|c| c.name.as_str()));
        format!(
            "(SELECT {columns} FROM pg_temp.{WORK_TABLE}{condition}) AS {}",
            self.alias()
        )
    }

    /// Columns of the work table a batch's COPY fills, in order.
    pub fn work_copy_columns(&self) -> String {
        let mut columns: Vec<String> = self
            .source
            .replicated_columns()
            .map(|c| quote_ident(&c.name))
            .collect();
        columns.extend(
            [
                "_walfill_op",
                "_walfill_lsn",
                "_walfill_seq",
                "_walfill_unchanged",
                "_walfill_xid",
            ]
            .iter()
            .map(|c| c.to_string()),
        );
        columns.extend((0..self.key.len()).map(|i| format!("_walfill_fk_{i}")));
        columns.join(", ")
    }

    /// Columns of the work table a snapshot chunk's COPY fills.
    pub fn chunk_copy_columns(&self) -> String {
        ident_list(self.source.replicated_columns().map(|c| c.name.as_str()))
    }

    /// Creates the destination schema and the staging table if missing.
    pub fn staging_ddl(&self) -> String {
        let mut columns: Vec<String> = self
            .outputs
            .iter()
            .map(|o| {
                let not_null = if self.key.contains(&o.name) {
                    " NOT NULL"
                } else {
                    ""
                };
                let collate = o
                    .collation
                    .as_ref()
                    .map(|c| format!(" COLLATE {c}"))
                    .unwrap_or_default();
                format!("{} {}{collate}{not_null}", quote_ident(&o.name), o.sql_type)
            })
            .collect();
        columns.extend(
            self.hidden
                .iter()
                .map(|h| format!("{} {}", quote_ident(&h.column), h.sql_type)),
        );
        columns.push("_walfill_lsn pg_lsn NOT NULL".into());
        columns.push("_walfill_seq integer NOT NULL".into());
        columns.push("_walfill_deleted boolean NOT NULL DEFAULT false".into());
        columns.push(format!("PRIMARY KEY ({})", self.keys()));
        let comment = format!(
            "walfill: version {} of target {} (from {}); read it through the view {}",
            self.def.version, self.def.target, self.def.source, self.def.target
        );
        format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {table} ({columns});
             COMMENT ON TABLE {table} IS {comment}",
            schema = quote_ident(&self.def.dest_schema),
            table = self.staging_table(),
            columns = columns.join(", "),
            comment = quote_literal(&comment),
        )
    }

    /// `CREATE OR REPLACE VIEW` over the staging table, tombstones hidden.
    pub fn view_sql(&self) -> String {
        format!(
            "CREATE OR REPLACE VIEW {} AS SELECT {} FROM {} WHERE NOT _walfill_deleted",
            self.view(),
            ident_list(self.outputs.iter().map(|o| o.name.as_str())),
            self.staging_table()
        )
    }

    pub(super) fn upsert_conflict(&self, tombstone: bool) -> String {
        self.upsert_conflict_when(tombstone, CONFLICT_NEWER)
    }

    /// [`Plan::upsert_conflict`] that updates only where `condition` holds.
    pub(super) fn upsert_conflict_when(&self, tombstone: bool, condition: &str) -> String {
        let mut sets: Vec<String> = Vec::new();
        for o in &self.outputs {
            if self.key.contains(&o.name) {
                continue;
            }
            let value = if tombstone {
                "NULL".to_string()
            } else {
                format!("EXCLUDED.{}", quote_ident(&o.name))
            };
            sets.push(format!("{} = {value}", quote_ident(&o.name)));
        }
        for h in &self.hidden {
            sets.push(format!("{0} = EXCLUDED.{0}", quote_ident(&h.column)));
        }
        sets.push("_walfill_lsn = EXCLUDED._walfill_lsn".into());
        sets.push("_walfill_seq = EXCLUDED._walfill_seq".into());
        sets.push("_walfill_deleted = EXCLUDED._walfill_deleted".into());
        format!(
            "ON CONFLICT ({}) DO UPDATE SET {} WHERE {condition}",
            self.keys(),
            sets.join(", ")
        )
    }

    pub(super) fn insert_columns(&self, tombstone: bool) -> String {
        let mut columns: Vec<String> = if tombstone {
            self.key.iter().map(|k| quote_ident(k)).collect()
        } else {
            self.outputs.iter().map(|o| quote_ident(&o.name)).collect()
        };
        columns.extend(self.hidden.iter().map(|h| quote_ident(&h.column)));
        columns.extend(["_walfill_lsn", "_walfill_seq", "_walfill_deleted"].map(String::from));
        columns.join(", ")
    }

    /// The output columns, in order, each a key column of the row aliased
    /// `keys` or a column of the transform's row aliased `rest`.
    pub(super) fn outputs_from(&self, keys: &str, rest: &str) -> String {
        self.outputs
            .iter()
            .map(|o| match self.key.contains(&o.name) {
                true => format!("{keys}.{}", quote_ident(&o.name)),
                false => format!("{rest}.{}", quote_ident(&o.name)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn hidden_values(&self, alias: &str) -> String {
        self.hidden
            .iter()
            .map(|h| format!(", {alias}.{}", quote_ident(&h.source)))
            .collect()
    }

    /// A per-row probe of the stored version of the key of the row aliased
    /// `alias`: true when that version is older than `(lsn, seq)` from
    /// transaction `xid` (see [`stored_loses`]), null when the key is not
    /// stored. A correlated scalar subquery is always an index probe; `NOT
    /// EXISTS` would let the planner scan the whole table.
    fn stored_is_older(&self, alias: &str, lsn: &str, seq: &str, xid: &str) -> String {
        format!(
            "(SELECT {older} FROM {table} AS x WHERE ({x}) = ({a}))",
            older = stored_loses("x", lsn, seq, xid),
            table = self.staging_table(),
            x = self.keys_of("x"),
            a = self.keys_of(alias),
        )
    }

    /// `(key columns) > (values)`, the values typed as the key columns: the
    /// keys after a snapshot chunk's cursor.
    pub fn keys_after(&self, after: &[String]) -> String {
        self.keys_compare(">", after)
    }

    /// `(key columns) OP (values)`, the values typed as the key columns.
    pub fn keys_compare(&self, op: &str, after: &[String]) -> String {
        let values: Vec<String> = self
            .key
            .iter()
            .zip(after)
            .map(|(name, value)| {
                let sql_type = self
                    .source
                    .column(name)
                    .map(|c| c.sql_type.as_str())
                    .unwrap_or("text");
                format!("{}::{sql_type}", quote_literal(value))
            })
            .collect();
        format!("({}) {op} ({})", self.keys(), values.join(", "))
    }

    /// Whether the destination orders the keys as the source does: no key
    /// column has a collation the destination lacks (see `collation`). A
    /// range of keys cut in the source's order is then the same range in
    /// the destination's.
    pub fn key_order_agrees(&self) -> bool {
        self.collations
            .columns
            .iter()
            .all(|(c, _, m)| *m != super::Mapping::Unmatched || !self.key.contains(c))
    }

    /// A query returning a row when the staging table holds a key of the
    /// work table's rows: one index probe a row.
    pub fn work_keys_stored_sql(&self) -> String {
        format!(
            "SELECT 1 FROM pg_temp.{WORK_TABLE} AS w \
              WHERE (SELECT 1 FROM {} AS x WHERE ({}) = ({})) IS NOT NULL LIMIT 1",
            self.staging_table(),
            self.keys_of("x"),
            self.keys_of("w"),
        )
    }

    /// A query returning a row when the staging table holds a key matching
    /// `predicate` (a condition on the key columns), or any row at all. The
    /// `ORDER BY key LIMIT 1` makes it one index probe: a bare `EXISTS` may
    /// scan the whole table when nothing matches.
    pub fn stored_keys_sql(&self, predicate: Option<&str>) -> String {
        let condition = predicate.map(|p| format!(" WHERE {p}")).unwrap_or_default();
        format!(
            "SELECT 1 FROM {}{condition} ORDER BY {} LIMIT 1",
            self.staging_table(),
            self.keys()
        )
    }

    /// One `INSERT` storing each work-table row (alias `m`, the source's
    /// values under their own names) once: transformed when it is an
    /// upsert (all are when `upsert` is `None`) and passes the filter, and
    /// as a tombstone otherwise (its key, and the hidden values of an
    /// upsert). `version` gives each row's `_walfill_lsn, _walfill_seq`;
    /// `condition` says which work rows go.
    ///
    /// So a fresh store writes rows and tombstones in one scan, the filter
    /// evaluated once a row. A key is a plain reference to itself, so a
    /// stored row's key is its work row's either way.
    fn store_once(&self, upsert: Option<&str>, version: &str, condition: &str) -> String {
        let lateral: Vec<String> = upsert
            .map(str::to_string)
            .into_iter()
            .chain(self.passes())
            .collect();
        let lateral = match lateral.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", lateral.join(" AND ")),
        };
        let outputs = self.outputs_from("m", "t");
        let hidden: String = self
            .hidden
            .iter()
            .map(|h| {
                let value = format!("m.{}", quote_ident(&h.source));
                match upsert {
                    Some(upsert) => format!(", CASE WHEN {upsert} THEN {value} END"),
                    None => format!(", {value}"),
                }
            })
            .collect();
        format!(
            "INSERT INTO {table} AS s ({columns}) \
             SELECT {outputs}{hidden}, {version}, t.{RESERVED_PREFIX}live IS NULL \
             FROM pg_temp.{WORK_TABLE} AS m LEFT JOIN LATERAL \
             (SELECT true AS {RESERVED_PREFIX}live, {select} FROM {row}{lateral} {FENCE}) AS t \
             ON true WHERE {condition}",
            table = self.staging_table(),
            columns = self.insert_columns(false),
            select = self.def.select,
            row = self.source_row_of("m"),
        )
    }

    /// Statements that load a snapshot chunk from the work table, every row
    /// versioned `(lsn, seq)`: `(boundary, 0)` for a chunk of an exported
    /// snapshot, a negative seq naming the chunk for a chunked copy's
    /// (see [`chunk_seq`]). With `fresh`, the caller has established
    /// that no key of the chunk is stored yet (a range probe under walfill's
    /// lock), and plain inserts do; otherwise rows whose key holds a version
    /// at least as new are left out before an upsert, so they cost no lock
    /// and no WAL.
    pub fn chunk_sql(&self, boundary: Lsn, seq: i32, fresh: bool) -> Vec<String> {
        let lsn = format!("{}::pg_lsn", quote_literal(&boundary.to_string()));
        let alias = self.alias();
        let filter = self.passes();
        if fresh && filter.is_some() {
            return vec![self.store_once(None, &format!("{lsn}, {seq}"), "true")];
        }
        let (rows, live_conflict, dead_conflict) = if fresh {
            (self.source_rows(""), String::new(), String::new())
        } else {
            let older = self.stored_is_older("w", &lsn, &seq.to_string(), "NULL::bigint");
            (
                self.source_rows(&format!(" AS w WHERE coalesce({older}, true)")),
                format!(" {}", self.upsert_conflict(false)),
                format!(" {}", self.upsert_conflict(true)),
            )
        };
        let mut statements = vec![format!(
            "INSERT INTO {table} AS s ({columns}) SELECT {select}{hidden}, {lsn}, {seq}, false FROM {rows}{filter}{live_conflict}",
            table = self.staging_table(),
            columns = self.insert_columns(false),
            select = self.def.select,
            hidden = self.hidden_values(&alias),
            filter = filter.as_ref().map(|f| format!(" WHERE {f}")).unwrap_or_default(),
        )];
        if let Some(filter) = filter {
            statements.push(format!(
                "INSERT INTO {table} AS s ({columns}) SELECT {keys}{hidden}, {lsn}, {seq}, true FROM {rows} WHERE NOT {filter}{dead_conflict}",
                table = self.staging_table(),
                columns = self.insert_columns(true),
                keys = self.keys_of(&alias),
                hidden = self.hidden_values(&alias),
            ));
        }
        statements
    }

    /// Whether the version's rows are the source's rows as they are: the
    /// select list gives every replicated column of the source, each a
    /// plain reference to itself, in order, with no filter (established
    /// when the plan was checked). A snapshot chunk (with the hidden
    /// columns' values sent again after the row's) can then be copied into
    /// the version's table as it is, with no transform to run.
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    /// `COPY` of a chunk's rows straight into the version's table (see
    /// [`Plan::is_identity`]), each row followed by its chunk's version.
    pub fn direct_copy_sql(&self) -> String {
        format!(
            "COPY {} ({}) FROM STDIN",
            self.staging_table(),
            ident_list(
                self.outputs
                    .iter()
                    .map(|o| o.name.as_str())
                    .chain(self.hidden.iter().map(|h| h.column.as_str()))
                    .chain(["_walfill_lsn", "_walfill_seq"])
            )
        )
    }

    /// Statements that apply a batch of folded changes from the work table.
    pub fn batch_sql(&self) -> BatchSql {
        let table = self.staging_table();
        let work = format!("pg_temp.{WORK_TABLE}");
        let newer = format!(
            "(m._walfill_lsn, m._walfill_seq) > ($1::text::pg_lsn, $2::integer) AND coalesce({}, true)",
            self.stored_is_older("m", "m._walfill_lsn", "m._walfill_seq", "m._walfill_xid")
        );
        let passes = self.passes();
        let fill_key = self
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("coalesce(r._walfill_fk_{i}, r.{})", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(", ");
        let (fill, unfilled) = if self.hidden.is_empty() {
            (None, None)
        } else {
            // Per-row probes by key (see `stored_is_older` for why not a join).
            // A key whose last change the transform failed on (a dead letter)
            // has no value stored beside a row: its dead letter kept the
            // whole source row, which gives it.
            let dead_key = format!(
                "ARRAY[{}]::text[]",
                self.key
                    .iter()
                    .enumerate()
                    .map(|(i, k)| format!(
                        "coalesce(r._walfill_fk_{i}, r.{})::text",
                        quote_ident(k)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let sets = self
                .hidden
                .iter()
                .map(|h| {
                    format!(
                        "{src} = CASE WHEN {name} = ANY(r._walfill_unchanged) \
                         THEN coalesce((SELECT s.{col} FROM {table} AS s WHERE ({s}) = ({fill_key})), \
                           (SELECT (jsonb_populate_record(NULL::pg_temp.{WORK_TABLE}, d.source_row)).{src} \
                              FROM walfill.dead_letters AS d \
                             WHERE d.target = {target} AND d.version = {version} \
                               AND d.key = {dead_key})) \
                         ELSE r.{src} END",
                        src = quote_ident(&h.source),
                        name = quote_literal(&h.source),
                        col = quote_ident(&h.column),
                        s = self.keys_of("s"),
                        target = quote_literal(&self.def.target),
                        version = quote_literal(&self.def.version),
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let names = self
                .hidden
                .iter()
                .map(|h| quote_literal(&h.source))
                .collect::<Vec<_>>()
                .join(", ");
            (
                Some(format!(
                    "UPDATE {work} AS r SET {sets} WHERE r._walfill_unchanged IS NOT NULL"
                )),
                Some(format!(
                    "SELECT count(*) FROM {work} AS r WHERE r._walfill_unchanged && ARRAY[{names}]::text[] \
                     AND (SELECT 1 FROM {table} AS s WHERE ({s}) = ({fill_key})) IS NULL",
                    s = self.keys_of("s"),
                )),
            )
        };
        let watermark = "(m._walfill_lsn, m._walfill_seq) > ($1::text::pg_lsn, $2::integer)";
        let upsert_with = |condition: &str, conflict: &str| {
            format!(
                "INSERT INTO {table} AS s ({columns}) \
                 SELECT t.*{hidden}, m._walfill_lsn, m._walfill_seq, false \
                 FROM {work} AS m, LATERAL (SELECT {select} FROM {row}{passes} {FENCE}) AS t \
                 WHERE m._walfill_op = 'u' AND {condition} {conflict}",
                columns = self.insert_columns(false),
                hidden = self.hidden_values("m"),
                select = self.def.select,
                row = self.source_row_of("m"),
                passes = passes
                    .as_ref()
                    .map(|p| format!(" WHERE {p}"))
                    .unwrap_or_default(),
            )
        };
        let upsert = upsert_with(&newer, &self.upsert_conflict(false));
        let insert_fresh = upsert_with(watermark, "");
        let tombstone_hidden: String = self
            .hidden
            .iter()
            .map(|h| {
                format!(
                    ", CASE WHEN m._walfill_op = 'u' THEN m.{} END",
                    quote_ident(&h.source)
                )
            })
            .collect();
        // Deletes, and updates whose row the filter rejects.
        let dead = match &passes {
            Some(p) => format!(
                "(m._walfill_op = 'd' OR NOT (SELECT {p} FROM {row}))",
                row = self.source_row_of("m")
            ),
            None => "m._walfill_op = 'd'".to_string(),
        };
        let tombstone_with = |condition: &str, conflict: &str| {
            format!(
                "INSERT INTO {table} AS s ({columns}) \
                 SELECT {m}{tombstone_hidden}, m._walfill_lsn, m._walfill_seq, true \
                 FROM {work} AS m WHERE {dead} AND {condition} {conflict}",
                columns = self.insert_columns(true),
                m = self.keys_of("m"),
            )
        };
        let tombstone = tombstone_with(&newer, &self.upsert_conflict(true));
        let store_fresh = self.store_once(
            Some("m._walfill_op = 'u'"),
            "m._walfill_lsn, m._walfill_seq",
            watermark,
        );
        let load_fresh = self.store_once(
            Some("m._walfill_op = 'u'"),
            "m._walfill_lsn, m._walfill_seq",
            &format!(
                "{watermark} AND (t.{RESERVED_PREFIX}live OR {})",
                self.may_be_toasted("m")
            ),
        );
        let any_stored = self.work_keys_stored_sql();
        BatchSql {
            fill,
            unfilled,
            upsert,
            tombstone,
            any_stored,
            insert_fresh,
            store_fresh,
            load_fresh,
        }
    }

    /// A condition true for a row aliased `alias` one of whose hidden
    /// values could be stored out of line by the source, and so arrive
    /// later as an unchanged TOASTed value. PostgreSQL compresses or moves
    /// out of line only a value larger than an aligned TOAST pointer
    /// (`MAXALIGN(TOAST_POINTER_SIZE)`, 24 bytes, header included): a text
    /// or bytea value of at most 20 bytes never is, whatever the table's
    /// storage settings, even counting a 4-byte header (stored values have
    /// 1-byte ones; the test
    /// `toast::values_of_twenty_bytes_are_never_stored_out_of_line` shows
    /// the server's floor). `octet_length` is the raw length, so a value
    /// compressed in line counts as it was, and text is measured in the
    /// source's encoding (`convert_to`), which may take more bytes for it
    /// than the destination's. Values of other types count if not null.
    fn may_be_toasted(&self, alias: &str) -> String {
        const TEXT_LIKE: [u32; 4] = [25, 1042, 1043, 17]; // text, bpchar, varchar, bytea
        let tests: Vec<String> = self
            .hidden
            .iter()
            .map(|h| {
                let value = format!("{alias}.{}", quote_ident(&h.source));
                let text_like = self
                    .source
                    .column(&h.source)
                    .is_some_and(|c| TEXT_LIKE.contains(&c.type_oid));
                // Bytes as the source stores them: in its encoding.
                let text = self
                    .source
                    .column(&h.source)
                    .is_some_and(|c| [25, 1043].contains(&c.type_oid));
                let bytes = match self.source.encoding.as_deref() {
                    Some(encoding) if encoding != "SQL_ASCII" && text => {
                        format!(
                            "octet_length(convert_to({value}, {}))",
                            quote_literal(encoding)
                        )
                    }
                    _ => format!("octet_length({value})"),
                };
                match text_like {
                    true => format!("{bytes} > {SHORT_INLINE}"),
                    false => format!("{value} IS NOT NULL"),
                }
            })
            .collect();
        match tests.is_empty() {
            true => "false".to_string(),
            false => tests.join(" OR "),
        }
    }

    /// Removes every row older than a TRUNCATE. Parameters: `($1 lsn text,
    /// $2 seq, $3 xid)` (the xid NULL when unknown).
    pub fn truncate_sql(&self) -> String {
        format!(
            "DELETE FROM {} AS s WHERE {}",
            self.staging_table(),
            stored_loses("s", "$1::text::pg_lsn", "$2::integer", "$3::bigint")
        )
    }
}
