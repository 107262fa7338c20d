//! jsonb: a tree of containers, printed the way `jsonb_out` prints it.
//!
//! A container starts with a 32-bit header (child count and whether it is an
//! object, an array, or the one-element array wrapping a top-level scalar),
//! then one 32-bit entry per child (objects list all keys, then all values),
//! then the children's bytes. An entry holds the child's type and either its
//! length or, when the high bit is set, its end offset; a child starts where
//! the previous one ends. Numerics and nested containers are padded to a
//! 4-byte boundary measured from the start of the children's bytes.
//!
//! Output: `{"k": v, "k2": v2}` and `[a, b]`, keys in stored order, strings
//! JSON-escaped, numerics as numeric prints them. Nesting is walked with an
//! explicit stack, so deep values cannot exhaust the call stack.

use super::error::{malformed, TypeError};
use super::numeric::numeric_out;
use super::push::push_hex_byte;
use super::read::{align_up, nested_varlena, u32_at};

const COUNT_MASK: u32 = 0x0FFF_FFFF;
const F_SCALAR: u32 = 0x1000_0000;
const F_OBJECT: u32 = 0x2000_0000;
const F_ARRAY: u32 = 0x4000_0000;
const OFFLEN_MASK: u32 = 0x0FFF_FFFF;
const TYPE_MASK: u32 = 0x7000_0000;
const HAS_OFF: u32 = 0x8000_0000;
const T_STRING: u32 = 0x0000_0000;
const T_NUMERIC: u32 = 0x1000_0000;
const T_FALSE: u32 = 0x2000_0000;
const T_TRUE: u32 = 0x3000_0000;
const T_NULL: u32 = 0x4000_0000;
const T_CONTAINER: u32 = 0x5000_0000;

/// The `numeric` OID, for errors inside jsonb numerics.
const NUMERIC_OID: u32 = 1700;

/// One container: `data` runs from its header to its end, `at` is where that
/// is in the datum (for error offsets).
#[derive(Clone, Copy)]
struct Container<'a> {
    data: &'a [u8],
    at: usize,
    count: usize,
    object: bool,
    scalar: bool,
    /// Offset of the children's bytes in `data`.
    base: usize,
}

impl<'a> Container<'a> {
    fn parse(oid: u32, data: &'a [u8], at: usize) -> Result<Container<'a>, TypeError> {
        let header = u32_at(oid, data, 0).map_err(|_| malformed(oid, at, "truncated container"))?;
        let count = (header & COUNT_MASK) as usize;
        let object = header & F_OBJECT != 0;
        let array = header & F_ARRAY != 0;
        let scalar = header & F_SCALAR != 0;
        if object == array || (scalar && (object || count != 1)) {
            return Err(malformed(oid, at, "bad container header"));
        }
        let entries = if object { 2 * count } else { count };
        let base = entries
            .checked_mul(4)
            .and_then(|n| n.checked_add(4))
            .filter(|&b| b <= data.len())
            .ok_or_else(|| malformed(oid, at, "container entries run past its end"))?;
        Ok(Container {
            data,
            at,
            count,
            object,
            scalar,
            base,
        })
    }

    fn entry(&self, oid: u32, i: usize) -> Result<u32, TypeError> {
        u32_at(oid, self.data, 4 + 4 * i).map_err(|_| malformed(oid, self.at, "bad entry"))
    }

    /// Where child `i` ends, given where it starts.
    fn end_of(&self, oid: u32, i: usize, start: usize) -> Result<usize, TypeError> {
        let e = self.entry(oid, i)?;
        let offlen = (e & OFFLEN_MASK) as usize;
        if e & HAS_OFF != 0 {
            Ok(offlen)
        } else {
            Ok(start + offlen)
        }
    }

    /// Where child `i` starts: the sum of the lengths before it, back to the
    /// nearest entry that stores an end offset.
    fn start_of(&self, oid: u32, i: usize) -> Result<usize, TypeError> {
        let mut offset = 0usize;
        for j in (0..i).rev() {
            let e = self.entry(oid, j)?;
            offset += (e & OFFLEN_MASK) as usize;
            if e & HAS_OFF != 0 {
                break;
            }
        }
        Ok(offset)
    }

    /// The bytes of the child spanning `start..end` (relative to `base`),
    /// and where they are in the datum.
    fn child(&self, oid: u32, start: usize, end: usize) -> Result<(&'a [u8], usize), TypeError> {
        let from = self.base + start;
        let to = self.base + end;
        self.data
            .get(from..to)
            .map(|d| (d, self.at + from))
            .ok_or_else(|| malformed(oid, self.at + from, "child runs past its container"))
    }
}

/// A container being printed and the position of its next child.
struct Frame<'a> {
    c: Container<'a>,
    next: usize,
    /// Start of the next element (arrays) or key (objects).
    key_start: usize,
    /// Start of the next value (objects only).
    value_start: usize,
}

impl<'a> Frame<'a> {
    fn new(oid: u32, c: Container<'a>, out: &mut String) -> Result<Frame<'a>, TypeError> {
        let value_start = if c.object && c.count > 0 {
            c.start_of(oid, c.count)?
        } else {
            0
        };
        if !c.scalar {
            out.push(if c.object { '{' } else { '[' });
        }
        Ok(Frame {
            c,
            next: 0,
            key_start: 0,
            value_start,
        })
    }
}

/// `jsonb_out` of a jsonb payload.
pub(super) fn jsonb_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let root = Container::parse(oid, datum, 0)?;
    let mut stack = vec![Frame::new(oid, root, out)?];
    while let Some(frame) = stack.last_mut() {
        let c = frame.c;
        if frame.next >= c.count {
            if !c.scalar {
                out.push(if c.object { '}' } else { ']' });
            }
            stack.pop();
            continue;
        }
        let i = frame.next;
        if i > 0 {
            out.push_str(", ");
        }
        let (entry, start, end) = if c.object {
            let key_end = c.end_of(oid, i, frame.key_start)?;
            let key_entry = c.entry(oid, i)?;
            if key_entry & TYPE_MASK != T_STRING {
                return Err(malformed(oid, c.at, "object key is not a string"));
            }
            let (key, key_at) = c.child(oid, frame.key_start, key_end)?;
            push_json_string(oid, key, key_at, out)?;
            out.push_str(": ");
            frame.key_start = key_end;
            let value_end = c.end_of(oid, c.count + i, frame.value_start)?;
            let start = frame.value_start;
            frame.value_start = value_end;
            (c.entry(oid, c.count + i)?, start, value_end)
        } else {
            let elem_end = c.end_of(oid, i, frame.key_start)?;
            let start = frame.key_start;
            frame.key_start = elem_end;
            (c.entry(oid, i)?, start, elem_end)
        };
        frame.next += 1;
        if let Some(nested) = scalar_or_container(oid, &c, entry, start, end, out)? {
            let frame = Frame::new(oid, nested, out)?;
            stack.push(frame);
        }
    }
    Ok(())
}

/// Prints a scalar child, or returns the nested container to descend into.
fn scalar_or_container<'a>(
    oid: u32,
    c: &Container<'a>,
    entry: u32,
    start: usize,
    end: usize,
    out: &mut String,
) -> Result<Option<Container<'a>>, TypeError> {
    match entry & TYPE_MASK {
        T_STRING => {
            let (s, at) = c.child(oid, start, end)?;
            push_json_string(oid, s, at, out)?;
        }
        T_NUMERIC | T_CONTAINER => {
            let aligned = align_up(start, 4)
                .filter(|&a| a <= end)
                .ok_or_else(|| malformed(oid, c.at + c.base + start, "bad child padding"))?;
            let (bytes, at) = c.child(oid, aligned, end)?;
            if entry & TYPE_MASK == T_CONTAINER {
                return Container::parse(oid, bytes, at).map(Some);
            }
            let v = nested_varlena(NUMERIC_OID, bytes, 0)?;
            let payload = bytes.get(v.start..v.end).unwrap_or_default();
            numeric_out(NUMERIC_OID, payload, out)?;
        }
        T_FALSE => out.push_str("false"),
        T_TRUE => out.push_str("true"),
        T_NULL => out.push_str("null"),
        _ => return Err(malformed(oid, c.at, "unknown entry type")),
    }
    Ok(None)
}

/// Appends a JSON string literal: quotes, and backslash escapes for `"`,
/// `\`, and control characters (`\b \f \n \r \t` by name, others as
/// `\u00XX`).
pub(super) fn push_json_string(
    oid: u32,
    bytes: &[u8],
    at: usize,
    out: &mut String,
) -> Result<(), TypeError> {
    let s = std::str::from_utf8(bytes)
        .map_err(|e| malformed(oid, at + e.valid_up_to(), "string is not valid UTF-8"))?;
    out.reserve(s.len() + 2);
    out.push('"');
    let mut plain_from = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(s.get(plain_from..i).unwrap_or_default());
        if escape.is_empty() {
            out.push_str("\\u00");
            push_hex_byte(out, b);
        } else {
            out.push_str(escape);
        }
        plain_from = i + 1;
    }
    out.push_str(s.get(plain_from..).unwrap_or_default());
    out.push('"');
    Ok(())
}
