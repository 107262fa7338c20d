//! Composite values, printed the way `record_out` prints them.
//!
//! A composite datum is a heap tuple: after the varlena header come the
//! type modifier, the type's OID, an unused item pointer, `t_infomask2` (the
//! attribute count), `t_infomask`, `t_hoff`, the null bitmap, then the
//! attributes from `t_hoff` on, laid out as in a table's tuple. Attributes
//! may be inline-compressed (never out of line). The text is `(`, the live
//! attributes separated by `,`, `)`: a null prints as nothing, and a value
//! is double-quoted (with `"` and `\` doubled) when it is empty or holds
//! `"`, `\`, `(`, `)`, `,` or white space. Attributes the value does not
//! store (added to the type after it was written) are null.

use std::borrow::Cow;

use super::error::{malformed, TypeError};
use super::info::Field;
use super::push::quote_doubling;
use super::read::u32_at;
use super::Dialect;
use crate::tuple::{decompress, deform_layouts, Layout, RawDatum, Varlena};

/// Payload offset of the heap tuple header's fields.
const INFOMASK2: usize = 14;
const INFOMASK: usize = 16;
const HOFF: usize = 18;
/// Where the fragment [`deform_layouts`] reads starts: byte 23 of the tuple.
const FRAGMENT: usize = 19;

/// `record_out` of a value of composite type `oid`.
pub(super) fn record_out(
    oid: u32,
    fields: &[Field],
    datum: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    if u32_at(oid, datum, 4)? != oid {
        return Err(malformed(oid, 4, "row type differs from the column's"));
    }
    let infomask2 = u16::from_le_bytes(super::read::bytes_at(oid, datum, INFOMASK2)?);
    let infomask = u16::from_le_bytes(super::read::bytes_at(oid, datum, INFOMASK)?);
    let [hoff] = super::read::bytes_at::<1>(oid, datum, HOFF)?;
    if usize::from(infomask2 & crate::tuple::HEAP_NATTS_MASK) > fields.len() {
        return Err(malformed(
            oid,
            INFOMASK2,
            "the value has more attributes than its type's description",
        ));
    }
    let fragment = datum.get(FRAGMENT..).unwrap_or_default();
    let layouts = fields.iter().enumerate().map(|(i, f)| Layout {
        attnum: i16::try_from(i + 1).unwrap_or(i16::MAX),
        len: f.ty.len,
        align: f.ty.align,
    });
    let raw = deform_layouts(infomask2, infomask, hoff, fragment, layouts)
        .map_err(|e| malformed(oid, FRAGMENT + e.offset.unwrap_or(0), "bad composite tuple"))?;
    out.push('(');
    let mut first = true;
    for (field, value) in fields.iter().zip(raw) {
        if field.dropped {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        let bytes: Cow<'_, [u8]> = match value {
            RawDatum::Null | RawDatum::Missing => continue,
            RawDatum::Fixed(b) | RawDatum::Varlena(Varlena::Plain(b)) => Cow::Borrowed(b),
            RawDatum::Varlena(Varlena::Compressed {
                method,
                raw_size,
                data,
            }) => Cow::Owned(
                decompress(method, data, raw_size)
                    .map_err(|_| malformed(oid, FRAGMENT, "bad compressed attribute"))?,
            ),
            RawDatum::Varlena(Varlena::External(_)) => {
                return Err(malformed(oid, FRAGMENT, "TOAST pointer inside a value"))
            }
            RawDatum::CString(_) => return Err(super::unsupported(&field.ty)),
        };
        attribute(field, &bytes, dialect, out)?;
    }
    out.push(')');
    Ok(())
}

/// An attribute's text, quoted as `record_out` quotes it.
fn attribute(
    field: &Field,
    value: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    let start = out.len();
    super::write(&field.ty, value, dialect, out)?;
    quote_doubling(out, start, b"\"\\(),");
    Ok(())
}
