//! Splitting a heap tuple into its attributes ("deforming").
//!
//! WAL carries a tuple as its `xl_heap_header` (`t_infomask2`, `t_infomask`,
//! `t_hoff`) plus a *fragment*: the on-disk tuple from byte 23 of the header
//! on (layout from `htup_details.h`, PG 15–18):
//!
//! ```text
//! [null bitmap, if HEAP_HASNULL][zero padding][user data ...]
//! 0                                           t_hoff - 23
//! ```
//!
//! The user data holds the non-null attributes in attnum order, each aligned
//! to its `attalign` relative to the start of the user data (which is 8-byte
//! aligned on disk). Two exceptions to alignment: varlenas with a 1-byte
//! header and TOAST pointers are never aligned, and a reader tells them apart
//! from padding by peeking at the next byte — padding is always zero, while a
//! 1-byte header never is. Attributes past the tuple's own count
//! (`t_infomask2 & 0x07FF`) were added to the relation after the row was
//! written and read as the column's missing value.

use super::error::{take, TupleError, TupleErrorKind};
use super::schema::{Align, RelSchema};
use super::varlena::{read_varlena, Varlena};

/// `t_infomask` bit: the tuple has a null bitmap.
pub const HEAP_HASNULL: u16 = 0x0001;
/// `t_infomask2` mask of the number of attributes stored in the tuple.
pub const HEAP_NATTS_MASK: u16 = 0x07FF;
/// Bytes of the fixed heap tuple header that precede the fragment.
pub const SIZEOF_HEAP_TUPLE_HEADER: u8 = 23;

/// One attribute of a deformed tuple, borrowing from the fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawDatum<'a> {
    /// SQL NULL (a 0 bit in the null bitmap).
    Null,
    /// Not stored: the column was added after the row was written. Its value
    /// is the attribute's [`missing`](super::AttrSchema::missing) value, or
    /// NULL when it has none.
    Missing,
    /// A fixed-width value (attlen > 0): its raw little-endian bytes.
    Fixed(&'a [u8]),
    /// A variable-length value (attlen -1).
    Varlena(Varlena<'a>),
    /// A NUL-terminated C string (attlen -2), without the terminator.
    CString(&'a [u8]),
}

impl RawDatum<'_> {
    /// Whether the value is SQL NULL (not counting a missing value).
    pub fn is_null(&self) -> bool {
        matches!(self, RawDatum::Null)
    }
}

/// Storage facts of one attribute, all deforming needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub(crate) attnum: i16,
    pub(crate) len: i16,
    pub(crate) align: Align,
}

/// Splits a tuple fragment into one [`RawDatum`] per attribute of `schema`
/// (dropped columns included, so callers can skip them by position).
///
/// `fragment` starts at the null bitmap (byte 23 of the on-disk tuple); the
/// user data begins at `hoff - 23`. Attributes the tuple holds beyond the
/// schema are ignored. Errors name the attribute and the offset inside the
/// fragment; the caller adds the relfilenode.
pub fn deform<'a>(
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    fragment: &'a [u8],
    schema: &RelSchema,
) -> Result<Vec<RawDatum<'a>>, TupleError> {
    let layouts = schema.attrs.iter().map(|a| Layout {
        attnum: a.attnum,
        len: a.len,
        align: a.align,
    });
    deform_layouts(infomask2, infomask, hoff, fragment, layouts)
}

/// [`deform`] over bare layouts.
pub(crate) fn deform_layouts<'a>(
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    fragment: &'a [u8],
    layouts: impl ExactSizeIterator<Item = Layout>,
) -> Result<Vec<RawDatum<'a>>, TupleError> {
    let natts = usize::from(infomask2 & HEAP_NATTS_MASK);
    let bitmap_len = if infomask & HEAP_HASNULL != 0 {
        natts.div_ceil(8)
    } else {
        0
    };
    let bad_hoff = || {
        TupleError::new(TupleErrorKind::BadHoff {
            hoff,
            bitmap_len,
            len: fragment.len(),
        })
    };
    let data_start = usize::from(
        hoff.checked_sub(SIZEOF_HEAP_TUPLE_HEADER)
            .ok_or_else(bad_hoff)?,
    );
    let (head, data) = match fragment.split_at_checked(data_start) {
        Some(parts) if bitmap_len <= data_start => parts,
        _ => return Err(bad_hoff()),
    };
    let bitmap = head.get(..bitmap_len).unwrap_or_default();
    let is_null =
        |i: usize| bitmap_len != 0 && bitmap.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) == 0);

    let mut out = Vec::with_capacity(layouts.len());
    let mut off = 0usize;
    for (i, layout) in layouts.enumerate() {
        if i >= natts {
            out.push(RawDatum::Missing);
        } else if is_null(i) {
            out.push(RawDatum::Null);
        } else {
            let (datum, next) = read_attr(data, off, layout).map_err(|mut e| {
                e.offset = Some(e.offset.unwrap_or(off) + data_start);
                e.with_attnum(layout.attnum)
            })?;
            out.push(datum);
            off = next;
        }
    }
    Ok(out)
}

/// Reads the attribute stored at or after `off` (before alignment) in the
/// user data; returns it and the offset just past it.
fn read_attr(data: &[u8], off: usize, layout: Layout) -> Result<(RawDatum<'_>, usize), TupleError> {
    let align = |off: usize| {
        layout.align.align_up(off).ok_or_else(|| {
            TupleError::new(TupleErrorKind::Truncated {
                need: layout.align.bytes(),
                have: 0,
            })
        })
    };
    match layout.len {
        len if len > 0 => {
            let start = align(off)?;
            let len = len as usize;
            let bytes = take(data, start, len)?;
            Ok((RawDatum::Fixed(bytes), start + len))
        }
        -1 => {
            // A non-zero byte here starts an unaligned (1-byte header) value
            // or an already aligned 4-byte one; a zero byte is padding or the
            // first byte of an aligned 4-byte header.
            let start = match data.get(off) {
                Some(&b) if b != 0 => off,
                _ => align(off)?,
            };
            let (v, size) = read_varlena(data, start)?;
            Ok((RawDatum::Varlena(v), start + size))
        }
        -2 => {
            let start = align(off)?;
            let rest = data.get(start..).ok_or_else(|| {
                TupleError::new(TupleErrorKind::Truncated { need: 1, have: 0 }).with_offset(start)
            })?;
            let n = rest.iter().position(|&b| b == 0).ok_or_else(|| {
                TupleError::new(TupleErrorKind::UnterminatedCString).with_offset(start)
            })?;
            Ok((
                RawDatum::CString(rest.get(..n).unwrap_or_default()),
                start + n + 1,
            ))
        }
        attlen => Err(TupleErrorKind::BadAttLen { attlen }.into()),
    }
}

#[cfg(test)]
mod tests;
