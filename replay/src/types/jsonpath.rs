//! jsonpath, printed the way `jsonpath_out` prints it.
//!
//! The payload is a header (uint32: the format version, and the high bit
//! set for lax mode, else `strict ` is printed first), then the items. An
//! item is its type byte, then (4-byte aligned) the offset of the next item
//! in its chain (0 for none), then its content; every offset is relative to
//! the item's own start. Contents: a string's, a key's or a variable's
//! length (int32) and bytes (NUL-terminated); a numeric value (with its
//! 4-byte varlena header); a bool byte; two operand offsets for a binary
//! operator; one for a unary one, a filter, `exists`, `is unknown` and
//! `datetime()` (0: no template); a subscript count and a (from, to) offset
//! pair per subscript (to 0: no range); the bounds of `.**`; a regex's
//! flags, operand offset, pattern length and pattern.
//!
//! The text follows `printJsonPathItem`: operands in parentheses when their
//! operator binds tighter than theirs, a chained item after a numeric
//! literal in parentheses, strings as JSON strings.

use super::error::{malformed, TypeError};
use super::jsonb::push_json_string;
use super::numeric::numeric_out;
use super::push::push_u64;
use super::read::{align_up, bytes_at, i32_at, u32_at};

const NULL: u8 = 0;
const STRING: u8 = 1;
const NUMERIC: u8 = 2;
const BOOL: u8 = 3;
const AND: u8 = 4;
const OR: u8 = 5;
const NOT: u8 = 6;
const IS_UNKNOWN: u8 = 7;
const MOD: u8 = 18;
const PLUS: u8 = 19;
const MINUS: u8 = 20;
const ANY_ARRAY: u8 = 21;
const ANY_KEY: u8 = 22;
const INDEX_ARRAY: u8 = 23;
const ANY: u8 = 24;
const KEY: u8 = 25;
const CURRENT: u8 = 26;
const ROOT: u8 = 27;
const VARIABLE: u8 = 28;
const FILTER: u8 = 29;
const EXISTS: u8 = 30;
const DATETIME: u8 = 37;
const LAST: u8 = 40;
const STARTS_WITH: u8 = 41;
const LIKE_REGEX: u8 = 42;

/// Header bit of lax mode.
const LAX: u32 = 0x8000_0000;

/// A binary operator's text with the spaces around it, for the binary
/// operators.
fn operator(kind: u8) -> Option<&'static str> {
    Some(match kind {
        AND => " && ",
        OR => " || ",
        8 => " == ",
        9 => " != ",
        10 => " < ",
        11 => " > ",
        12 => " <= ",
        13 => " >= ",
        14 => " + ",
        15 => " - ",
        16 => " * ",
        17 => " / ",
        MOD => " % ",
        STARTS_WITH => " starts with ",
        _ => return None,
    })
}

/// `operationPriority`.
fn priority(kind: u8) -> u8 {
    match kind {
        OR => 0,
        AND => 1,
        8..=13 | STARTS_WITH => 2,
        14 | 15 => 3,
        16..=MOD => 4,
        PLUS | MINUS => 5,
        _ => 6,
    }
}

/// What is left to print, last first.
enum Task {
    /// The item at this offset, as a chained item (`.key` gets its dot)
    /// and in parentheses or not.
    Item {
        at: usize,
        in_key: bool,
        parens: bool,
    },
    Text(&'static str),
    Owned(String),
}

/// `jsonpath_out`.
pub(super) fn jsonpath_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let header = u32_at(oid, datum, 0)?;
    if header & LAX == 0 {
        out.push_str("strict ");
    }
    let mut tasks = vec![Task::Item {
        at: 4,
        in_key: false,
        parens: true,
    }];
    // A well-formed path visits each item once; offsets that loop do not
    // get to print forever.
    let mut budget = datum.len();
    while let Some(task) = tasks.pop() {
        let (at, in_key, parens) = match task {
            Task::Text(text) => {
                out.push_str(text);
                continue;
            }
            Task::Owned(text) => {
                out.push_str(&text);
                continue;
            }
            Task::Item { at, in_key, parens } => (at, in_key, parens),
        };
        budget = budget
            .checked_sub(1)
            .ok_or_else(|| malformed(oid, at, "jsonpath items loop"))?;
        item(oid, datum, at, in_key, parens, &mut tasks, out)?;
    }
    Ok(())
}

/// Prints what item `at` prints itself and queues its operands and the
/// next item of its chain.
fn item(
    oid: u32,
    datum: &[u8],
    at: usize,
    in_key: bool,
    parens: bool,
    tasks: &mut Vec<Task>,
    out: &mut String,
) -> Result<(), TypeError> {
    let kind = *datum
        .get(at)
        .ok_or_else(|| malformed(oid, at, "jsonpath item out of bounds"))?;
    // Offsets in the payload count from the header's start, 4 bytes into
    // the value, which is itself aligned: align as the value does.
    let next_at = align_up(at + 1, 4).ok_or_else(|| malformed(oid, at, "offset overflow"))?;
    let next = i32_at(oid, datum, next_at)?;
    let content = next_at + 4;
    let offset = |rel: i32| -> Result<usize, TypeError> {
        at.checked_add_signed(rel as isize)
            .filter(|&p| p < datum.len())
            .ok_or_else(|| malformed(oid, at, "jsonpath offset out of bounds"))
    };
    let arg = |k: usize| i32_at(oid, datum, content + 4 * k);
    if next > 0 {
        tasks.push(Task::Item {
            at: offset(next)?,
            in_key: true,
            parens: true,
        });
    }
    let child = |rel: i32, parens: bool| -> Result<Task, TypeError> {
        Ok(Task::Item {
            at: offset(rel)?,
            in_key: false,
            parens,
        })
    };
    let operand_parens = |rel: i32| -> Result<bool, TypeError> {
        let inner = *datum.get(offset(rel)?).unwrap_or(&0);
        Ok(priority(inner) <= priority(kind))
    };
    match kind {
        NULL => out.push_str("null"),
        KEY | STRING | VARIABLE => {
            if kind == KEY && in_key {
                out.push('.');
            }
            if kind == VARIABLE {
                out.push('$');
            }
            let len = usize::try_from(arg(0)?)
                .map_err(|_| malformed(oid, content, "negative string length"))?;
            let bytes = datum
                .get(content + 4..)
                .and_then(|b| b.get(..len))
                .ok_or_else(|| malformed(oid, content, "string runs past the value"))?;
            push_json_string(oid, bytes, content + 4, out)?;
        }
        NUMERIC => {
            let word = u32_at(oid, datum, content)?;
            if word & 3 != 0 {
                return Err(malformed(oid, content, "numeric without a 4-byte header"));
            }
            let value = datum
                .get(content + 4..content + (word >> 2) as usize)
                .ok_or_else(|| malformed(oid, content, "numeric runs past the value"))?;
            if next > 0 {
                out.push('(');
            }
            numeric_out(oid, value, out)?;
            if next > 0 {
                out.push(')');
            }
        }
        BOOL => {
            let [b] = bytes_at::<1>(oid, datum, content)?;
            out.push_str(if b != 0 { "true" } else { "false" });
        }
        _ if operator(kind).is_some() => {
            let (left, right) = (arg(0)?, arg(1)?);
            if parens {
                out.push('(');
                tasks.push(Task::Text(")"));
            }
            tasks.push(child(right, operand_parens(right)?)?);
            tasks.push(Task::Text(operator(kind).unwrap_or_default()));
            tasks.push(child(left, operand_parens(left)?)?);
        }
        LIKE_REGEX => {
            let flags = arg(0)?;
            let expr = arg(1)?;
            let len = usize::try_from(arg(2)?)
                .map_err(|_| malformed(oid, content, "negative pattern length"))?;
            let pattern = datum
                .get(content + 12..)
                .and_then(|b| b.get(..len))
                .ok_or_else(|| malformed(oid, content, "pattern runs past the value"))?;
            if parens {
                out.push('(');
            }
            // The operand comes first, then the pattern and flags.
            let mut rest = String::from(" like_regex ");
            push_json_string(oid, pattern, content + 12, &mut rest)?;
            if flags != 0 {
                rest.push_str(" flag \"");
                for (bit, letter) in [(1, 'i'), (2, 's'), (4, 'm'), (8, 'x'), (16, 'q')] {
                    if flags & bit != 0 {
                        rest.push(letter);
                    }
                }
                rest.push('"');
            }
            if parens {
                rest.push(')');
            }
            tasks.push(Task::Owned(rest));
            tasks.push(child(expr, operand_parens(expr)?)?);
        }
        PLUS | MINUS => {
            if parens {
                out.push('(');
                tasks.push(Task::Text(")"));
            }
            out.push(if kind == PLUS { '+' } else { '-' });
            let a = arg(0)?;
            tasks.push(child(a, operand_parens(a)?)?);
        }
        FILTER | NOT | EXISTS => {
            out.push_str(match kind {
                FILTER => "?(",
                NOT => "!(",
                _ => "exists (",
            });
            tasks.push(Task::Text(")"));
            tasks.push(child(arg(0)?, false)?);
        }
        IS_UNKNOWN => {
            out.push('(');
            tasks.push(Task::Text(") is unknown"));
            tasks.push(child(arg(0)?, false)?);
        }
        CURRENT => out.push('@'),
        ROOT => out.push('$'),
        LAST => out.push_str("last"),
        ANY_ARRAY => out.push_str("[*]"),
        ANY_KEY => {
            if in_key {
                out.push('.');
            }
            out.push('*');
        }
        INDEX_ARRAY => {
            let n = usize::try_from(arg(0)?)
                .ok()
                .filter(|&n| n <= datum.len() / 8)
                .ok_or_else(|| malformed(oid, content, "bad subscript count"))?;
            out.push('[');
            tasks.push(Task::Text("]"));
            for i in (0..n).rev() {
                let from = arg(1 + 2 * i)?;
                let to = arg(2 + 2 * i)?;
                if to != 0 {
                    tasks.push(child(to, false)?);
                    tasks.push(Task::Text(" to "));
                }
                tasks.push(child(from, false)?);
                if i > 0 {
                    tasks.push(Task::Text(","));
                }
            }
        }
        ANY => {
            if in_key {
                out.push('.');
            }
            let first = u32_at(oid, datum, content)?;
            let last = u32_at(oid, datum, content + 4)?;
            let bound = |v: u32, out: &mut String| {
                if v == u32::MAX {
                    out.push_str("last");
                } else {
                    push_u64(out, u64::from(v));
                }
            };
            out.push_str("**");
            if !(first == 0 && last == u32::MAX) {
                out.push('{');
                bound(first, out);
                if first != last {
                    out.push_str(" to ");
                    bound(last, out);
                }
                out.push('}');
            }
        }
        31 => out.push_str(".type()"),
        32 => out.push_str(".size()"),
        33 => out.push_str(".abs()"),
        34 => out.push_str(".floor()"),
        35 => out.push_str(".ceiling()"),
        36 => out.push_str(".double()"),
        DATETIME => {
            out.push_str(".datetime(");
            tasks.push(Task::Text(")"));
            let a = arg(0)?;
            if a != 0 {
                tasks.push(child(a, false)?);
            }
        }
        38 => out.push_str(".keyvalue()"),
        _ => return Err(malformed(oid, at, "unknown jsonpath item")),
    }
    Ok(())
}
