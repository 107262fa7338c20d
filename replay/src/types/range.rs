//! Ranges and multiranges, printed the way `range_out` and `multirange_out`
//! print them.
//!
//! A range's payload is the range type's OID, the bounds that are present
//! (lower, then upper, each stored and aligned as in a tuple, short varlena
//! headers included), and a flags byte at the very end. Its text is `empty`,
//! or `[` or `(`, the lower bound, `,`, the upper bound, `]` or `)`; an
//! infinite bound prints as nothing, and a bound is double-quoted (with `"`
//! and `\` doubled) when it is empty or holds `"`, `\`, `(`, `)`, `[`, `]`,
//! `,` or white space.
//!
//! A multirange's payload is its type's OID, the number of ranges, then for
//! each range but the first a 32-bit item (the length of the previous
//! range's bounds, or every fourth one, with the high bit set, the offset of
//! this range's bounds), then one flags byte per range, then, aligned to the
//! subtype, each range's bounds as a range stores them. Its text is `{`, the
//! ranges' texts separated by `,`, `}`.

use super::error::{malformed, TypeError};
use super::info::{TypeInfo, TypeKind};
use super::push::quote_doubling;
use super::read::{align_up, packed_value, u32_at, HDR};
use super::Dialect;

const RANGE_EMPTY: u8 = 0x01;
const RANGE_LB_INC: u8 = 0x02;
const RANGE_UB_INC: u8 = 0x04;
const RANGE_LB_INF: u8 = 0x08;
const RANGE_UB_INF: u8 = 0x10;
const RANGE_LB_NULL: u8 = 0x20;
const RANGE_UB_NULL: u8 = 0x40;

/// The high bit of a multirange item: it holds an offset, not a length.
const ITEM_HAS_OFFSET: u32 = 0x8000_0000;

/// `range_out` of a range of type `oid` whose bounds are `subtype` values.
pub(super) fn range_out(
    oid: u32,
    subtype: &TypeInfo,
    datum: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    if u32_at(oid, datum, 0)? != oid {
        return Err(malformed(oid, 0, "range type differs from the column's"));
    }
    let (&flags, bounds) = datum
        .split_last()
        .filter(|(_, rest)| rest.len() >= 4)
        .ok_or_else(|| malformed(oid, 0, "value is truncated"))?;
    range_text(oid, subtype, dialect, flags, bounds, 4, out)
}

/// `multirange_out` of a multirange of type `oid` over the range type
/// `range`.
pub(super) fn multirange_out(
    oid: u32,
    range: &TypeInfo,
    datum: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    let TypeKind::Range { subtype } = &range.kind else {
        return Err(super::unsupported(range));
    };
    if u32_at(oid, datum, 0)? != oid {
        return Err(malformed(
            oid,
            0,
            "multirange type differs from the column's",
        ));
    }
    let count = u32_at(oid, datum, 4)? as usize;
    out.push('{');
    if count > 0 {
        let items = 8;
        let flags_at = count
            .checked_sub(1)
            .and_then(|n| n.checked_mul(4))
            .and_then(|n| n.checked_add(items))
            .filter(|&f| f.saturating_add(count) <= datum.len())
            .ok_or_else(|| malformed(oid, 4, "more ranges than the value holds"))?;
        let bounds_at = align_up(flags_at + count + HDR, subtype.align.bytes())
            .map(|a| a - HDR)
            .ok_or_else(|| malformed(oid, 4, "value is truncated"))?;
        for i in 0..count {
            if i > 0 {
                out.push(',');
            }
            let offset = bounds_offset(oid, datum, items, i)?;
            let flags = datum
                .get(flags_at + i)
                .copied()
                .ok_or_else(|| malformed(oid, flags_at, "value is truncated"))?;
            let start = bounds_at
                .checked_add(offset)
                .ok_or_else(|| malformed(oid, items, "range offset out of bounds"))?;
            range_text(oid, subtype, dialect, flags, datum, start, out)?;
        }
    }
    out.push('}');
    Ok(())
}

/// Where the bounds of range `i` start, relative to the first range's:
/// the lengths of the ranges before it, back to the nearest offset.
fn bounds_offset(oid: u32, datum: &[u8], items: usize, i: usize) -> Result<usize, TypeError> {
    let mut offset = 0usize;
    let mut k = i;
    while k > 0 {
        let item = u32_at(oid, datum, items + 4 * (k - 1))?;
        offset = offset
            .checked_add((item & !ITEM_HAS_OFFSET) as usize)
            .ok_or_else(|| malformed(oid, items, "range offset out of bounds"))?;
        if item & ITEM_HAS_OFFSET != 0 {
            break;
        }
        k -= 1;
    }
    Ok(offset)
}

/// The text of one range with these flags whose bounds are stored in
/// `data` from `pos` on.
fn range_text(
    oid: u32,
    subtype: &TypeInfo,
    dialect: Dialect,
    flags: u8,
    data: &[u8],
    mut pos: usize,
    out: &mut String,
) -> Result<(), TypeError> {
    if flags & RANGE_EMPTY != 0 {
        out.push_str("empty");
        return Ok(());
    }
    out.push(if flags & RANGE_LB_INC != 0 { '[' } else { '(' });
    if flags & (RANGE_LB_INF | RANGE_LB_NULL) == 0 {
        let (value, next) = packed_value(oid, subtype, data, pos)?;
        bound(subtype, value, dialect, out)?;
        pos = next;
    }
    out.push(',');
    if flags & (RANGE_UB_INF | RANGE_UB_NULL) == 0 {
        let (value, _) = packed_value(oid, subtype, data, pos)?;
        bound(subtype, value, dialect, out)?;
    }
    out.push(if flags & RANGE_UB_INC != 0 { ']' } else { ')' });
    Ok(())
}

/// A bound's text, quoted as `range_bound_escape` quotes it.
fn bound(
    subtype: &TypeInfo,
    value: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    let start = out.len();
    super::write(subtype, value, dialect, out)?;
    quote_doubling(out, start, b"\"\\()[],");
    Ok(())
}
