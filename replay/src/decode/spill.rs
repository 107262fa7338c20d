//! Spilling a large transaction's changes to disk, and reading them back.
//!
//! A spill file is a sequence of frames `[u32 length][payload]`, each payload
//! one change with the subtransaction that made it. Relations are written as
//! numbers into the decoder's registry of relation descriptions, so a change
//! reads back with the very description it was decoded with.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::change::{Datum, Relation, RowChange};

use super::error::ReplayError;

/// Relation descriptions by number, for spill files.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    relations: Vec<Arc<Relation>>,
    ids: HashMap<*const Relation, u32>,
}

impl Registry {
    fn id(&mut self, relation: &Arc<Relation>) -> u32 {
        let key = Arc::as_ptr(relation);
        if let Some(id) = self.ids.get(&key) {
            return *id;
        }
        let id = u32::try_from(self.relations.len()).unwrap_or(u32::MAX);
        self.relations.push(relation.clone());
        self.ids.insert(key, id);
        id
    }

    fn get(&self, id: u32) -> Option<&Arc<Relation>> {
        self.relations.get(id as usize)
    }
}

/// One transaction's spilled changes.
#[derive(Debug)]
pub(crate) struct SpillFile {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
    count: u64,
}

impl SpillFile {
    /// A new, empty spill file in `dir`.
    pub(crate) fn create(dir: &Path, xid: u32) -> Result<SpillFile, ReplayError> {
        let path = dir.join(format!(
            "walfill-spill-{}-{xid}-{:x}.bin",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let file = File::create(&path).map_err(|source| spill_error(&path, source))?;
        Ok(SpillFile {
            path,
            writer: Some(BufWriter::with_capacity(1 << 16, file)),
            count: 0,
        })
    }

    /// Appends one change.
    pub(crate) fn write(
        &mut self,
        registry: &mut Registry,
        subxid: u32,
        change: &RowChange,
    ) -> Result<(), ReplayError> {
        let mut payload = Vec::with_capacity(256);
        put_u32(&mut payload, subxid);
        encode(&mut payload, registry, change);
        let writer = self.writer.as_mut().ok_or_else(|| {
            spill_error(&self.path, std::io::Error::other("written after reading"))
        })?;
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        writer
            .write_all(&len.to_le_bytes())
            .and_then(|()| writer.write_all(&payload))
            .map_err(|source| spill_error(&self.path, source))?;
        self.count += 1;
        Ok(())
    }

    /// Reads every change back in order, calling `each(subxid, change)`.
    pub(crate) fn replay(
        &mut self,
        registry: &Registry,
        each: &mut dyn FnMut(u32, RowChange) -> Result<(), ReplayError>,
    ) -> Result<(), ReplayError> {
        if let Some(mut writer) = self.writer.take() {
            writer
                .flush()
                .map_err(|source| spill_error(&self.path, source))?;
        }
        let file = File::open(&self.path).map_err(|source| spill_error(&self.path, source))?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut frame = Vec::new();
        for _ in 0..self.count {
            let mut len = [0u8; 4];
            reader
                .read_exact(&mut len)
                .map_err(|source| spill_error(&self.path, source))?;
            frame.resize(u32::from_le_bytes(len) as usize, 0);
            reader
                .read_exact(&mut frame)
                .map_err(|source| spill_error(&self.path, source))?;
            let mut input = frame.as_slice();
            let decoded = get_u32(&mut input)
                .and_then(|subxid| decode(&mut input, registry).map(|c| (subxid, c)));
            let (subxid, change) = decoded.ok_or_else(|| {
                spill_error(
                    &self.path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed frame"),
                )
            })?;
            each(subxid, change)?;
        }
        Ok(())
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        self.writer = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

fn spill_error(path: &Path, source: std::io::Error) -> ReplayError {
    ReplayError::Spill {
        path: path.display().to_string(),
        source,
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(bytes);
}

fn put_datums(out: &mut Vec<u8>, datums: &[Datum]) {
    put_u32(out, u32::try_from(datums.len()).unwrap_or(u32::MAX));
    for d in datums {
        match d {
            Datum::Null => out.push(0),
            Datum::Unchanged => out.push(1),
            Datum::Text(t) => {
                out.push(2);
                put_bytes(out, t.as_bytes());
            }
        }
    }
}

fn encode(out: &mut Vec<u8>, registry: &mut Registry, change: &RowChange) {
    match change {
        RowChange::Insert { relation, new } => {
            out.push(0);
            put_u32(out, registry.id(relation));
            put_datums(out, new);
        }
        RowChange::Update { relation, old, new } => {
            out.push(1);
            put_u32(out, registry.id(relation));
            match old {
                Some(old) => {
                    out.push(1);
                    put_datums(out, old);
                }
                None => out.push(0),
            }
            put_datums(out, new);
        }
        RowChange::Delete { relation, old } => {
            out.push(2);
            put_u32(out, registry.id(relation));
            put_datums(out, old);
        }
        RowChange::Truncate {
            relations,
            cascade,
            restart_seqs,
        } => {
            out.push(3);
            out.push(u8::from(*cascade) | u8::from(*restart_seqs) << 1);
            put_u32(out, u32::try_from(relations.len()).unwrap_or(u32::MAX));
            for r in relations {
                put_u32(out, registry.id(r));
            }
        }
        RowChange::Message { prefix, content } => {
            out.push(4);
            put_bytes(out, prefix.as_bytes());
            put_bytes(out, content);
        }
    }
}

fn get_u8(input: &mut &[u8]) -> Option<u8> {
    let (&b, rest) = input.split_first()?;
    *input = rest;
    Some(b)
}

fn get_u32(input: &mut &[u8]) -> Option<u32> {
    let (head, rest) = input.split_at_checked(4)?;
    *input = rest;
    Some(u32::from_le_bytes(head.try_into().ok()?))
}

fn get_bytes<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = get_u32(input)? as usize;
    let (head, rest) = input.split_at_checked(len)?;
    *input = rest;
    Some(head)
}

fn get_string(input: &mut &[u8]) -> Option<String> {
    String::from_utf8(get_bytes(input)?.to_vec()).ok()
}

fn get_datums(input: &mut &[u8]) -> Option<Vec<Datum>> {
    let n = get_u32(input)? as usize;
    let mut out = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        out.push(match get_u8(input)? {
            0 => Datum::Null,
            1 => Datum::Unchanged,
            2 => Datum::Text(get_string(input)?),
            _ => return None,
        });
    }
    Some(out)
}

fn decode(input: &mut &[u8], registry: &Registry) -> Option<RowChange> {
    let kind = get_u8(input)?;
    Some(match kind {
        0 => RowChange::Insert {
            relation: registry.get(get_u32(input)?)?.clone(),
            new: get_datums(input)?,
        },
        1 => {
            let relation = registry.get(get_u32(input)?)?.clone();
            let old = match get_u8(input)? {
                1 => Some(get_datums(input)?),
                _ => None,
            };
            RowChange::Update {
                relation,
                old,
                new: get_datums(input)?,
            }
        }
        2 => RowChange::Delete {
            relation: registry.get(get_u32(input)?)?.clone(),
            old: get_datums(input)?,
        },
        3 => {
            let flags = get_u8(input)?;
            let n = get_u32(input)? as usize;
            let mut relations = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                relations.push(registry.get(get_u32(input)?)?.clone());
            }
            RowChange::Truncate {
                relations,
                cascade: flags & 1 != 0,
                restart_seqs: flags & 2 != 0,
            }
        }
        4 => RowChange::Message {
            prefix: get_string(input)?,
            content: get_bytes(input)?.to_vec(),
        },
        _ => return None,
    })
}

/// Approximate memory a buffered change holds, for the memory bound.
pub(crate) fn change_size(change: &RowChange) -> usize {
    let datums = |d: &[Datum]| {
        d.iter()
            .map(|d| match d {
                Datum::Text(t) => 32 + t.len(),
                _ => 32,
            })
            .sum::<usize>()
    };
    96 + match change {
        RowChange::Insert { new, .. } => datums(new),
        RowChange::Update { old, new, .. } => old.as_deref().map_or(0, datums) + datums(new),
        RowChange::Delete { old, .. } => datums(old),
        RowChange::Truncate { relations, .. } => 8 * relations.len(),
        RowChange::Message { prefix, content } => prefix.len() + content.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Column;

    #[test]
    fn changes_read_back_as_written() {
        let relation = Arc::new(Relation {
            oid: 7,
            schema: "public".into(),
            name: "t".into(),
            columns: vec![Column {
                name: "a".into(),
                type_oid: 25,
                type_modifier: -1,
                type_name: "text".into(),
                is_key: true,
            }],
            full_identity: false,
        });
        let changes = [
            RowChange::Insert {
                relation: relation.clone(),
                new: vec![Datum::Text("x\u{0}y ü".into())],
            },
            RowChange::Update {
                relation: relation.clone(),
                old: Some(vec![Datum::Null]),
                new: vec![Datum::Unchanged],
            },
            RowChange::Update {
                relation: relation.clone(),
                old: None,
                new: vec![Datum::Text(String::new())],
            },
            RowChange::Delete {
                relation: relation.clone(),
                old: vec![],
            },
            RowChange::Truncate {
                relations: vec![relation.clone(), relation.clone()],
                cascade: true,
                restart_seqs: false,
            },
            RowChange::Message {
                prefix: "p".into(),
                content: vec![0, 1, 255],
            },
        ];
        let mut registry = Registry::default();
        let mut file = SpillFile::create(&std::env::temp_dir(), 42).unwrap();
        for (i, c) in changes.iter().enumerate() {
            file.write(&mut registry, i as u32, c).unwrap();
        }
        let path = file.path.clone();
        let mut back = Vec::new();
        file.replay(&registry, &mut |sub, c| {
            back.push((sub, c));
            Ok(())
        })
        .unwrap();
        assert_eq!(back.len(), changes.len());
        for (i, (sub, c)) in back.iter().enumerate() {
            assert_eq!(*sub, i as u32);
            assert_eq!(c, &changes[i]);
        }
        assert!(Arc::ptr_eq(back[0].1.relation().unwrap(), &relation));
        drop(file);
        assert!(!path.exists(), "the spill file is removed when dropped");
    }
}
