//! Checked little-endian reads from datum bytes, and varlena values nested
//! inside other values (array elements, jsonb numerics).

use super::error::{malformed, TypeError};

/// The `N` bytes at `offset`, or a `Malformed` error naming `oid`.
pub(super) fn bytes_at<const N: usize>(
    oid: u32,
    data: &[u8],
    offset: usize,
) -> Result<[u8; N], TypeError> {
    offset
        .checked_add(N)
        .and_then(|end| data.get(offset..end))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or_else(|| malformed(oid, offset, "value is truncated"))
}

/// The whole datum as exactly `N` bytes (a fixed-length type).
pub(super) fn exact<const N: usize>(oid: u32, datum: &[u8]) -> Result<[u8; N], TypeError> {
    <[u8; N]>::try_from(datum).map_err(|_| malformed(oid, 0, "wrong length for fixed-size type"))
}

pub(super) fn u16_at(oid: u32, data: &[u8], offset: usize) -> Result<u16, TypeError> {
    bytes_at::<2>(oid, data, offset).map(u16::from_le_bytes)
}

pub(super) fn i16_at(oid: u32, data: &[u8], offset: usize) -> Result<i16, TypeError> {
    bytes_at::<2>(oid, data, offset).map(i16::from_le_bytes)
}

pub(super) fn u32_at(oid: u32, data: &[u8], offset: usize) -> Result<u32, TypeError> {
    bytes_at::<4>(oid, data, offset).map(u32::from_le_bytes)
}

pub(super) fn i32_at(oid: u32, data: &[u8], offset: usize) -> Result<i32, TypeError> {
    bytes_at::<4>(oid, data, offset).map(i32::from_le_bytes)
}

pub(super) fn i64_at(oid: u32, data: &[u8], offset: usize) -> Result<i64, TypeError> {
    bytes_at::<8>(oid, data, offset).map(i64::from_le_bytes)
}

/// Where a varlena value stored inside another value lies: its payload
/// `start..end` in `data`; `end` is also where the value ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Nested {
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Reads the header of a varlena stored at `offset` of `data` (4-byte or
/// 1-byte form). Compressed or external forms cannot occur inside a value.
pub(super) fn nested_varlena(oid: u32, data: &[u8], offset: usize) -> Result<Nested, TypeError> {
    let first = *data
        .get(offset)
        .ok_or_else(|| malformed(oid, offset, "value is truncated"))?;
    let (header, total) = if first == 0x01 {
        return Err(malformed(oid, offset, "TOAST pointer inside a value"));
    } else if first & 0x01 == 0x01 {
        (1, usize::from(first >> 1))
    } else {
        let word = u32_at(oid, data, offset)?;
        if word & 0x03 != 0 {
            return Err(malformed(oid, offset, "compressed varlena inside a value"));
        }
        (4, (word >> 2) as usize)
    };
    if total < header {
        return Err(malformed(
            oid,
            offset,
            "varlena length shorter than its header",
        ));
    }
    let end = offset
        .checked_add(total)
        .filter(|&end| end <= data.len())
        .ok_or_else(|| malformed(oid, offset, "varlena runs past the end of its container"))?;
    Ok(Nested {
        start: offset + header,
        end,
    })
}

/// Size of the varlena header that offsets inside a container value (an
/// array, a range) are aligned relative to: the payload handed to the
/// output functions starts this far into the value as PostgreSQL lays it
/// out in memory.
pub(super) const HDR: usize = 4;

/// A value of type `ty` stored inside a range or multirange at payload
/// offset `pos` (before alignment), read the way `att_align_pointer` and
/// `fetch_att` read it: fixed-length values are aligned; a varlena with a
/// 1-byte header (a non-zero first byte) is not, one with a 4-byte header
/// is. Returns the bytes as `output` takes them and the offset past them.
pub(super) fn packed_value<'a>(
    oid: u32,
    ty: &super::TypeInfo,
    data: &'a [u8],
    pos: usize,
) -> Result<(&'a [u8], usize), TypeError> {
    let aligned = || align_up(pos + HDR, ty.align.bytes()).map(|a| a - HDR);
    let truncated = || malformed(oid, pos, "value is truncated");
    match ty.len {
        len if len > 0 => {
            let at = aligned().ok_or_else(truncated)?;
            let end = at.checked_add(len as usize).ok_or_else(truncated)?;
            let value = data.get(at..end).ok_or_else(truncated)?;
            Ok((value, end))
        }
        -1 => {
            let at = match data.get(pos) {
                Some(&b) if b != 0 => pos,
                _ => aligned().ok_or_else(truncated)?,
            };
            let v = nested_varlena(oid, data, at)?;
            Ok((data.get(v.start..v.end).ok_or_else(truncated)?, v.end))
        }
        _ => Err(super::unsupported(ty)),
    }
}

/// `offset` rounded up to a multiple of `align` (a power of two).
pub(super) fn align_up(offset: usize, align: usize) -> Option<usize> {
    let mask = align.checked_sub(1)?;
    offset.checked_add(mask).map(|v| v & !mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_checked() {
        let data = [1u8, 2, 3, 4, 5];
        assert_eq!(u16_at(0, &data, 3), Ok(0x0504));
        assert!(u16_at(0, &data, 4).is_err());
        assert!(u32_at(0, &data, usize::MAX).is_err());
        assert!(exact::<4>(0, &data).is_err());
    }

    #[test]
    fn nested_varlena_forms() {
        // 1-byte header: length 3 including the header.
        let short = [0x07u8, b'a', b'b', 0xff];
        assert_eq!(
            nested_varlena(0, &short, 0),
            Ok(Nested { start: 1, end: 3 })
        );
        // 4-byte header: length 6.
        let long = [0x18u8, 0, 0, 0, b'x', b'y'];
        assert_eq!(nested_varlena(0, &long, 0), Ok(Nested { start: 4, end: 6 }));
        assert!(nested_varlena(0, &long[..5], 0).is_err());
        assert!(nested_varlena(0, &[0x01, 0, 0], 0).is_err());
        assert!(nested_varlena(0, &[0x02, 0, 0, 0], 0).is_err());
        assert!(nested_varlena(0, &[0x00, 0, 0, 0], 0).is_err());
        assert_eq!(align_up(5, 4), Some(8));
        assert_eq!(align_up(8, 8), Some(8));
        assert_eq!(align_up(usize::MAX, 8), None);
    }
}
