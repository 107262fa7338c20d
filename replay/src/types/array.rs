//! Arrays, printed the way `array_out` prints them.
//!
//! The stored array (`ArrayType`, array.h) is: number of dimensions, offset
//! of the element data (0 when there is no null bitmap), element type OID,
//! the length and the lower bound of each dimension, the null bitmap (one
//! bit per element, 1 = present), then the present elements in row-major
//! order, each at its type's alignment. Offsets and alignment count from the
//! start of the value *with a 4-byte varlena header*; the payload handed to
//! us starts 4 bytes into that, whatever header the tuple used.
//!
//! Text form: `{…}` per dimension, a `[lo:hi]…=` prefix when any lower bound
//! is not 1, the element type's delimiter between items, `NULL` for nulls,
//! and double quotes (with `\` before `"` and `\`) around items that are
//! empty, spell `NULL` in any case, or contain a quote, a backslash, a brace,
//! the delimiter or white space.

use super::error::{malformed, TypeError};
use super::info::TypeInfo;
use super::push::push_i64;
use super::read::{align_up, i32_at, nested_varlena, u32_at, HDR};
use super::Dialect;

/// Largest number of dimensions an array may have (`MAXDIM`).
const MAXDIM: usize = 6;

/// `array_out` of an array payload whose elements are of type `element`.
pub(super) fn array_out(
    oid: u32,
    element: &TypeInfo,
    delimiter: u8,
    datum: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    super::ensure_supported(element)?;
    let ndim = i32_at(oid, datum, 0)?;
    let data_offset = i32_at(oid, datum, 4)?;
    let elem_type = u32_at(oid, datum, 8)?;
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|&n| n <= MAXDIM)
        .ok_or_else(|| malformed(oid, 0, "bad number of dimensions"))?;
    if elem_type != element.oid {
        return Err(malformed(
            oid,
            8,
            "element type differs from the array type's",
        ));
    }
    let mut dims = [0usize; MAXDIM];
    let mut lbounds = [0i32; MAXDIM];
    let mut nitems: usize = 1;
    for d in 0..ndim {
        let len = i32_at(oid, datum, 12 + 4 * d)?;
        let len =
            usize::try_from(len).map_err(|_| malformed(oid, 12 + 4 * d, "negative dimension"))?;
        dims[d] = len;
        lbounds[d] = i32_at(oid, datum, 12 + 4 * (ndim + d))?;
        nitems = nitems
            .checked_mul(len)
            .ok_or_else(|| malformed(oid, 12 + 4 * d, "too many elements"))?;
    }
    if ndim == 0 || nitems == 0 {
        out.push_str("{}");
        return Ok(());
    }
    let dims = &dims[..ndim];

    // Null bitmap and start of the element data, as payload offsets.
    let header_end = 12 + 8 * ndim;
    let (bitmap, mut pos) = if data_offset == 0 {
        let start = align_up(header_end + HDR, 8).unwrap_or(usize::MAX) - HDR;
        (None, start)
    } else {
        let bitmap_len = nitems.div_ceil(8);
        let start = usize::try_from(data_offset)
            .ok()
            .and_then(|o| o.checked_sub(HDR))
            .filter(|&s| s >= header_end + bitmap_len && s <= datum.len())
            .ok_or_else(|| malformed(oid, 4, "bad data offset"))?;
        let bits = datum
            .get(header_end..header_end + bitmap_len)
            .ok_or_else(|| malformed(oid, header_end, "null bitmap runs past the value"))?;
        (Some(bits), start)
    };
    if pos > datum.len() {
        return Err(malformed(
            oid,
            header_end,
            "array header runs past the value",
        ));
    }

    if lbounds[..ndim].iter().any(|&lb| lb != 1) {
        for d in 0..ndim {
            out.push('[');
            let lb = i64::from(lbounds[d]);
            push_i64(out, lb);
            out.push(':');
            push_i64(out, lb + dims[d] as i64 - 1);
            out.push(']');
        }
        out.push('=');
    }

    let delim = char::from(delimiter);
    let mut index = [0usize; MAXDIM];
    let mut scratch = String::new();
    for _ in 0..ndim {
        out.push('{');
    }
    for item in 0..nitems {
        let present = match bitmap {
            None => true,
            Some(bits) => bits
                .get(item / 8)
                .is_some_and(|b| b & (1 << (item % 8)) != 0),
        };
        if present {
            let elements = Elements {
                oid,
                element,
                delimiter,
                dialect,
            };
            pos = element_out(&elements, datum, pos, &mut scratch, out)?;
        } else {
            out.push_str("NULL");
        }
        // Advance the row-major index; close and reopen the dimensions that
        // wrapped around.
        let mut wrapped = 0;
        let mut d = ndim;
        while d > 0 {
            d -= 1;
            index[d] += 1;
            if index[d] < dims[d] {
                break;
            }
            index[d] = 0;
            wrapped += 1;
        }
        if item + 1 < nitems {
            for _ in 0..wrapped {
                out.push('}');
            }
            out.push(delim);
            for _ in 0..wrapped {
                out.push('{');
            }
        }
    }
    for _ in 0..ndim {
        out.push('}');
    }
    Ok(())
}

/// What an array's elements are and how they print.
struct Elements<'a> {
    oid: u32,
    element: &'a TypeInfo,
    delimiter: u8,
    dialect: Dialect,
}

/// Prints the element stored at payload offset `pos` (before alignment),
/// quoted if needed; returns the offset just past it.
fn element_out(
    elements: &Elements<'_>,
    datum: &[u8],
    pos: usize,
    scratch: &mut String,
    out: &mut String,
) -> Result<usize, TypeError> {
    let Elements {
        oid,
        element,
        delimiter,
        dialect,
    } = *elements;
    let at = align_up(pos + HDR, element.align.bytes()).unwrap_or(usize::MAX) - HDR;
    let (value, next) = match element.len {
        len if len > 0 => {
            let end = at.saturating_add(len as usize);
            (datum.get(at..end), end)
        }
        -1 => {
            let v = nested_varlena(oid, datum, at)?;
            (datum.get(v.start..v.end), v.end)
        }
        _ => return Err(super::unsupported(element)),
    };
    let value = value.ok_or_else(|| malformed(oid, at, "element runs past the value"))?;
    let start = out.len();
    super::write(element, value, dialect, out)?;
    let text = out.get(start..).unwrap_or_default();
    if needs_quotes(text, delimiter) {
        scratch.clear();
        scratch.push_str(text);
        out.truncate(start);
        out.push('"');
        for c in scratch.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    Ok(next)
}

/// Whether `array_out` quotes this element text.
fn needs_quotes(text: &str, delimiter: u8) -> bool {
    text.is_empty()
        || text.eq_ignore_ascii_case("NULL")
        || text.bytes().any(|b| {
            matches!(
                b,
                b'"' | b'\\' | b'{' | b'}' | b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c
            ) || b == delimiter
        })
}
