//! Keyset-ordered chunks of a table, read with `COPY ... TO STDOUT`.
//!
//! A chunk is `rows with key > cursor, ordered by key, LIMIT n`: every chunk
//! costs one index range scan however far the copy has got (OFFSET would
//! re-read everything before it). The rows stream on as they arrive (see
//! [`crate::rows`]); the last row's key becomes the next cursor. In binary
//! format each row also carries its key as text after its own columns, so
//! the cursor is the key as the source prints it, whatever its type; the
//! reader strips it before the row goes on.
//!
//! A chunk may also be *projected*: the source evaluates a select list over
//! each of its rows (see [`Projection`]) and sends that instead of the
//! table's columns.

use bytes::Bytes;
use futures_util::StreamExt;

use crate::copy_data::{split_copy_line, strip_binary_header, BinaryRow, CopyFormat};
use crate::error::SnapshotError;
use crate::rows::{ChunkRead, PieceWriter, RowsSender};
use crate::sql::{ident_list, quote_ident, quote_literal};
use crate::table::SourceTable;

/// One chunk to read: the table's replicated columns, keys after `after`.
#[derive(Clone, Debug)]
pub struct KeysetChunk<'a> {
    table: &'a SourceTable,
    after: Option<&'a [String]>,
    limit: u32,
    until: Option<&'a [String]>,
    scope: Option<&'a str>,
    extra: &'a [String],
    format: CopyFormat,
    projection: Option<&'a Projection>,
}

/// A select list the source evaluates over each row of a chunk, sent in
/// place of the table's columns (in binary only).
///
/// The chunk's rows are selected, ordered and limited first, in a subquery
/// that gives every column of the table the name the select list knows it
/// by (`names`, by position): a column renamed since the select list was
/// written is still the same column to it, and a column now holding an old
/// name is not mistaken for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    /// The alias the chunk's rows go by.
    pub alias: String,
    /// Each column of the table, in its order, as the select list names it.
    pub names: Vec<String>,
    /// The select list (over `alias`), without `SELECT`.
    pub select: String,
    /// What follows the aliased rows in `FROM`, if anything (a lateral join).
    pub join: String,
    /// Fields each row of the select list has.
    pub fields: usize,
}

impl<'a> KeysetChunk<'a> {
    /// The chunk of at most `limit` rows whose key follows `after` (from the
    /// start when `None`).
    pub fn new(table: &'a SourceTable, after: Option<&'a [String]>, limit: u32) -> Self {
        KeysetChunk {
            table,
            after,
            limit,
            until: None,
            scope: None,
            extra: &[],
            format: CopyFormat::Text,
            projection: None,
        }
    }

    /// The same chunk with `projection` evaluated over its rows (see
    /// [`Projection`]); its rows travel in binary.
    pub fn projected(mut self, projection: Option<&'a Projection>) -> Self {
        self.projection = projection;
        if projection.is_some() {
            self.format = CopyFormat::Binary;
        }
        self
    }

    /// The same chunk read in `format`.
    pub fn in_format(mut self, format: CopyFormat) -> Self {
        if self.projection.is_none() {
            self.format = format;
        }
        self
    }

    /// The same chunk of the keys up to `until` (included) only.
    pub fn until(mut self, until: Option<&'a [String]>) -> Self {
        self.until = until;
        self
    }

    /// `SELECT` of the table's last key in text form (among the rows
    /// matching `scope`, if given; no row when there is none).
    pub fn last_key_sql(table: &SourceTable, scope: Option<&str>) -> String {
        let texts: Vec<String> = table
            .key
            .iter()
            .map(|k| format!("{}::text", quote_ident(k)))
            .collect();
        let descending: Vec<String> = table
            .key
            .iter()
            .map(|k| format!("{} DESC", quote_ident(k)))
            .collect();
        format!(
            "SELECT ARRAY[{}] FROM {}{} ORDER BY {} LIMIT 1",
            texts.join(", "),
            table.quoted(),
            scope.map(|s| format!(" WHERE {s}")).unwrap_or_default(),
            descending.join(", ")
        )
    }

    /// The same chunk with the columns `extra` (of the table) sent again
    /// after the replicated ones, for a destination table that keeps them
    /// twice.
    pub fn with_extra(mut self, extra: &'a [String]) -> Self {
        self.extra = extra;
        self
    }

    /// The same chunk of the rows matching `scope` only (a condition over
    /// the table's columns, as in its `WHERE`).
    pub fn within(mut self, scope: Option<&'a str>) -> Self {
        self.scope = scope;
        self
    }

    /// `(key columns) > (cursor values)` with typed literals, or `None` for
    /// the first chunk. The key columns are unqualified, so the predicate
    /// also works on any table with the same key columns.
    pub fn after_predicate(&self) -> Option<String> {
        Some(self.key_predicate(">", self.after?))
    }

    /// `(key columns) OP (values)` with typed literals.
    fn key_predicate(&self, op: &str, keys: &[String]) -> String {
        let values: Vec<String> = self
            .table
            .key
            .iter()
            .zip(keys)
            .map(|(name, value)| {
                let sql_type = self
                    .table
                    .column(name)
                    .map(|c| c.sql_type.as_str())
                    .unwrap_or("text");
                format!("{}::{sql_type}", quote_literal(value))
            })
            .collect();
        let key = ident_list(self.table.key.iter().map(String::as_str));
        format!("({key}) {op} ({})", values.join(", "))
    }

    /// `COPY (SELECT ... WHERE (key) > (cursor) ORDER BY key LIMIT n) TO
    /// STDOUT`, in binary with the key's text after each row's columns.
    pub fn copy_out_sql(&self) -> String {
        if let Some(projection) = self.projection {
            return self.projected_sql(projection);
        }
        let mut columns = ident_list(
            self.table
                .replicated_columns()
                .map(|c| c.name.as_str())
                .chain(self.extra.iter().map(String::as_str)),
        );
        if self.format == CopyFormat::Binary {
            for (i, k) in self.table.key.iter().enumerate() {
                columns.push_str(&format!(", {}::text AS _walfill_key_{i}", quote_ident(k)));
            }
        }
        let key = ident_list(self.table.key.iter().map(String::as_str));
        let sql = format!(
            "SELECT {columns} FROM {}{} ORDER BY {key} LIMIT {}",
            self.table.quoted(),
            self.where_clause(),
            self.limit
        );
        format!("COPY ({sql}) TO STDOUT{}", self.format.option())
    }

    /// ` WHERE ...` of the chunk's bounds (after the cursor, up to `until`,
    /// within the scope), or nothing when it has none.
    fn where_clause(&self) -> String {
        let conditions: Vec<String> = self
            .after_predicate()
            .into_iter()
            .chain(self.until.map(|until| self.key_predicate("<=", until)))
            .chain(self.scope.map(|scope| format!("({scope})")))
            .collect();
        match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        }
    }

    /// [`KeysetChunk::copy_out_sql`] of a projected chunk: the chunk's rows
    /// under the select list's names, then the select list over them, each
    /// row followed by its key's text.
    fn projected_sql(&self, projection: &Projection) -> String {
        let renamed: Vec<String> = self
            .table
            .columns
            .iter()
            .zip(&projection.names)
            .map(|(c, name)| format!("{} AS {}", quote_ident(&c.name), quote_ident(name)))
            .collect();
        let key = ident_list(self.table.key.iter().map(String::as_str));
        let inner = format!(
            "SELECT {} FROM {}{} ORDER BY {key} LIMIT {}",
            renamed.join(", "),
            self.table.quoted(),
            self.where_clause(),
            self.limit
        );
        let alias = quote_ident(&projection.alias);
        let known: Vec<String> = self
            .table
            .key
            .iter()
            .map(|k| {
                let at = self.table.columns.iter().position(|c| &c.name == k);
                let name = at.and_then(|i| projection.names.get(i)).unwrap_or(k);
                format!("{alias}.{}", quote_ident(name))
            })
            .collect();
        let texts: String = known
            .iter()
            .enumerate()
            .map(|(i, k)| format!(", {k}::text AS _walfill_key_{i}"))
            .collect();
        format!(
            "COPY (SELECT {}{texts} FROM ({inner}) AS {alias}{} ORDER BY {}) TO STDOUT{}",
            projection.select,
            projection.join,
            known.join(", "),
            CopyFormat::Binary.option()
        )
    }

    /// Positions of the key columns among the copied columns.
    fn key_positions(&self) -> Vec<usize> {
        let names: Vec<&str> = self
            .table
            .replicated_columns()
            .map(|c| c.name.as_str())
            .collect();
        self.table
            .key
            .iter()
            .filter_map(|k| names.iter().position(|n| n == k))
            .collect()
    }

    /// Starts reading the chunk from `source` (inside its snapshot's
    /// transaction); `None` when no row follows the cursor, which means the
    /// copy is complete.
    pub async fn start(
        &self,
        source: &tokio_postgres::Transaction<'_>,
    ) -> Result<Option<ChunkReading>, SnapshotError> {
        let table = self.table.to_string();
        let failed = |e| SnapshotError::query(format!("reading a chunk of {table}"), e);
        let stream = source
            .copy_out(&self.copy_out_sql())
            .await
            .map_err(failed)?;
        let mut stream = Box::pin(stream);
        let Some(first) = stream.next().await.transpose().map_err(failed)? else {
            return Ok(None);
        };
        let first = match self.format {
            CopyFormat::Text => first,
            CopyFormat::Binary => {
                let rest = strip_binary_header(&first)?.len();
                first.slice(first.len() - rest..)
            }
        };
        if self.format == CopyFormat::Binary && BinaryRow::parse(&first)?.is_none() {
            return Ok(None);
        }
        let copied = match self.projection {
            Some(projection) => projection.fields,
            None => self.table.replicated_columns().count() + self.extra.len(),
        };
        Ok(Some(ChunkReading {
            table,
            format: self.format,
            stream,
            first: Some(first),
            copied,
            key_positions: match self.format {
                CopyFormat::Text => self.key_positions(),
                CopyFormat::Binary => (copied..copied + self.table.key.len()).collect(),
            },
        }))
    }
}

/// What sees each row of a chunk as the source sent it.
pub type RowTap<'a> = dyn FnMut(&[u8]) + Send + 'a;

/// A chunk being read from the source.
pub struct ChunkReading {
    table: String,
    format: CopyFormat,
    stream: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    first: Option<Bytes>,
    /// Fields each row keeps (binary rows carry the key's text after them).
    copied: usize,
    /// Where the key's text is in a row.
    key_positions: Vec<usize>,
}

impl ChunkReading {
    /// Sends the chunk's rows to `out` in pieces, then its end; returns what
    /// it read. `tap`, if given, sees each row as the source sent it (a
    /// line of a text copy). On an error nothing more is sent: the caller
    /// tells the chunk's consumer.
    pub async fn forward(
        mut self,
        out: &RowsSender,
        mut tap: Option<&mut RowTap<'_>>,
    ) -> Result<ChunkRead, SnapshotError> {
        let mut writer = PieceWriter::new(self.format, out);
        let mut rows = 0u64;
        // The last row, kept (a reference, not a copy) for its key.
        let mut last: Option<Bytes> = None;
        loop {
            let message = match self.first.take() {
                Some(first) => first,
                None => match self.stream.next().await {
                    Some(message) => message.map_err(|e| {
                        SnapshotError::query(format!("reading a chunk of {}", self.table), e)
                    })?,
                    None => break,
                },
            };
            match self.format {
                CopyFormat::Text => writer.row_buffer().extend_from_slice(&message),
                CopyFormat::Binary => match BinaryRow::parse(&message)? {
                    Some(row) => row.write_first(self.copied, writer.row_buffer()),
                    None => continue,
                },
            }
            if let Some(tap) = tap.as_mut() {
                tap(&message);
            }
            last = Some(message);
            rows += 1;
            writer.flush_full().await?;
        }
        let last_key = last.map(|row| self.key_of(&row)).transpose()?;
        let read = ChunkRead { rows, last_key };
        writer.finish(read.clone()).await?;
        Ok(read)
    }

    /// The key of `row` (as the source sent it) in text form.
    fn key_of(&self, row: &[u8]) -> Result<Vec<String>, SnapshotError> {
        let fields: Vec<Option<String>> = match self.format {
            CopyFormat::Text => split_copy_line(row)?,
            CopyFormat::Binary => {
                let row = BinaryRow::parse(row)?.ok_or_else(|| self.no_key())?;
                self.key_positions
                    .iter()
                    .map(|&i| {
                        row.field(i)
                            .map(|b| {
                                String::from_utf8(b.to_vec()).map_err(|_| {
                                    SnapshotError::Protocol("a key's text is not UTF-8".into())
                                })
                            })
                            .transpose()
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let positions: Vec<usize> = match self.format {
            CopyFormat::Text => self.key_positions.clone(),
            CopyFormat::Binary => (0..self.key_positions.len()).collect(),
        };
        positions
            .into_iter()
            .map(|i| {
                fields
                    .get(i)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| self.no_key())
            })
            .collect()
    }

    fn no_key(&self) -> SnapshotError {
        SnapshotError::Protocol(format!(
            "a key column of {} is missing or NULL in COPY output",
            self.table
        ))
    }
}

/// The identifier list of the columns a chunk copies, for `COPY t (...) FROM STDIN`.
pub fn copied_columns(table: &SourceTable) -> String {
    ident_list(table.replicated_columns().map(|c| c.name.as_str()))
}

/// `"key1", "key2"`, quoted.
pub fn key_columns(table: &SourceTable) -> String {
    table
        .key
        .iter()
        .map(|k| quote_ident(k))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ReplicaIdentity, TableColumn};

    fn table() -> SourceTable {
        let col = |attnum, name: &str, sql_type: &str| TableColumn {
            attnum,
            name: name.into(),
            sql_type: sql_type.into(),
            type_oid: 0,
            len: -1,
            storage: 'x',
            generated: None,
            collation: None,
        };
        SourceTable {
            schema: "public".into(),
            name: "Orders".into(),
            oid: 1,
            columns: vec![
                col(1, "tenant", "text"),
                col(2, "id", "bigint"),
                col(3, "note", "text"),
            ],
            replica_identity: ReplicaIdentity::Default,
            key: vec!["tenant".into(), "id".into()],
            estimated_rows: 0,
            estimated_from_size: false,
            encoding: None,
            default_collation: None,
        }
    }

    #[test]
    fn chunks_are_keyset_ranges() {
        let t = table();
        let first = KeysetChunk::new(&t, None, 500).copy_out_sql();
        assert_eq!(
            first,
            "COPY (SELECT \"tenant\", \"id\", \"note\" FROM \"public\".\"Orders\" \
             ORDER BY \"tenant\", \"id\" LIMIT 500) TO STDOUT"
        );
        let after = vec!["o'brien".to_string(), "42".to_string()];
        let next = KeysetChunk::new(&t, Some(&after), 500).copy_out_sql();
        assert!(
            next.contains("WHERE (\"tenant\", \"id\") > ('o''brien'::text, '42'::bigint)"),
            "{next}"
        );
        assert!(!next.contains("OFFSET"));
        assert_eq!(KeysetChunk::new(&t, None, 1).key_positions(), vec![0, 1]);
        let scoped = KeysetChunk::new(&t, Some(&after), 500)
            .within(Some("note = 'x' OR id < 3"))
            .copy_out_sql();
        let binary = KeysetChunk::new(&t, Some(&after), 500)
            .in_format(CopyFormat::Binary)
            .copy_out_sql();
        assert!(
            binary.starts_with(
                "COPY (SELECT \"tenant\", \"id\", \"note\", \"tenant\"::text AS _walfill_key_0, \
                 \"id\"::text AS _walfill_key_1 FROM"
            ) && binary.ends_with("LIMIT 500) TO STDOUT (FORMAT binary)"),
            "{binary}"
        );
        assert!(
            scoped.contains(
                "WHERE (\"tenant\", \"id\") > ('o''brien'::text, '42'::bigint) \
                 AND (note = 'x' OR id < 3) ORDER BY"
            ),
            "{scoped}"
        );
    }

    #[test]
    fn a_projected_chunk_renames_before_it_selects() {
        let mut t = table();
        // Renamed since the select list was written: "note" is now "body".
        t.columns[2].name = "body".into();
        let projection = Projection {
            alias: "Orders".into(),
            names: vec!["tenant".into(), "id".into(), "note".into()],
            select: "id, upper(note) AS note".into(),
            join: String::new(),
            fields: 2,
        };
        let after = vec!["a".to_string(), "7".to_string()];
        let sql = KeysetChunk::new(&t, Some(&after), 100)
            .in_format(CopyFormat::Text)
            .projected(Some(&projection))
            .copy_out_sql();
        assert_eq!(
            sql,
            "COPY (SELECT id, upper(note) AS note, \"Orders\".\"tenant\"::text AS _walfill_key_0, \
             \"Orders\".\"id\"::text AS _walfill_key_1 FROM (SELECT \"tenant\" AS \"tenant\", \
             \"id\" AS \"id\", \"body\" AS \"note\" FROM \"public\".\"Orders\" \
             WHERE (\"tenant\", \"id\") > ('a'::text, '7'::bigint) ORDER BY \"tenant\", \"id\" \
             LIMIT 100) AS \"Orders\" ORDER BY \"Orders\".\"tenant\", \"Orders\".\"id\") \
             TO STDOUT (FORMAT binary)"
        );
    }
}
