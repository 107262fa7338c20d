//! The error type of tuple, varlena and TOAST decoding.
//!
//! A [`TupleError`] is a [`TupleErrorKind`] plus where it happened: the byte
//! offset inside the tuple fragment (or compressed stream), the attribute
//! number and, once the caller knows it, the relation's relfilenode. Decoding
//! never panics on bad input; every malformed byte sequence ends up here.

use std::fmt;

/// What went wrong while decoding a tuple, a varlena or a TOAST value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TupleErrorKind {
    /// The input ended before a value did.
    #[error("input truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed from the offset on.
        need: usize,
        /// Bytes available from the offset on.
        have: usize,
    },
    /// `t_hoff` cannot describe this fragment (below the 23-byte header, past
    /// the end, or leaving no room for the null bitmap).
    #[error(
        "t_hoff {hoff} is invalid: null bitmap of {bitmap_len} bytes, fragment of {len} bytes"
    )]
    BadHoff {
        /// The header's `t_hoff`.
        hoff: u8,
        /// Null bitmap length implied by the attribute count (0 without nulls).
        bitmap_len: usize,
        /// Length of the tuple fragment.
        len: usize,
    },
    /// An attribute length other than > 0, -1 (varlena) or -2 (C string).
    #[error("unsupported attribute length {attlen}")]
    BadAttLen {
        /// The attribute's `attlen`.
        attlen: i16,
    },
    /// A 4-byte varlena header whose size is smaller than the header itself.
    #[error("varlena header declares {size} bytes, less than its own {min}-byte header")]
    BadVarlenaSize {
        /// Declared total size.
        size: u32,
        /// Smallest size the header form allows.
        min: u32,
    },
    /// An external varlena that is not an on-disk TOAST pointer (only those
    /// can be stored in a tuple).
    #[error("external varlena with tag {tag}; only on-disk TOAST pointers (tag 18) are stored")]
    UnsupportedExternalTag {
        /// The `vartag_external` byte.
        tag: u8,
    },
    /// Compression method bits that name no known method.
    #[error("unknown compression method {method}")]
    UnknownCompression {
        /// The two method bits.
        method: u8,
    },
    /// A C string attribute (attlen -2) without its terminating NUL.
    #[error("C string without a terminating NUL byte")]
    UnterminatedCString,
    /// The pglz stream is malformed.
    #[error("corrupt pglz data: {reason}")]
    CorruptPglz {
        /// What was wrong.
        reason: &'static str,
    },
    /// The lz4 block is malformed.
    #[error("corrupt lz4 data")]
    CorruptLz4 {
        /// What the lz4 decoder reported.
        #[source]
        source: lz4_flex::block::DecompressError,
    },
    /// The declared uncompressed size cannot come from this much compressed
    /// input, or decompression produced a different size.
    #[error("compressed value of {compressed} bytes does not decompress to the declared {raw_size} bytes")]
    DecompressedSize {
        /// Declared uncompressed size.
        raw_size: u64,
        /// Compressed input length.
        compressed: usize,
    },
    /// A TOAST pointer whose sizes contradict each other.
    #[error("TOAST pointer to value {value_id} is inconsistent: raw size {raw_size}, stored size {ext_size}")]
    BadToastPointer {
        /// `va_valueid`.
        value_id: u32,
        /// `va_rawsize`.
        raw_size: i32,
        /// Stored size from `va_extinfo`.
        ext_size: u32,
    },
    /// TOAST chunks of one value arrived out of order.
    #[error("TOAST value {value_id}: got chunk {chunk_seq}, expected chunk {expected}")]
    ToastChunkOrder {
        /// The chunk's `chunk_id`.
        value_id: u32,
        /// The chunk's `chunk_seq`.
        chunk_seq: i32,
        /// The sequence number that should have come next.
        expected: i32,
    },
    /// The chunks of a TOAST value do not add up to its pointer's stored size.
    #[error("TOAST value {value_id}: chunks hold {actual} bytes, pointer says {expected}")]
    ToastSize {
        /// `va_valueid`.
        value_id: u32,
        /// Stored size from the pointer.
        expected: u64,
        /// Bytes collected.
        actual: u64,
    },
    /// A toast-table row that is not `(chunk_id oid, chunk_seq int4, chunk_data bytea)`.
    #[error("malformed TOAST chunk row: {what}")]
    BadToastChunk {
        /// What was wrong.
        what: &'static str,
    },
    /// The value is stored out of line; look it up in the transaction's
    /// [`ToastChunks`](super::ToastChunks).
    #[error("value {value_id} is stored out of line in TOAST relation {toast_relid}")]
    ExternalValue {
        /// `va_valueid`.
        value_id: u32,
        /// `va_toastrelid`.
        toast_relid: u32,
    },
}

/// A tuple decoding error and where it happened.
#[derive(Debug)]
pub struct TupleError {
    /// What went wrong.
    pub kind: TupleErrorKind,
    /// The relation's relfilenode, once the caller has attached it.
    pub relfilenode: Option<u32>,
    /// The attribute being decoded, if any.
    pub attnum: Option<i16>,
    /// Byte offset inside the tuple fragment (or the compressed stream).
    pub offset: Option<usize>,
}

impl TupleError {
    /// An error of `kind` with no location yet.
    pub fn new(kind: TupleErrorKind) -> TupleError {
        TupleError {
            kind,
            relfilenode: None,
            attnum: None,
            offset: None,
        }
    }

    /// Attaches the relation's relfilenode.
    pub fn with_relfilenode(mut self, relfilenode: u32) -> TupleError {
        self.relfilenode = Some(relfilenode);
        self
    }

    /// Attaches the attribute number, unless one is already set.
    pub fn with_attnum(mut self, attnum: i16) -> TupleError {
        self.attnum.get_or_insert(attnum);
        self
    }

    /// Attaches the byte offset, unless one is already set.
    pub fn with_offset(mut self, offset: usize) -> TupleError {
        self.offset.get_or_insert(offset);
        self
    }
}

impl From<TupleErrorKind> for TupleError {
    fn from(kind: TupleErrorKind) -> TupleError {
        TupleError::new(kind)
    }
}

impl fmt::Display for TupleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.kind, f)?;
        if let Some(r) = self.relfilenode {
            write!(f, ", relfilenode {r}")?;
        }
        if let Some(a) = self.attnum {
            write!(f, ", attnum {a}")?;
        }
        if let Some(o) = self.offset {
            write!(f, ", offset {o}")?;
        }
        Ok(())
    }
}

impl std::error::Error for TupleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}

/// `need` bytes starting at `offset` in `buf`, or a `Truncated` error.
pub(crate) fn take(buf: &[u8], offset: usize, need: usize) -> Result<&[u8], TupleError> {
    offset
        .checked_add(need)
        .and_then(|end| buf.get(offset..end))
        .ok_or_else(|| {
            TupleError::new(TupleErrorKind::Truncated {
                need,
                have: buf.len().saturating_sub(offset),
            })
            .with_offset(offset)
        })
}

/// The byte at `offset` in `buf`.
pub(crate) fn byte_at(buf: &[u8], offset: usize) -> Result<u8, TupleError> {
    buf.get(offset).copied().ok_or_else(|| {
        TupleError::new(TupleErrorKind::Truncated { need: 1, have: 0 }).with_offset(offset)
    })
}

/// A little-endian `u32` at `offset` in `buf`.
pub(crate) fn read_u32(buf: &[u8], offset: usize) -> Result<u32, TupleError> {
    let mut word = [0u8; 4];
    word.copy_from_slice(take(buf, offset, 4)?);
    Ok(u32::from_le_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_location() {
        let e = take(&[1, 2, 3], 2, 4)
            .unwrap_err()
            .with_attnum(7)
            .with_relfilenode(16384);
        assert_eq!(
            e.to_string(),
            "input truncated: need 4 bytes, have 1, relfilenode 16384, attnum 7, offset 2"
        );
    }

    #[test]
    fn take_never_overflows() {
        assert!(take(&[0; 4], usize::MAX, 2).is_err());
        assert!(take(&[0; 4], 5, 0).is_err());
        assert_eq!(take(&[0; 4], 4, 0).unwrap(), &[] as &[u8]);
        assert_eq!(read_u32(&[1, 0, 0, 0], 0).unwrap(), 1);
    }
}
