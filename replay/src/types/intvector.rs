//! int2vector and oidvector: one-dimensional arrays (with a zero lower
//! bound) printed by `int2vectorout` and `oidvectorout` as their numbers
//! separated by single spaces, nothing for an empty vector.
//!
//! The payload is laid out like an array's without a null bitmap: number of
//! dimensions (always 1), data offset (0), element type, length, lower
//! bound, then the elements (int2 or oid, packed).

use super::error::{malformed, TypeError};
use super::push::{push_i64, push_u64};
use super::read::{i16_at, i32_at, u32_at};

/// Offset of the first element in the payload.
const VALUES: usize = 20;

/// `int2vectorout` (`oid_elements` false) and `oidvectorout` (true).
pub(super) fn intvector_out(
    oid: u32,
    datum: &[u8],
    oid_elements: bool,
    out: &mut String,
) -> Result<(), TypeError> {
    if i32_at(oid, datum, 0)? != 1 {
        return Err(malformed(oid, 0, "a vector has one dimension"));
    }
    let count = i32_at(oid, datum, 12)?;
    let count = usize::try_from(count).map_err(|_| malformed(oid, 12, "negative length"))?;
    let width = if oid_elements { 4 } else { 2 };
    if count > (datum.len().saturating_sub(VALUES)) / width {
        return Err(malformed(oid, 12, "more elements than the value holds"));
    }
    for i in 0..count {
        if i > 0 {
            out.push(' ');
        }
        let at = VALUES + i * width;
        if oid_elements {
            push_u64(out, u64::from(u32_at(oid, datum, at)?));
        } else {
            push_i64(out, i64::from(i16_at(oid, datum, at)?));
        }
    }
    Ok(())
}
