//! The geometric types, printed as `geo_ops.c` prints them: every
//! coordinate through `float8out_internal` (the shortest exact form, as
//! float8 prints), points as `(x,y)`.
//!
//! - point: x, y; `(x,y)`.
//! - lseg: two points; `[(x1,y1),(x2,y2)]`.
//! - box: the high corner, then the low one; `(x1,y1),(x2,y2)`.
//! - line: the coefficients A, B, C of `Ax + By + C = 0`; `{A,B,C}`.
//! - circle: the center, then the radius; `<(x,y),r>`.
//! - path (varlena): point count (int32), closed flag (int32), padding
//!   (int32), the points; `((x1,y1),...)` when closed, `[(x1,y1),...]` when
//!   open.
//! - polygon (varlena): point count (int32), the bounding box (not
//!   printed), the points; `((x1,y1),...)`.

use super::error::{malformed, TypeError};
use super::float::push_float8;
use super::read::{bytes_at, i32_at};

/// Bytes of one stored point: two float8s.
const POINT: usize = 16;

/// The kinds of geometric values.
#[derive(Clone, Copy)]
pub(super) enum Shape {
    Point,
    Lseg,
    Box,
    Line,
    Circle,
    Path,
    Polygon,
}

/// The output function of `shape` on a stored value.
pub(super) fn geo_out(
    oid: u32,
    shape: Shape,
    datum: &[u8],
    out: &mut String,
) -> Result<(), TypeError> {
    let float = |at: usize| bytes_at::<8>(oid, datum, at).map(u64::from_le_bytes);
    let fixed = |len: usize| {
        if datum.len() == len {
            Ok(())
        } else {
            Err(malformed(oid, 0, "wrong length for fixed-size type"))
        }
    };
    match shape {
        Shape::Point => {
            fixed(POINT)?;
            points(oid, datum, 0, 1, out)
        }
        Shape::Lseg => {
            fixed(2 * POINT)?;
            out.push('[');
            points(oid, datum, 0, 2, out)?;
            out.push(']');
            Ok(())
        }
        Shape::Box => {
            fixed(2 * POINT)?;
            points(oid, datum, 0, 2, out)
        }
        Shape::Line => {
            fixed(24)?;
            out.push('{');
            for i in 0..3 {
                if i > 0 {
                    out.push(',');
                }
                push_float8(float(8 * i)?, out);
            }
            out.push('}');
            Ok(())
        }
        Shape::Circle => {
            fixed(24)?;
            out.push('<');
            points(oid, datum, 0, 1, out)?;
            out.push(',');
            push_float8(float(POINT)?, out);
            out.push('>');
            Ok(())
        }
        Shape::Path => {
            let n = count(oid, datum, 12)?;
            let closed = i32_at(oid, datum, 4)? != 0;
            let (open, close) = if closed { ('(', ')') } else { ('[', ']') };
            out.push(open);
            points(oid, datum, 12, n, out)?;
            out.push(close);
            Ok(())
        }
        Shape::Polygon => {
            let n = count(oid, datum, 4 + 2 * POINT)?;
            out.push('(');
            points(oid, datum, 4 + 2 * POINT, n, out)?;
            out.push(')');
            Ok(())
        }
    }
}

/// The point count at the start of a path or polygon whose points start at
/// `first`, checked against the bytes present.
fn count(oid: u32, datum: &[u8], first: usize) -> Result<usize, TypeError> {
    let n = i32_at(oid, datum, 0)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= datum.len().saturating_sub(first) / POINT)
        .ok_or_else(|| malformed(oid, 0, "point count does not match the value's size"))
}

/// `n` points from `at` on, each `(x,y)`, separated by `,`.
fn points(oid: u32, datum: &[u8], at: usize, n: usize, out: &mut String) -> Result<(), TypeError> {
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        let p = at + i * POINT;
        out.push('(');
        push_float8(bytes_at::<8>(oid, datum, p).map(u64::from_le_bytes)?, out);
        out.push(',');
        push_float8(
            bytes_at::<8>(oid, datum, p + 8).map(u64::from_le_bytes)?,
            out,
        );
        out.push(')');
    }
    Ok(())
}
