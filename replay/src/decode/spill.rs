//! Buffered changes as frames, in memory and spilled to disk.
//!
//! The reorder buffer keeps each transaction's changes encoded: a sequence
//! of frames `[u32 length][payload]`, each payload one change with the
//! subtransaction that made it and the LSN of its record. That is compact (no allocation per value)
//! and makes the memory bound exact; spilling appends the frames to a file
//! as they are. Relations are written as numbers into the decoder's registry
//! of relation descriptions, so a change reads back with the very
//! description it was decoded with.

use rustc_hash::FxHashMap as HashMap;
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
        })
    }

    /// Appends encoded frames (see [`push_frame`]).
    pub(crate) fn append(&mut self, frames: &[u8]) -> Result<(), ReplayError> {
        let writer = self.writer.as_mut().ok_or_else(|| {
            spill_error(&self.path, std::io::Error::other("written after reading"))
        })?;
        writer
            .write_all(frames)
            .map_err(|source| spill_error(&self.path, source))
    }

    /// Finishes writing and opens the file for reading from the start.
    fn reader(&mut self) -> Result<BufReader<File>, ReplayError> {
        if let Some(mut writer) = self.writer.take() {
            writer
                .flush()
                .map_err(|source| spill_error(&self.path, source))?;
        }
        let file = File::open(&self.path).map_err(|source| spill_error(&self.path, source))?;
        Ok(BufReader::with_capacity(1 << 16, file))
    }
}

fn malformed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed frame")
}

/// One buffered change: the LSN of its record, the subtransaction that
/// made it, and the change.
pub(crate) type Framed = (u64, u32, RowChange);

/// Appends one change made by `subxid` in the record at `lsn` as a frame.
pub(crate) fn push_frame(
    buf: &mut Vec<u8>,
    registry: &mut Registry,
    subxid: u32,
    lsn: u64,
    change: &RowChange,
) {
    let start = buf.len();
    put_u32(buf, 0);
    put_u32(buf, subxid);
    buf.extend_from_slice(&lsn.to_le_bytes());
    encode(buf, registry, change);
    let len = u32::try_from(buf.len() - start - 4).unwrap_or(u32::MAX);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Size of the blocks a transaction's frames are kept in: growing one big
/// vector would copy it, and briefly need twice its memory, at each doubling.
const BLOCK: usize = 1 << 20;

/// A transaction's buffered frames, in blocks of about [`BLOCK`] bytes.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    blocks: Vec<Vec<u8>>,
    capacity: usize,
}

impl Frames {
    /// Appends the frames in `encoded`; returns the memory it took.
    pub(crate) fn push(&mut self, encoded: &[u8]) -> usize {
        let before = self.capacity;
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= encoded.len());
        if !fits {
            let block = Vec::with_capacity(BLOCK.max(encoded.len()));
            self.capacity += block.capacity();
            self.blocks.push(block);
        }
        if let Some(block) = self.blocks.last_mut() {
            block.extend_from_slice(encoded);
        }
        self.capacity - before
    }

    /// Memory held.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether nothing is buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Writes every frame to `spill` and empties the buffer; returns the
    /// memory released.
    pub(crate) fn spill_to(&mut self, spill: &mut SpillFile) -> Result<usize, ReplayError> {
        for block in &self.blocks {
            spill.append(block)?;
        }
        let released = self.capacity;
        *self = Frames::default();
        Ok(released)
    }
}

/// Reads a transaction's buffered changes back in order: first what it
/// spilled, then what it holds in memory.
pub(crate) struct FrameCursor<'a> {
    spill: Option<(BufReader<File>, PathBuf)>,
    blocks: std::slice::Iter<'a, Vec<u8>>,
    current: &'a [u8],
    registry: &'a Registry,
    frame: Vec<u8>,
}

impl<'a> FrameCursor<'a> {
    /// A cursor over `spill` (if any), then `frames`.
    pub(crate) fn new(
        spill: Option<&mut SpillFile>,
        frames: &'a Frames,
        registry: &'a Registry,
    ) -> Result<FrameCursor<'a>, ReplayError> {
        let spill = match spill {
            Some(file) => Some((file.reader()?, file.path.clone())),
            None => None,
        };
        Ok(FrameCursor {
            spill,
            blocks: frames.blocks.iter(),
            current: &[],
            registry,
            frame: Vec::new(),
        })
    }

    /// The next change, or `None` at the end.
    pub(crate) fn next(&mut self) -> Result<Option<Framed>, ReplayError> {
        if let Some((reader, path)) = self.spill.as_mut() {
            let mut len = [0u8; 4];
            match reader.read_exact(&mut len) {
                Ok(()) => {
                    self.frame.resize(u32::from_le_bytes(len) as usize, 0);
                    reader
                        .read_exact(&mut self.frame)
                        .map_err(|source| spill_error(path, source))?;
                    let framed = decode_frame(&self.frame, self.registry)
                        .ok_or_else(|| spill_error(path, malformed()))?;
                    return Ok(Some(framed));
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => self.spill = None,
                Err(source) => return Err(spill_error(path, source)),
            }
        }
        while self.current.is_empty() {
            match self.blocks.next() {
                Some(block) => self.current = block,
                None => return Ok(None),
            }
        }
        let memory = || ReplayError::Spill {
            path: "(memory)".into(),
            source: malformed(),
        };
        let frame = get_bytes(&mut self.current).ok_or_else(memory)?;
        decode_frame(frame, self.registry)
            .map(Some)
            .ok_or_else(memory)
    }
}

fn decode_frame(frame: &[u8], registry: &Registry) -> Option<Framed> {
    let mut input = frame;
    let subxid = get_u32(&mut input)?;
    let (lsn, rest) = input.split_at_checked(8)?;
    input = rest;
    let lsn = u64::from_le_bytes(lsn.try_into().ok()?);
    let change = decode(&mut input, registry)?;
    Some((lsn, subxid, change))
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
                attnum: 1,
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
        let mut frames = Vec::new();
        for (i, c) in changes.iter().enumerate() {
            push_frame(&mut frames, &mut registry, i as u32, 100 + i as u64, c);
        }
        let mut memory = Frames::default();
        memory.push(&frames);
        let mut in_memory = Vec::new();
        let mut cursor = FrameCursor::new(None, &memory, &registry).unwrap();
        while let Some(framed) = cursor.next().unwrap() {
            in_memory.push(framed);
        }
        let mut file = SpillFile::create(&std::env::temp_dir(), 42).unwrap();
        let half = frames.len() / 2;
        let cut = {
            // Append in two pieces cut at a frame boundary.
            let mut at = 0;
            while at < half {
                let len = u32::from_le_bytes(frames[at..at + 4].try_into().unwrap()) as usize;
                at += 4 + len;
            }
            at
        };
        file.append(&frames[..cut]).unwrap();
        file.append(&frames[cut..]).unwrap();
        let path = file.path.clone();
        let mut back = Vec::new();
        let empty = Frames::default();
        let mut cursor = FrameCursor::new(Some(&mut file), &empty, &registry).unwrap();
        while let Some(framed) = cursor.next().unwrap() {
            back.push(framed);
        }
        drop(cursor);
        assert_eq!(back, in_memory);
        assert_eq!(back.len(), changes.len());
        for (i, (lsn, sub, c)) in back.iter().enumerate() {
            assert_eq!(*sub, i as u32);
            assert_eq!(*lsn, 100 + i as u64);
            assert_eq!(c, &changes[i]);
        }
        assert!(Arc::ptr_eq(back[0].2.relation().unwrap(), &relation));
        drop(file);
        assert!(!path.exists(), "the spill file is removed when dropped");
    }
}
