//! Buffered changes as frames, in memory and spilled to disk.
//!
//! The reorder buffer keeps each transaction's changes encoded: a sequence
//! of frames `[u32 length][payload]`, each payload one change with the
//! subtransaction that made it and the LSN of its record. That is compact (no allocation per value)
//! and makes the memory bound exact; spilling appends the frames to a file
//! as they are. Relations are written as numbers into the decoder's registry
//! of relation descriptions, so a change reads back with the very
//! description it was decoded with.
//!
//! Rows are encoded as they are decoded ([`ChangeWriter`]), without a
//! [`RowChange`] in between, and read back as [`ChangeRef`]s borrowing from
//! the frame, so a value costs no allocation on its way from the WAL record
//! to the sink.

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
    pub(crate) fn id(&mut self, relation: &Arc<Relation>) -> u32 {
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

/// Bytes of a frame before its change: length, subxid, LSN.
const FRAME_HEAD: usize = 16;

/// Appends one change made by `subxid` in the record at `lsn` as a frame.
#[cfg(test)]
pub(crate) fn push_frame(
    buf: &mut Vec<u8>,
    registry: &mut Registry,
    subxid: u32,
    lsn: u64,
    change: &RowChange,
) {
    let mut body = Vec::new();
    encode(&mut body, registry, change);
    put_frame(buf, subxid, lsn, &body);
}

/// Appends a frame around an encoded change.
fn put_frame(buf: &mut Vec<u8>, subxid: u32, lsn: u64, body: &[u8]) {
    let len = u32::try_from(body.len() + FRAME_HEAD - 4).unwrap_or(u32::MAX);
    put_u32(buf, len);
    put_u32(buf, subxid);
    buf.extend_from_slice(&lsn.to_le_bytes());
    buf.extend_from_slice(body);
}

/// Size of the blocks a transaction's frames are kept in: growing one big
/// vector would copy it, and briefly need twice its memory, at each doubling.
const BLOCK: usize = 1 << 20;
/// Size of a transaction's first block; each next one is twice the last, up
/// to [`BLOCK`]. Most transactions are small: a whole block for each would
/// cost a fresh megabyte of memory (zeroed by the kernel as it is touched)
/// per transaction, and count as much against the memory bound.
const FIRST_BLOCK: usize = 4 << 10;

/// A transaction's buffered frames, in blocks of up to about [`BLOCK`] bytes.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    blocks: Vec<Vec<u8>>,
    capacity: usize,
}

impl Frames {
    /// Appends the frames in `encoded`; returns the memory it took.
    #[cfg(test)]
    pub(crate) fn push(&mut self, encoded: &[u8]) -> usize {
        let before = self.capacity;
        self.block_for(encoded.len()).extend_from_slice(encoded);
        self.capacity - before
    }

    /// Appends one frame around the encoded change `body`, made by `subxid`
    /// in the record at `lsn`; returns the memory it took.
    pub(crate) fn push_change(&mut self, subxid: u32, lsn: u64, body: &[u8]) -> usize {
        let before = self.capacity;
        put_frame(self.block_for(FRAME_HEAD + body.len()), subxid, lsn, body);
        self.capacity - before
    }

    /// The last block, or a new one when it has no room for `len` bytes.
    fn block_for(&mut self, len: usize) -> &mut Vec<u8> {
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= len);
        if !fits {
            let size = self
                .blocks
                .last()
                .map_or(FIRST_BLOCK, |b| b.capacity().saturating_mul(2).min(BLOCK));
            let block = Vec::with_capacity(size.max(len));
            self.capacity += block.capacity();
            self.blocks.push(block);
        }
        self.blocks.last_mut().expect("a block was just made")
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
/// spilled, then what it holds in memory. [`advance`](FrameCursor::advance)
/// moves to the next frame; [`current`](FrameCursor::current) reads the one
/// it is at.
pub(crate) struct FrameCursor<'a> {
    spill: Option<(BufReader<File>, PathBuf)>,
    blocks: std::slice::Iter<'a, Vec<u8>>,
    rest: &'a [u8],
    /// The frame read from the spill file.
    frame: Vec<u8>,
    at: At<'a>,
}

/// Where a cursor's current frame is.
enum At<'a> {
    /// Past the last frame (or before the first).
    End,
    /// In [`FrameCursor::frame`], read from this spill file.
    Spill(PathBuf),
    /// In memory.
    Memory(&'a [u8]),
}

impl<'a> FrameCursor<'a> {
    /// A cursor over `spill` (if any), then `frames`, before the first frame.
    pub(crate) fn new(
        spill: Option<&mut SpillFile>,
        frames: &'a Frames,
    ) -> Result<FrameCursor<'a>, ReplayError> {
        let spill = match spill {
            Some(file) => Some((file.reader()?, file.path.clone())),
            None => None,
        };
        Ok(FrameCursor {
            spill,
            blocks: frames.blocks.iter(),
            rest: &[],
            frame: Vec::new(),
            at: At::End,
        })
    }

    /// Moves to the next frame; returns `false` at the end.
    pub(crate) fn advance(&mut self) -> Result<bool, ReplayError> {
        if let Some((reader, path)) = self.spill.as_mut() {
            let mut len = [0u8; 4];
            match reader.read_exact(&mut len) {
                Ok(()) => {
                    self.frame.resize(u32::from_le_bytes(len) as usize, 0);
                    reader
                        .read_exact(&mut self.frame)
                        .map_err(|source| spill_error(path, source))?;
                    if self.frame.len() < FRAME_HEAD - 4 {
                        return Err(spill_error(path, malformed()));
                    }
                    self.at = At::Spill(path.clone());
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => self.spill = None,
                Err(source) => return Err(spill_error(path, source)),
            }
        }
        while self.rest.is_empty() {
            match self.blocks.next() {
                Some(block) => self.rest = block,
                None => {
                    self.at = At::End;
                    return Ok(false);
                }
            }
        }
        match get_bytes(&mut self.rest) {
            Some(frame) if frame.len() >= FRAME_HEAD - 4 => {
                self.at = At::Memory(frame);
                Ok(true)
            }
            _ => Err(in_memory_malformed()),
        }
    }

    /// The frame the cursor is at, without its length.
    fn frame(&self) -> Option<&[u8]> {
        match &self.at {
            At::End => None,
            At::Spill(_) => Some(&self.frame),
            At::Memory(frame) => Some(frame),
        }
    }

    /// The LSN of the current change's record (`None` at the end).
    pub(crate) fn lsn(&self) -> Option<u64> {
        let head = self.frame()?.first_chunk::<12>()?;
        let lsn: [u8; 8] = head[4..].try_into().ok()?;
        Some(u64::from_le_bytes(lsn))
    }

    /// The current change and the subtransaction that made it (`None` at
    /// the end).
    pub(crate) fn current<'s>(
        &'s self,
        registry: &'s Registry,
    ) -> Result<Option<(u32, ChangeRef<'s>)>, ReplayError> {
        let Some(frame) = self.frame() else {
            return Ok(None);
        };
        let subxid = frame
            .first_chunk::<4>()
            .map(|b| u32::from_le_bytes(*b))
            .unwrap_or_default();
        let body = frame.get(FRAME_HEAD - 4..).unwrap_or_default();
        match decode_ref(body, registry) {
            Some(change) => Ok(Some((subxid, change))),
            None => Err(match &self.at {
                At::Spill(path) => spill_error(path, malformed()),
                _ => in_memory_malformed(),
            }),
        }
    }
}

fn in_memory_malformed() -> ReplayError {
    ReplayError::Spill {
        path: "(memory)".into(),
        source: malformed(),
    }
}

/// Kinds of encoded changes (the first byte of a frame's change).
const INSERT: u8 = 0;
const UPDATE: u8 = 1;
const DELETE: u8 = 2;
const TRUNCATE: u8 = 3;
const MESSAGE: u8 = 4;

/// Tags of encoded values.
const NULL: u8 = 0;
const UNCHANGED: u8 = 1;
const TEXT: u8 = 2;

/// One column value of a buffered change, borrowed from its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatumRef<'a> {
    /// SQL NULL.
    Null,
    /// The value's text (UTF-8, as the type's output function printed it).
    Text(&'a [u8]),
    /// A TOASTed value the change did not modify and did not log.
    Unchanged,
}

impl<'a> From<&'a Datum> for DatumRef<'a> {
    fn from(datum: &'a Datum) -> DatumRef<'a> {
        match datum {
            Datum::Null => DatumRef::Null,
            Datum::Text(text) => DatumRef::Text(text.as_bytes()),
            Datum::Unchanged => DatumRef::Unchanged,
        }
    }
}

impl DatumRef<'_> {
    /// The owned value.
    pub fn to_datum(self) -> Datum {
        match self {
            DatumRef::Null => Datum::Null,
            DatumRef::Text(text) => Datum::Text(String::from_utf8_lossy(text).into_owned()),
            DatumRef::Unchanged => Datum::Unchanged,
        }
    }
}

/// The values of a buffered row, in column order, borrowed from its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datums<'a> {
    len: usize,
    /// The encoded values, checked to be well formed.
    bytes: &'a [u8],
}

impl<'a> Datums<'a> {
    /// How many values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none (a delete of a table without a row identity).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The values in column order.
    pub fn iter(&self) -> DatumIter<'a> {
        DatumIter { rest: self.bytes }
    }

    /// The owned values.
    pub fn to_vec(&self) -> Vec<Datum> {
        self.iter().map(DatumRef::to_datum).collect()
    }

    /// Reads `count` values from `input` (checking they are well formed).
    fn read(input: &mut &'a [u8]) -> Option<Datums<'a>> {
        let len = get_u32(input)? as usize;
        let start = *input;
        for _ in 0..len {
            if get_u8(input)? == TEXT {
                get_bytes(input)?;
            }
        }
        let used = start.len() - input.len();
        Some(Datums {
            len,
            bytes: &start[..used],
        })
    }
}

impl<'a> IntoIterator for Datums<'a> {
    type Item = DatumRef<'a>;
    type IntoIter = DatumIter<'a>;

    fn into_iter(self) -> DatumIter<'a> {
        self.iter()
    }
}

/// Iterator over [`Datums`].
#[derive(Clone, Debug)]
pub struct DatumIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for DatumIter<'a> {
    type Item = DatumRef<'a>;

    fn next(&mut self) -> Option<DatumRef<'a>> {
        Some(match get_u8(&mut self.rest)? {
            NULL => DatumRef::Null,
            UNCHANGED => DatumRef::Unchanged,
            _ => DatumRef::Text(get_bytes(&mut self.rest)?),
        })
    }
}

/// A buffered change as the sink receives it at commit: row changes borrow
/// their values from the buffer; truncates and messages come whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeRef<'a> {
    /// A new row.
    Insert {
        /// The relation.
        relation: &'a Arc<Relation>,
        /// The new row.
        new: Datums<'a>,
    },
    /// A changed row (see [`RowChange::Update`]).
    Update {
        /// The relation.
        relation: &'a Arc<Relation>,
        /// The old key or old row, when logged.
        old: Option<Datums<'a>>,
        /// The new row.
        new: Datums<'a>,
    },
    /// A removed row, by its old key or old row (none without a row identity).
    Delete {
        /// The relation.
        relation: &'a Arc<Relation>,
        /// The old key or old row.
        old: Datums<'a>,
    },
    /// A truncate or a transactional message.
    Other(RowChange),
}

impl ChangeRef<'_> {
    /// The owned change.
    pub fn into_owned(self) -> RowChange {
        match self {
            ChangeRef::Insert { relation, new } => RowChange::Insert {
                relation: relation.clone(),
                new: new.to_vec(),
            },
            ChangeRef::Update { relation, old, new } => RowChange::Update {
                relation: relation.clone(),
                old: old.map(|o| o.to_vec()),
                new: new.to_vec(),
            },
            ChangeRef::Delete { relation, old } => RowChange::Delete {
                relation: relation.clone(),
                old: old.to_vec(),
            },
            ChangeRef::Other(change) => change,
        }
    }
}

/// Encodes a row change as its rows are decoded, into a buffer the caller
/// keeps (and reuses): [`begin`](ChangeWriter::begin), then the values of
/// each row between [`begin_row`](ChangeWriter::begin_row) and
/// [`end_row`](ChangeWriter::end_row). An update's new row comes first,
/// then [`old_row`](ChangeWriter::old_row) announces whether an old one
/// follows.
pub(crate) struct ChangeWriter<'b> {
    buf: &'b mut Vec<u8>,
    row: usize,
    count: u32,
}

/// Which row change [`ChangeWriter::begin`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowKind {
    Insert,
    Update,
    Delete,
}

impl<'b> ChangeWriter<'b> {
    /// Starts a change of `kind` to the relation numbered `relation`,
    /// emptying `buf`.
    pub(crate) fn begin(buf: &'b mut Vec<u8>, kind: RowKind, relation: u32) -> ChangeWriter<'b> {
        buf.clear();
        buf.push(match kind {
            RowKind::Insert => INSERT,
            RowKind::Update => UPDATE,
            RowKind::Delete => DELETE,
        });
        put_u32(buf, relation);
        ChangeWriter {
            buf,
            row: 0,
            count: 0,
        }
    }

    /// Starts a row.
    pub(crate) fn begin_row(&mut self) {
        self.row = self.buf.len();
        self.count = 0;
        put_u32(self.buf, 0);
    }

    /// Ends the row begun last.
    pub(crate) fn end_row(&mut self) {
        let count = self.count.to_le_bytes();
        self.buf[self.row..self.row + 4].copy_from_slice(&count);
    }

    /// Whether an update's old row follows (after its new row).
    pub(crate) fn old_row(&mut self, present: bool) {
        self.buf.push(u8::from(present));
    }

    /// A NULL.
    pub(crate) fn null(&mut self) {
        self.count += 1;
        self.buf.push(NULL);
    }

    /// An unchanged TOASTed value.
    pub(crate) fn unchanged(&mut self) {
        self.count += 1;
        self.buf.push(UNCHANGED);
    }

    /// A value's text.
    pub(crate) fn text(&mut self, text: &str) {
        self.count += 1;
        self.buf.push(TEXT);
        put_bytes(self.buf, text.as_bytes());
    }

    /// An owned value.
    pub(crate) fn datum(&mut self, datum: &Datum) {
        match datum {
            Datum::Null => self.null(),
            Datum::Unchanged => self.unchanged(),
            Datum::Text(text) => self.text(text),
        }
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
            Datum::Null => out.push(NULL),
            Datum::Unchanged => out.push(UNCHANGED),
            Datum::Text(t) => {
                out.push(TEXT);
                put_bytes(out, t.as_bytes());
            }
        }
    }
}

/// Encodes a whole change (the layout [`ChangeWriter`] writes, and
/// truncates and messages).
pub(crate) fn encode(out: &mut Vec<u8>, registry: &mut Registry, change: &RowChange) {
    match change {
        RowChange::Insert { relation, new } => {
            out.push(INSERT);
            put_u32(out, registry.id(relation));
            put_datums(out, new);
        }
        RowChange::Update { relation, old, new } => {
            out.push(UPDATE);
            put_u32(out, registry.id(relation));
            put_datums(out, new);
            match old {
                Some(old) => {
                    out.push(1);
                    put_datums(out, old);
                }
                None => out.push(0),
            }
        }
        RowChange::Delete { relation, old } => {
            out.push(DELETE);
            put_u32(out, registry.id(relation));
            put_datums(out, old);
        }
        RowChange::Truncate {
            relations,
            cascade,
            restart_seqs,
        } => {
            out.push(TRUNCATE);
            out.push(u8::from(*cascade) | u8::from(*restart_seqs) << 1);
            put_u32(out, u32::try_from(relations.len()).unwrap_or(u32::MAX));
            for r in relations {
                put_u32(out, registry.id(r));
            }
        }
        RowChange::Message { prefix, content } => {
            out.push(MESSAGE);
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

/// Reads an encoded change (the whole of `input`).
fn decode_ref<'a>(mut input: &'a [u8], registry: &'a Registry) -> Option<ChangeRef<'a>> {
    let input = &mut input;
    let kind = get_u8(input)?;
    let change = match kind {
        INSERT => ChangeRef::Insert {
            relation: registry.get(get_u32(input)?)?,
            new: Datums::read(input)?,
        },
        UPDATE => {
            let relation = registry.get(get_u32(input)?)?;
            let new = Datums::read(input)?;
            let old = match get_u8(input)? {
                0 => None,
                _ => Some(Datums::read(input)?),
            };
            ChangeRef::Update { relation, old, new }
        }
        DELETE => ChangeRef::Delete {
            relation: registry.get(get_u32(input)?)?,
            old: Datums::read(input)?,
        },
        TRUNCATE => {
            let flags = get_u8(input)?;
            let n = get_u32(input)? as usize;
            let mut relations = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                relations.push(registry.get(get_u32(input)?)?.clone());
            }
            ChangeRef::Other(RowChange::Truncate {
                relations,
                cascade: flags & 1 != 0,
                restart_seqs: flags & 2 != 0,
            })
        }
        MESSAGE => ChangeRef::Other(RowChange::Message {
            prefix: get_string(input)?,
            content: get_bytes(input)?.to_vec(),
        }),
        _ => return None,
    };
    input.is_empty().then_some(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::Column;

    fn read_all(cursor: &mut FrameCursor<'_>, registry: &Registry) -> Vec<(u64, u32, RowChange)> {
        let mut out = Vec::new();
        while cursor.advance().unwrap() {
            let lsn = cursor.lsn().unwrap();
            let (subxid, change) = cursor.current(registry).unwrap().unwrap();
            out.push((lsn, subxid, change.into_owned()));
        }
        assert!(cursor.current(registry).unwrap().is_none());
        out
    }

    #[test]
    fn rows_written_as_decoded_read_back_as_values() {
        let relation = Arc::new(Relation {
            oid: 7,
            schema: "public".into(),
            name: "t".into(),
            columns: Vec::new(),
            full_identity: false,
        });
        let mut registry = Registry::default();
        let id = registry.id(&relation);
        let mut body = Vec::new();
        let mut w = ChangeWriter::begin(&mut body, RowKind::Update, id);
        w.begin_row();
        w.text("n'1");
        w.unchanged();
        w.end_row();
        w.old_row(true);
        w.begin_row();
        w.null();
        w.datum(&Datum::Text("o".into()));
        w.end_row();
        let mut memory = Frames::default();
        assert!(memory.push_change(3, 99, &body) > 0);
        let mut cursor = FrameCursor::new(None, &memory).unwrap();
        assert!(cursor.advance().unwrap());
        assert_eq!(cursor.lsn(), Some(99));
        let (subxid, change) = cursor.current(&registry).unwrap().unwrap();
        assert_eq!(subxid, 3);
        let ChangeRef::Update { old, new, .. } = &change else {
            panic!("not an update: {change:?}");
        };
        assert_eq!(
            new.iter().collect::<Vec<_>>(),
            [DatumRef::Text(b"n'1"), DatumRef::Unchanged]
        );
        assert_eq!(old.map(|o| o.len()), Some(2));
        assert_eq!(
            change.into_owned(),
            RowChange::Update {
                relation: relation.clone(),
                old: Some(vec![Datum::Null, Datum::Text("o".into())]),
                new: vec![Datum::Text("n'1".into()), Datum::Unchanged],
            }
        );
        assert!(!cursor.advance().unwrap());
    }

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
        let mut cursor = FrameCursor::new(None, &memory).unwrap();
        let in_memory = read_all(&mut cursor, &registry);
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
        let empty = Frames::default();
        let mut cursor = FrameCursor::new(Some(&mut file), &empty).unwrap();
        let back = read_all(&mut cursor, &registry);
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
