//! Output formats of `walfill decode`: JSON lines, and exactly the lines
//! PostgreSQL's `test_decoding` plugin prints (default options), so anyone
//! can diff the two.

use rustc_hash::FxHashMap as HashMap;
use std::io::Write;
use std::sync::Arc;

use walfill_replay::change::{Datum, Relation, RowChange};
use walfill_replay::decode::{ChangeRef, DatumRef, Sink, SinkError, TxnInfo};
use walfill_replay::types::{output, TypeInfo};
use walfill_replay::Lsn;

use super::keywords::needs_quotes;

/// `quote_identifier`: quotes unless the name is lower case letters, digits
/// and underscores (not starting with a digit) and not a keyword.
pub(super) fn quote_identifier(name: &str) -> String {
    let safe = name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if safe && !needs_quotes(name) {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn qualified(relation: &Relation) -> String {
    format!(
        "{}.{}",
        quote_identifier(&relation.schema),
        quote_identifier(&relation.name)
    )
}

/// Commit time as PostgreSQL prints a `timestamptz` in UTC.
pub(super) fn commit_time(micros: i64) -> String {
    TypeInfo::builtin(1184)
        .and_then(|ty| output(&ty, &micros.to_le_bytes()).ok())
        .unwrap_or_else(|| micros.to_string())
}

/// The fixed parts of a relation's lines, quoted once.
struct Labels {
    /// Keeps the relation (and so the address it is cached under) alive.
    _relation: Arc<Relation>,
    /// `table schema.name: `, quoted.
    head: Vec<u8>,
    /// ` column[type]:` for each column, and whether its values print
    /// quoted (as a string), bare (numbers), in `B'...'` (bit strings) or as
    /// `true`/`false`.
    columns: Vec<(Vec<u8>, Style)>,
}

/// How test_decoding prints a column's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Quoted,
    Bare,
    Bits,
    Bool,
}

impl Style {
    fn of(type_oid: u32) -> Style {
        match type_oid {
            // int2, int4, int8, oid, float4, float8, numeric
            21 | 23 | 20 | 26 | 700 | 701 | 1700 => Style::Bare,
            // bit, varbit
            1560 | 1562 => Style::Bits,
            16 => Style::Bool,
            _ => Style::Quoted,
        }
    }
}

/// Prints what `test_decoding` prints. Each change is put together in a
/// line buffer and written with one call.
pub(super) struct TestDecoding<W: Write> {
    out: W,
    labels: HashMap<*const Relation, Labels>,
    line: Vec<u8>,
}

impl<W: Write> TestDecoding<W> {
    pub(super) fn new(out: W) -> Self {
        TestDecoding {
            out,
            labels: HashMap::default(),
            line: Vec::with_capacity(1024),
        }
    }

    pub(super) fn into_inner(self) -> W {
        self.out
    }

    fn labels<'l>(
        labels: &'l mut HashMap<*const Relation, Labels>,
        relation: &Arc<Relation>,
    ) -> &'l Labels {
        labels
            .entry(Arc::as_ptr(relation))
            .or_insert_with(|| Labels {
                _relation: relation.clone(),
                head: format!("table {}: ", qualified(relation)).into_bytes(),
                columns: relation
                    .columns
                    .iter()
                    .map(|c| {
                        let label = format!(" {}[{}]:", quote_identifier(&c.name), c.type_name);
                        (label.into_bytes(), Style::of(c.type_oid))
                    })
                    .collect(),
            })
    }

    /// Writes a row change's line: `new` for inserts and updates, `old` for
    /// deletes and the old key of updates.
    fn row_change<'d, I>(
        &mut self,
        relation: &Arc<Relation>,
        action: Action,
        old: Option<I>,
        new: Option<I>,
    ) -> std::io::Result<()>
    where
        I: IntoIterator<Item = DatumRef<'d>>,
    {
        let labels = Self::labels(&mut self.labels, relation);
        let line = &mut self.line;
        line.clear();
        line.extend_from_slice(&labels.head);
        match action {
            Action::Insert => {
                line.extend_from_slice(b"INSERT:");
                if let Some(new) = new {
                    tuple(line, labels, new, false);
                }
            }
            Action::Update => {
                line.extend_from_slice(b"UPDATE:");
                if let Some(old) = old {
                    line.extend_from_slice(b" old-key:");
                    tuple(line, labels, old, true);
                    line.extend_from_slice(b" new-tuple:");
                }
                if let Some(new) = new {
                    tuple(line, labels, new, false);
                }
            }
            Action::Delete => {
                line.extend_from_slice(b"DELETE:");
                match old {
                    Some(old) => tuple(line, labels, old, true),
                    None => line.extend_from_slice(b" (no-tuple-data)"),
                }
            }
        }
        line.push(b'\n');
        self.out.write_all(line)
    }
}

/// The row changes, as `test_decoding` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Insert,
    Update,
    Delete,
}

/// Appends a tuple's columns and values to `line` (leaving out NULLs with
/// `skip_nulls`, as for old keys).
fn tuple<'d>(
    line: &mut Vec<u8>,
    labels: &Labels,
    values: impl IntoIterator<Item = DatumRef<'d>>,
    skip_nulls: bool,
) {
    for ((label, style), value) in labels.columns.iter().zip(values) {
        if skip_nulls && value == DatumRef::Null {
            continue;
        }
        line.extend_from_slice(label);
        match value {
            DatumRef::Null => line.extend_from_slice(b"null"),
            DatumRef::Unchanged => line.extend_from_slice(b"unchanged-toast-datum"),
            DatumRef::Text(text) => match style {
                Style::Bare => line.extend_from_slice(text),
                Style::Bits => {
                    line.extend_from_slice(b"B'");
                    line.extend_from_slice(text);
                    line.push(b'\'');
                }
                Style::Bool => {
                    line.extend_from_slice(if text == b"t" { b"true" } else { b"false" })
                }
                Style::Quoted => {
                    line.push(b'\'');
                    if text.contains(&b'\'') {
                        for part in text.split_inclusive(|&b| b == b'\'') {
                            line.extend_from_slice(part);
                            if part.ends_with(b"'") {
                                line.push(b'\'');
                            }
                        }
                    } else {
                        line.extend_from_slice(text);
                    }
                    line.push(b'\'');
                }
            },
        }
    }
}

impl<W: Write> Sink for TestDecoding<W> {
    fn begin(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        writeln!(self.out, "BEGIN {}", txn.xid)?;
        Ok(())
    }

    fn change_ref(&mut self, txn: &TxnInfo, change: ChangeRef<'_>) -> Result<(), SinkError> {
        match change {
            ChangeRef::Insert { relation, new } => {
                self.row_change(relation, Action::Insert, None, Some(new))?;
            }
            ChangeRef::Update { relation, old, new } => {
                self.row_change(relation, Action::Update, old, Some(new))?;
            }
            ChangeRef::Delete { relation, old } => {
                let old = (!old.is_empty()).then_some(old);
                self.row_change(relation, Action::Delete, old, None)?;
            }
            ChangeRef::Other(change) => self.change(txn, change)?,
        }
        Ok(())
    }

    fn change(&mut self, _txn: &TxnInfo, change: RowChange) -> Result<(), SinkError> {
        fn values(datums: &[Datum]) -> impl Iterator<Item = DatumRef<'_>> {
            datums.iter().map(DatumRef::from)
        }
        match &change {
            RowChange::Insert { relation, new } => {
                self.row_change(relation, Action::Insert, None, Some(values(new)))?;
            }
            RowChange::Update { relation, old, new } => {
                self.row_change(
                    relation,
                    Action::Update,
                    old.as_deref().map(values),
                    Some(values(new)),
                )?;
            }
            RowChange::Delete { relation, old } => {
                let old = (!old.is_empty()).then(|| values(old));
                self.row_change(relation, Action::Delete, old, None)?;
            }
            RowChange::Truncate {
                relations,
                cascade,
                restart_seqs,
            } => {
                let names: Vec<String> = relations.iter().map(|r| qualified(r)).collect();
                write!(self.out, "table {}: TRUNCATE:", names.join(", "))?;
                if *restart_seqs {
                    self.out.write_all(b" restart_seqs")?;
                }
                if *cascade {
                    self.out.write_all(b" cascade")?;
                }
                if !restart_seqs && !cascade {
                    self.out.write_all(b" (no-flags)")?;
                }
                self.out.write_all(b"\n")?;
            }
            RowChange::Message { prefix, content } => {
                write!(
                    self.out,
                    "message: transactional: 1 prefix: {prefix}, sz: {} content:",
                    content.len()
                )?;
                self.out.write_all(content)?;
                self.out.write_all(b"\n")?;
            }
        }
        Ok(())
    }

    fn commit(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        writeln!(self.out, "COMMIT {}", txn.xid)?;
        Ok(())
    }

    fn message(&mut self, _lsn: Lsn, prefix: &str, content: &[u8]) -> Result<(), SinkError> {
        write!(
            self.out,
            "message: transactional: 0 prefix: {prefix}, sz: {} content:",
            content.len()
        )?;
        self.out.write_all(content)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }
}

/// One JSON object per line: a transaction with its changes, or a
/// non-transactional message. Transactions without changes are left out.
pub(super) struct JsonLines<W: Write> {
    out: W,
    open: Option<TxnInfo>,
    changes: u64,
}

impl<W: Write> JsonLines<W> {
    pub(super) fn new(out: W) -> Self {
        JsonLines {
            out,
            open: None,
            changes: 0,
        }
    }

    pub(super) fn into_inner(self) -> W {
        self.out
    }
}

fn values(relation: &Relation, datums: &[Datum]) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for (column, value) in relation.columns.iter().zip(datums) {
        let v = match value {
            Datum::Null => serde_json::Value::Null,
            Datum::Unchanged => serde_json::json!({ "unchanged_toast": true }),
            Datum::Text(t) => serde_json::Value::String(t.clone()),
        };
        map.insert(column.name.clone(), v);
    }
    serde_json::Value::Object(map)
}

fn content(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::json!({ "text": text }),
        Err(_) => serde_json::json!({
            "hex": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        }),
    }
}

impl<W: Write> Sink for JsonLines<W> {
    fn begin(&mut self, txn: &TxnInfo) -> Result<(), SinkError> {
        self.open = Some(*txn);
        self.changes = 0;
        Ok(())
    }

    fn change(&mut self, txn: &TxnInfo, change: RowChange) -> Result<(), SinkError> {
        if self.changes == 0 {
            let head = serde_json::json!({
                "xid": txn.xid,
                "commit_lsn": txn.commit_lsn.to_string(),
                "end_lsn": txn.end_lsn.to_string(),
                "commit_time": commit_time(txn.commit_time),
            })
            .to_string();
            // Stream the changes array: a transaction may be larger than memory.
            write!(self.out, "{},\"changes\":[", head.trim_end_matches('}'))?;
        } else {
            self.out.write_all(b",")?;
        }
        self.changes += 1;
        let value = match &change {
            RowChange::Insert { relation, new } => serde_json::json!({
                "table": format!("{}.{}", relation.schema, relation.name),
                "op": "insert", "new": values(relation, new),
            }),
            RowChange::Update { relation, old, new } => serde_json::json!({
                "table": format!("{}.{}", relation.schema, relation.name),
                "op": "update",
                "old": old.as_ref().map(|o| values(relation, o)),
                "new": values(relation, new),
            }),
            RowChange::Delete { relation, old } => serde_json::json!({
                "table": format!("{}.{}", relation.schema, relation.name),
                "op": "delete",
                "old": (!old.is_empty()).then(|| values(relation, old)),
            }),
            RowChange::Truncate {
                relations,
                cascade,
                restart_seqs,
            } => serde_json::json!({
                "op": "truncate",
                "tables": relations.iter().map(|r| format!("{}.{}", r.schema, r.name)).collect::<Vec<_>>(),
                "cascade": cascade, "restart_seqs": restart_seqs,
            }),
            RowChange::Message {
                prefix,
                content: bytes,
            } => serde_json::json!({
                "op": "message", "prefix": prefix, "content": content(bytes),
            }),
        };
        serde_json::to_writer(&mut self.out, &value)?;
        Ok(())
    }

    fn commit(&mut self, _txn: &TxnInfo) -> Result<(), SinkError> {
        if self.changes > 0 {
            self.out.write_all(b"]}\n")?;
        }
        self.open = None;
        Ok(())
    }

    fn message(&mut self, lsn: Lsn, prefix: &str, bytes: &[u8]) -> Result<(), SinkError> {
        let line = serde_json::json!({
            "message": { "lsn": lsn.to_string(), "prefix": prefix, "content": content(bytes) }
        });
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_like_postgres() {
        assert_eq!(quote_identifier("orders"), "orders");
        assert_eq!(quote_identifier("order"), "\"order\"");
        assert_eq!(quote_identifier("Orders"), "\"Orders\"");
        assert_eq!(quote_identifier("a b"), "\"a b\"");
        assert_eq!(quote_identifier("_x1"), "_x1");
        assert_eq!(quote_identifier("1x"), "\"1x\"");
        assert_eq!(quote_identifier("q\"t"), "\"q\"\"t\"");
    }

    #[test]
    fn commit_times_print_as_timestamptz() {
        assert_eq!(commit_time(0), "2000-01-01 00:00:00+00");
        assert_eq!(commit_time(1_500_000), "2000-01-01 00:00:01.5+00");
    }
}
