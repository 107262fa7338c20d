//! Keyset-ordered chunks of a table, read with `COPY ... TO STDOUT`.
//!
//! A chunk is `rows with key > cursor, ordered by key, LIMIT n`: every chunk
//! costs one index range scan however far the copy has got (OFFSET would
//! re-read everything before it). The rows stream to any sink in COPY text
//! format; the last row's key becomes the next cursor.

use bytes::{Bytes, BytesMut};
use futures_util::{pin_mut, SinkExt, StreamExt};
use tokio_postgres::CopyInSink;

use crate::error::SnapshotError;
use crate::sql::{ident_list, quote_ident, quote_literal};
use crate::table::SourceTable;

/// Bytes of COPY data gathered into one buffer.
const FORWARD_BYTES: usize = 256 * 1024;

/// One chunk to read: the table's replicated columns, keys after `after`.
#[derive(Clone, Debug)]
pub struct KeysetChunk<'a> {
    table: &'a SourceTable,
    after: Option<&'a [String]>,
    limit: u32,
    until: Option<&'a [String]>,
    scope: Option<&'a str>,
    extra: &'a [String],
}

/// What a chunk read produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkRead {
    /// Rows copied.
    pub rows: u64,
    /// Key of the last row in text form (the next cursor); `None` when the
    /// chunk was empty, which means the copy is complete.
    pub last_key: Option<Vec<String>>,
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
        }
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

    /// `COPY (SELECT ... WHERE (key) > (cursor) ORDER BY key LIMIT n) TO STDOUT`.
    pub fn copy_out_sql(&self) -> String {
        let columns = ident_list(
            self.table
                .replicated_columns()
                .map(|c| c.name.as_str())
                .chain(self.extra.iter().map(String::as_str)),
        );
        let key = ident_list(self.table.key.iter().map(String::as_str));
        let mut sql = format!("SELECT {columns} FROM {}", self.table.quoted());
        let conditions: Vec<String> = self
            .after_predicate()
            .into_iter()
            .chain(self.until.map(|until| self.key_predicate("<=", until)))
            .chain(self.scope.map(|scope| format!("({scope})")))
            .collect();
        if !conditions.is_empty() {
            sql.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
        }
        sql.push_str(&format!(" ORDER BY {key} LIMIT {}", self.limit));
        format!("COPY ({sql}) TO STDOUT")
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

    /// Reads the chunk from `source` (inside the snapshot's transaction)
    /// into memory: at most `limit` rows.
    pub async fn read(
        &self,
        source: &tokio_postgres::Transaction<'_>,
    ) -> Result<ChunkData, SnapshotError> {
        let table = self.table.to_string();
        let stream = source
            .copy_out(&self.copy_out_sql())
            .await
            .map_err(|e| SnapshotError::query(format!("reading a chunk of {table}"), e))?;
        pin_mut!(stream);
        // Rows arrive one per message; keep them in larger buffers.
        let mut last: Option<Bytes> = None;
        let mut rows = 0u64;
        let mut parts = Vec::new();
        let mut buffer = BytesMut::with_capacity(FORWARD_BYTES + 4096);
        while let Some(row) = stream.next().await {
            let row =
                row.map_err(|e| SnapshotError::query(format!("reading a chunk of {table}"), e))?;
            buffer.extend_from_slice(&row);
            last = Some(row);
            rows += 1;
            if buffer.len() >= FORWARD_BYTES {
                parts.push(buffer.split().freeze());
            }
        }
        if !buffer.is_empty() {
            parts.push(buffer.freeze());
        }
        let last_key = match last {
            None => None,
            Some(line) => {
                let fields = split_copy_line(&line)?;
                let key = self
                    .key_positions()
                    .into_iter()
                    .map(|i| {
                        fields.get(i).cloned().flatten().ok_or_else(|| {
                            SnapshotError::Protocol(format!(
                                "a key column of {table} is missing or NULL in COPY output"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(key)
            }
        };
        Ok(ChunkData {
            read: ChunkRead { rows, last_key },
            parts,
        })
    }
}

/// A chunk read into memory, in COPY text format.
#[derive(Clone, Debug, Default)]
pub struct ChunkData {
    /// Rows and last key.
    pub read: ChunkRead,
    parts: Vec<Bytes>,
}

impl ChunkData {
    /// The rows, each as its fields in COPY order (`None` for NULL).
    pub fn rows(&self) -> impl Iterator<Item = Result<Vec<Option<String>>, SnapshotError>> + '_ {
        self.parts
            .iter()
            .flat_map(|part| part.split_inclusive(|b| *b == b'\n'))
            .map(split_copy_line)
    }

    /// Writes the rows into `sink` and finishes it; returns the rows written.
    pub async fn write_to(&self, sink: CopyInSink<Bytes>) -> Result<u64, SnapshotError> {
        pin_mut!(sink);
        for part in &self.parts {
            sink.feed(part.clone())
                .await
                .map_err(|e| SnapshotError::query("writing a chunk to the destination", e))?;
        }
        sink.as_mut()
            .finish()
            .await
            .map_err(|e| SnapshotError::query("writing a chunk to the destination", e))
    }
}

/// Splits one row of COPY text format into its fields (`None` for `\N`).
pub fn split_copy_line(line: &[u8]) -> Result<Vec<Option<String>>, SnapshotError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.split(|b| *b == b'\t')
        .map(|field| {
            if field == b"\\N" {
                return Ok(None);
            }
            unescape_copy_field(field).map(Some)
        })
        .collect()
}

fn unescape_copy_field(field: &[u8]) -> Result<String, SnapshotError> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b != b'\\' || i + 1 == field.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = field[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                let mut digits = 1;
                while digits < 3 && i < field.len() && (b'0'..=b'7').contains(&field[i]) {
                    value = value * 8 + u32::from(field[i] - b'0');
                    i += 1;
                    digits += 1;
                }
                out.push(value as u8);
            }
            b'x' if i < field.len() && field[i].is_ascii_hexdigit() => {
                let mut value = 0u32;
                let mut digits = 0;
                while digits < 2 && i < field.len() && field[i].is_ascii_hexdigit() {
                    value = value * 16 + (field[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    digits += 1;
                }
                out.push(value as u8);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).map_err(|_| SnapshotError::Protocol("COPY field is not UTF-8".into()))
}

/// Escapes a value for COPY text format.
pub fn escape_copy_field(value: &str, out: &mut String) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c => out.push(c),
        }
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
        assert!(
            scoped.contains(
                "WHERE (\"tenant\", \"id\") > ('o''brien'::text, '42'::bigint) \
                 AND (note = 'x' OR id < 3) ORDER BY"
            ),
            "{scoped}"
        );
    }

    #[test]
    fn copy_text_round_trips() {
        let values = [
            "plain",
            "tab\there",
            "new\nline",
            "back\\slash",
            "ünï",
            "\r\u{8}\u{c}\u{b}",
        ];
        let mut line = String::new();
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            escape_copy_field(v, &mut line);
        }
        line.push_str("\t\\N\n");
        let fields = split_copy_line(line.as_bytes()).unwrap();
        let expected: Vec<Option<String>> = values
            .iter()
            .map(|v| Some(v.to_string()))
            .chain([None])
            .collect();
        assert_eq!(fields, expected);
        assert_eq!(
            split_copy_line(b"\\101\\x42\\.").unwrap(),
            vec![Some("AB.".to_string())]
        );
    }
}
