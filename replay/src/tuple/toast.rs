//! Reassembling out-of-line (TOASTed) values from their chunks.
//!
//! A value too big for its row is cut into chunks of at most 1996 bytes and
//! stored as rows `(chunk_id oid, chunk_seq int4, chunk_data bytea)` of the
//! relation's toast table; the row itself keeps an 18-byte
//! [`ToastPointer`]. In WAL, each chunk is an ordinary insert into the toast
//! relation, logged in the same transaction just before the row that points
//! to it. Logical decoding therefore keeps, per transaction, the chunks seen
//! so far ([`ToastChunks`]), resolves pointers of the next row change against
//! them, and then forgets them. A pointer whose chunks were not logged in the
//! transaction refers to an unchanged value written earlier.
//!
//! For a compressed value the chunks hold the `va_tcinfo` word followed by
//! the compressed stream; otherwise they hold the payload itself.

use std::collections::HashMap;

use super::compress::decompress;
use super::error::{TupleError, TupleErrorKind};
use super::heap_tuple::{deform_layouts, Layout, RawDatum};
use super::schema::Align;
use super::varlena::{split_compressed, ToastPointer, Varlena};

/// One chunk row of a toast table, borrowed from its tuple fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToastChunk<'a> {
    /// The value the chunk belongs to (`chunk_id`, the pointer's `va_valueid`).
    pub chunk_id: u32,
    /// Position of the chunk in the value, from 0.
    pub chunk_seq: i32,
    /// The chunk's bytes.
    pub data: &'a [u8],
}

/// Decodes a toast-table row `(chunk_id oid, chunk_seq int4, chunk_data
/// bytea)` from its WAL tuple fragment. The data normally has a 4-byte
/// header (the column's storage is plain) but a 1-byte header is accepted.
pub fn decode_chunk(
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    fragment: &[u8],
) -> Result<ToastChunk<'_>, TupleError> {
    let layouts = [(1, 4), (2, 4), (3, -1)].map(|(attnum, len)| Layout {
        attnum,
        len,
        align: Align::Int,
    });
    let bad = |what| TupleError::new(TupleErrorKind::BadToastChunk { what });
    let datums = deform_layouts(infomask2, infomask, hoff, fragment, layouts.into_iter())?;
    let int = |d: Option<&RawDatum<'_>>| match d {
        Some(RawDatum::Fixed(b)) => (*b).try_into().map(u32::from_le_bytes).ok(),
        _ => None,
    };
    let chunk_id = int(datums.first()).ok_or_else(|| bad("chunk_id is missing or NULL"))?;
    let chunk_seq = int(datums.get(1)).ok_or_else(|| bad("chunk_seq is missing or NULL"))?;
    let data = match datums.get(2) {
        Some(RawDatum::Varlena(Varlena::Plain(b))) => *b,
        Some(RawDatum::Varlena(_)) => return Err(bad("chunk_data is compressed or external")),
        _ => return Err(bad("chunk_data is missing or NULL")),
    };
    Ok(ToastChunk {
        chunk_id,
        chunk_seq: chunk_seq as i32,
        data,
    })
}

/// The chunks of one value collected so far.
#[derive(Debug, Default)]
struct Collected {
    /// Sequence number the next chunk must have.
    next_seq: i32,
    /// The chunks' bytes, concatenated.
    data: Vec<u8>,
}

/// The TOAST chunks one transaction has logged so far, by `chunk_id`.
///
/// Chunks of a value must arrive in order, starting at 0. The caller clears
/// the set after each row change that may use it (see the module doc) and
/// accounts for its memory with [`ToastChunks::bytes_held`].
#[derive(Debug, Default)]
pub struct ToastChunks {
    values: HashMap<u32, Collected>,
    bytes: usize,
}

impl ToastChunks {
    /// An empty set.
    pub fn new() -> ToastChunks {
        ToastChunks::default()
    }

    /// Adds one chunk. A new `chunk_id` must start at sequence 0 and each
    /// further chunk must follow the previous one.
    pub fn add_chunk(
        &mut self,
        chunk_id: u32,
        chunk_seq: i32,
        data: &[u8],
    ) -> Result<(), TupleError> {
        let expected = self.values.get(&chunk_id).map_or(0, |v| v.next_seq);
        if chunk_seq != expected {
            return Err(TupleErrorKind::ToastChunkOrder {
                value_id: chunk_id,
                chunk_seq,
                expected,
            }
            .into());
        }
        let value = self.values.entry(chunk_id).or_default();
        value.next_seq = value.next_seq.saturating_add(1);
        value.data.extend_from_slice(data);
        self.bytes += data.len();
        Ok(())
    }

    /// The full payload of the value `pointer` refers to, decompressed if it
    /// was stored compressed; `None` if this transaction logged no chunks for
    /// it (an unchanged value). Sizes are checked against the pointer.
    pub fn resolve(&self, pointer: &ToastPointer) -> Option<Result<Vec<u8>, TupleError>> {
        let value = self.values.get(&pointer.value_id)?;
        Some(payload(pointer, &value.data).map(|p| p.unwrap_or_else(|| value.data.clone())))
    }

    /// Like [`resolve`](ToastChunks::resolve), but removes the value from the
    /// set, which avoids a copy for uncompressed values.
    pub fn take(&mut self, pointer: &ToastPointer) -> Option<Result<Vec<u8>, TupleError>> {
        let value = self.values.remove(&pointer.value_id)?;
        self.bytes = self.bytes.saturating_sub(value.data.len());
        Some(payload(pointer, &value.data).map(|p| p.unwrap_or(value.data)))
    }

    /// Forgets every chunk.
    pub fn clear(&mut self) {
        self.values.clear();
        self.bytes = 0;
    }

    /// Whether no chunk is held.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Bytes of chunk data held.
    pub fn bytes_held(&self) -> usize {
        self.bytes
    }
}

/// Checks collected bytes against `pointer`; returns the decompressed payload
/// for a compressed value and `None` when `stored` is already the payload.
fn payload(pointer: &ToastPointer, stored: &[u8]) -> Result<Option<Vec<u8>>, TupleError> {
    let value_id = pointer.value_id;
    if stored.len() as u64 != u64::from(pointer.ext_size) {
        return Err(TupleErrorKind::ToastSize {
            value_id,
            expected: u64::from(pointer.ext_size),
            actual: stored.len() as u64,
        }
        .into());
    }
    let inconsistent = || {
        TupleError::new(TupleErrorKind::BadToastPointer {
            value_id,
            raw_size: pointer.raw_size,
            ext_size: pointer.ext_size,
        })
    };
    let payload_size = i64::from(pointer.raw_size) - 4;
    if !pointer.is_compressed() {
        return if payload_size == i64::from(pointer.ext_size) {
            Ok(None)
        } else {
            Err(inconsistent())
        };
    }
    // The method is read from the stored va_tcinfo word, as PostgreSQL does.
    let (method, raw_size, data) = split_compressed(stored)?;
    if i64::from(raw_size) != payload_size {
        return Err(inconsistent());
    }
    decompress(method, data, raw_size).map(Some)
}

#[cfg(test)]
mod tests;
