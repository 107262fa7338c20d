//! Variable-length values ("varlenas") as they sit in a tuple.
//!
//! A varlena starts with a header whose low bits in the first byte say what
//! follows (layouts from `postgres.h` / `varatt.h`, PG 15–18):
//!
//! - `xxxxxx00`: 4-byte header, plain payload; the upper 30 bits of the
//!   little-endian word are the total size including the header;
//! - `xxxxxx10`: 4-byte header, inline-compressed; a second word
//!   (`va_tcinfo`) holds the uncompressed size (30 bits) and the method;
//! - `0x01`: an external TOAST pointer, one header byte, one tag byte, then
//!   the 16-byte `varatt_external` (unaligned);
//! - `xxxxxxx1` otherwise: 1-byte header, plain payload of up to 126 bytes;
//!   the upper 7 bits are the total size including the header.
//!
//! [`Varlena`] borrows the payload from the tuple; [`detoast_inline`] turns
//! inline values into plain bytes, while external ones need the
//! transaction's TOAST chunks ([`ToastChunks`](super::ToastChunks)).

use std::borrow::Cow;

use super::compress::{decompress, Compression};
use super::error::{byte_at, read_u32, take, TupleError, TupleErrorKind};

/// `vartag_external` of an on-disk TOAST pointer (`VARTAG_ONDISK`).
const VARTAG_ONDISK: u8 = 18;
/// Bytes of an on-disk TOAST pointer: 2 header bytes + `varatt_external`.
pub(crate) const TOAST_POINTER_SIZE: usize = 18;
/// Mask of the size bits in `va_tcinfo` / `va_extinfo`.
const SIZE_MASK: u32 = 0x3FFF_FFFF;

/// An on-disk TOAST pointer (`varatt_external`): where the value's chunks
/// are and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ToastPointer {
    /// Original size **including** a 4-byte varlena header (`va_rawsize`).
    pub raw_size: i32,
    /// Bytes stored in the toast table (low 30 bits of `va_extinfo`).
    pub ext_size: u32,
    /// The compression method when the stored bytes are compressed.
    pub compression: Option<Compression>,
    /// The value's `chunk_id` in the toast table (`va_valueid`).
    pub value_id: u32,
    /// OID of the toast relation holding the chunks (`va_toastrelid`).
    pub toast_relid: u32,
}

impl ToastPointer {
    /// Whether the stored bytes are compressed: the stored size is smaller
    /// than the payload (PostgreSQL compresses only when it saves space).
    pub fn is_compressed(&self) -> bool {
        i64::from(self.ext_size) < i64::from(self.raw_size) - 4
    }

    /// Parses the 18 bytes of an on-disk pointer, header bytes included.
    fn parse(b: &[u8]) -> Result<ToastPointer, TupleError> {
        let raw_size = read_u32(b, 2)? as i32;
        let extinfo = read_u32(b, 6)?;
        let value_id = read_u32(b, 10)?;
        let toast_relid = read_u32(b, 14)?;
        let mut p = ToastPointer {
            raw_size,
            ext_size: extinfo & SIZE_MASK,
            compression: None,
            value_id,
            toast_relid,
        };
        if p.is_compressed() {
            p.compression = Some(Compression::from_id((extinfo >> 30) as u8)?);
        }
        Ok(p)
    }
}

/// A non-null varlena value, borrowed from the tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Varlena<'a> {
    /// Uncompressed payload (after the 1- or 4-byte header).
    Plain(&'a [u8]),
    /// Inline-compressed payload.
    Compressed {
        /// The compression method.
        method: Compression,
        /// Size of the payload once decompressed.
        raw_size: u32,
        /// The compressed bytes (after the 8-byte header).
        data: &'a [u8],
    },
    /// A pointer to a value stored in the toast table.
    External(ToastPointer),
}

/// Reads the varlena that starts at `offset` in `buf`; returns it and its
/// total size (header included). Errors carry `offset`.
pub(crate) fn read_varlena(buf: &[u8], offset: usize) -> Result<(Varlena<'_>, usize), TupleError> {
    read_at(buf, offset).map_err(|e| e.with_offset(offset))
}

fn read_at(buf: &[u8], offset: usize) -> Result<(Varlena<'_>, usize), TupleError> {
    let first = byte_at(buf, offset)?;
    if first == 0x01 {
        let tag = byte_at(buf, offset.saturating_add(1))?;
        if tag != VARTAG_ONDISK {
            return Err(TupleErrorKind::UnsupportedExternalTag { tag }.into());
        }
        let b = take(buf, offset, TOAST_POINTER_SIZE)?;
        return Ok((
            Varlena::External(ToastPointer::parse(b)?),
            TOAST_POINTER_SIZE,
        ));
    }
    if first & 0x01 == 0x01 {
        let size = usize::from(first >> 1);
        let b = take(buf, offset, size)?;
        return Ok((Varlena::Plain(b.get(1..).unwrap_or_default()), size));
    }
    let size = (read_u32(buf, offset)? >> 2) & SIZE_MASK;
    let compressed = first & 0x02 == 0x02;
    let min = if compressed { 8 } else { 4 };
    if size < min {
        return Err(TupleErrorKind::BadVarlenaSize { size, min }.into());
    }
    let b = take(buf, offset, size as usize)?;
    if !compressed {
        return Ok((Varlena::Plain(b.get(4..).unwrap_or_default()), b.len()));
    }
    let (method, raw_size, data) = split_compressed(b.get(4..).unwrap_or_default())?;
    let v = Varlena::Compressed {
        method,
        raw_size,
        data,
    };
    Ok((v, b.len()))
}

/// The plain payload of an inline value: borrowed for [`Varlena::Plain`],
/// decompressed for [`Varlena::Compressed`]. An [`Varlena::External`] value
/// gives a [`TupleErrorKind::ExternalValue`] error: resolve it through the
/// transaction's [`ToastChunks`](super::ToastChunks) instead.
pub fn detoast_inline<'a>(v: &Varlena<'a>) -> Result<Cow<'a, [u8]>, TupleError> {
    match *v {
        Varlena::Plain(b) => Ok(Cow::Borrowed(b)),
        Varlena::Compressed {
            method,
            raw_size,
            data,
        } => decompress(method, data, raw_size).map(Cow::Owned),
        Varlena::External(p) => Err(TupleErrorKind::ExternalValue {
            value_id: p.value_id,
            toast_relid: p.toast_relid,
        }
        .into()),
    }
}

/// Splits the stored bytes of a compressed TOAST value (`va_tcinfo` word,
/// then the compressed stream) into method, raw size and stream.
pub(crate) fn split_compressed(body: &[u8]) -> Result<(Compression, u32, &[u8]), TupleError> {
    let tcinfo = read_u32(body, 0)?;
    let method = Compression::from_id((tcinfo >> 30) as u8)?;
    Ok((
        method,
        tcinfo & SIZE_MASK,
        body.get(4..).unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header4(size: u32, compressed: bool) -> [u8; 4] {
        ((size << 2) | if compressed { 2 } else { 0 }).to_le_bytes()
    }

    #[test]
    fn short_header() {
        let buf = [0x0d, b'h', b'e', b'l', b'l', b'o', 0xff];
        let (v, size) = read_varlena(&buf, 0).unwrap();
        assert_eq!(v, Varlena::Plain(b"hello"));
        assert_eq!(size, 6);
        // 0x03 is the empty value.
        assert_eq!(read_varlena(&[0x03], 0).unwrap(), (Varlena::Plain(b""), 1));
        // A 1-byte header of 127 total bytes needs them all.
        let e = read_varlena(&[0xff, 1, 2], 0).unwrap_err();
        assert!(matches!(
            e.kind,
            TupleErrorKind::Truncated { need: 127, have: 3 }
        ));
    }

    #[test]
    fn four_byte_header() {
        let mut buf = vec![9, 9];
        buf.extend(header4(7, false));
        buf.extend(b"abc");
        let (v, size) = read_varlena(&buf, 2).unwrap();
        assert_eq!((v, size), (Varlena::Plain(&b"abc"[..]), 7));
        let e = read_varlena(&header4(3, false), 0).unwrap_err();
        assert!(matches!(
            e.kind,
            TupleErrorKind::BadVarlenaSize { size: 3, min: 4 }
        ));
        assert_eq!(e.offset, Some(0));
    }

    #[test]
    fn compressed_header() {
        let mut buf = header4(11, true).to_vec();
        buf.extend((100u32 | 1 << 30).to_le_bytes());
        buf.extend([1, 2, 3]);
        let (v, _) = read_varlena(&buf, 0).unwrap();
        assert_eq!(
            v,
            Varlena::Compressed {
                method: Compression::Lz4,
                raw_size: 100,
                data: &[1, 2, 3]
            }
        );
        buf[7] |= 0x80; // method 3
        let e = read_varlena(&buf, 0).unwrap_err();
        assert!(matches!(
            e.kind,
            TupleErrorKind::UnknownCompression { method: 3 }
        ));
        let e = read_varlena(&header4(7, true), 0).unwrap_err();
        assert!(matches!(
            e.kind,
            TupleErrorKind::BadVarlenaSize { min: 8, .. }
        ));
    }

    #[test]
    fn toast_pointer() {
        let mut buf = vec![0x01, 18];
        buf.extend(10_004i32.to_le_bytes());
        buf.extend((300u32 | 1 << 30).to_le_bytes());
        buf.extend(16_400u32.to_le_bytes());
        buf.extend(16_390u32.to_le_bytes());
        let (v, size) = read_varlena(&buf, 0).unwrap();
        let p = ToastPointer {
            raw_size: 10_004,
            ext_size: 300,
            compression: Some(Compression::Lz4),
            value_id: 16_400,
            toast_relid: 16_390,
        };
        assert_eq!((v, size), (Varlena::External(p), 18));
        assert!(p.is_compressed());
        let plain = ToastPointer {
            ext_size: 10_000,
            compression: None,
            ..p
        };
        assert!(!plain.is_compressed());
        assert!(read_varlena(&buf[..17], 0).is_err());
        let e = read_varlena(&[0x01, 1, 0, 0], 0).unwrap_err();
        assert!(matches!(
            e.kind,
            TupleErrorKind::UnsupportedExternalTag { tag: 1 }
        ));
        let ext = detoast_inline(&Varlena::External(p)).unwrap_err();
        assert!(matches!(
            ext.kind,
            TupleErrorKind::ExternalValue {
                value_id: 16_400,
                ..
            }
        ));
    }

    #[test]
    fn detoast_inline_plain_borrows() {
        let v = Varlena::Plain(b"xyz");
        assert!(matches!(detoast_inline(&v).unwrap(), Cow::Borrowed(b"xyz")));
    }
}
