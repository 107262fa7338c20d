//! tsvector and tsquery, printed the way `tsvectorout` and `tsqueryout`
//! print them.
//!
//! A tsvector's payload is the lexeme count (int32), one 32-bit entry per
//! lexeme (bit 0: has positions; bits 1-11: length; bits 12-31: offset in
//! the string area), then the string area: each lexeme, followed, when it
//! has positions, at the next even offset by their count (uint16) and the
//! positions (uint16: weight in the top 2 bits, position in the rest). The
//! text is the lexemes separated by spaces, each quoted with `'` (and `'`
//! and `\` doubled), then `:` and its positions, each with its weight letter
//! (`A` for 3, `B` for 2, `C` for 1, none for 0), separated by `,`.
//!
//! A tsquery's payload is the item count (int32), the items (12 bytes each)
//! in prefix order, an operator before its right operand and then its left
//! one, then the operands' NUL-terminated strings. An operand item is type
//! 1, its weight bitmap, a prefix flag, a checksum, and a 32-bit word whose
//! bits 12-31 give its string's offset; an operator item is type 2, the
//! operator (1 not, 2 and, 3 or, 4 phrase) and the phrase distance (int16).
//! The text is infix, with `( ... )` around an operand of lower priority
//! than its operator's (and around a phrase that is the right operand of a
//! phrase); an empty query prints as nothing.

use super::error::{malformed, TypeError};
use super::push::push_i64;
use super::read::{i16_at, i32_at, u16_at, u32_at};

/// `tsvectorout`.
pub(super) fn tsvector_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let count = i32_at(oid, datum, 0)?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= datum.len() / 4)
        .ok_or_else(|| malformed(oid, 0, "bad lexeme count"))?;
    let strings = 4 + 4 * count;
    let area = datum
        .get(strings..)
        .ok_or_else(|| malformed(oid, 0, "entries run past the value"))?;
    for i in 0..count {
        let entry = u32_at(oid, datum, 4 + 4 * i)?;
        let len = ((entry >> 1) & 0x7ff) as usize;
        let pos = (entry >> 12) as usize;
        let lexeme = area
            .get(pos..pos + len)
            .ok_or_else(|| malformed(oid, strings + pos, "lexeme runs past the value"))?;
        let lexeme = std::str::from_utf8(lexeme)
            .map_err(|_| malformed(oid, strings + pos, "lexeme is not valid UTF-8"))?;
        if i > 0 {
            out.push(' ');
        }
        quoted(lexeme, out);
        if entry & 1 == 0 {
            continue;
        }
        let at = (pos + len + 1) & !1;
        let npos = usize::from(u16_at(oid, area, at)?);
        if npos == 0 {
            continue;
        }
        out.push(':');
        for k in 0..npos {
            if k > 0 {
                out.push(',');
            }
            let word = u16_at(oid, area, at + 2 + 2 * k)?;
            push_i64(out, i64::from(word & 0x3fff));
            match word >> 14 {
                3 => out.push('A'),
                2 => out.push('B'),
                1 => out.push('C'),
                _ => {}
            }
        }
    }
    Ok(())
}

/// `'text'` with `'` and `\` doubled.
fn quoted(text: &str, out: &mut String) {
    out.push('\'');
    for c in text.chars() {
        if c == '\'' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
}

const QI_VAL: u8 = 1;
const QI_OPR: u8 = 2;
const OP_NOT: u8 = 1;
const OP_AND: u8 = 2;
const OP_OR: u8 = 3;
const OP_PHRASE: u8 = 4;
/// Bytes of one query item.
const ITEM: usize = 12;

/// An operator's priority (`tsearch_op_priority`).
fn priority(op: u8) -> u8 {
    match op {
        OP_NOT => 4,
        OP_AND => 2,
        OP_OR => 1,
        _ => 3,
    }
}

/// A node of the query tree: an operand, or an operator with its operands
/// (item indexes).
#[derive(Clone, Copy)]
enum Node {
    Operand,
    Not(usize),
    Binary(u8, usize, usize),
}

/// What is left to print, last first.
enum Task {
    /// Item `i`, under an operator of priority `parent` (0 at the top),
    /// as the right operand of a phrase or not.
    Item(usize, u8, bool),
    Text(&'static str),
    /// The operator of binary item `i`, with its surrounding spaces.
    Operator(usize),
}

/// `tsqueryout`. The items become a tree read back to front, which is then
/// printed depth first from an explicit stack: no input makes it recurse,
/// and no text is copied twice.
pub(super) fn tsquery_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let count = i32_at(oid, datum, 0)?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= datum.len() / ITEM)
        .ok_or_else(|| malformed(oid, 0, "bad item count"))?;
    if count == 0 {
        return Ok(());
    }
    let operands = 4 + ITEM * count;
    let area = datum
        .get(operands..)
        .ok_or_else(|| malformed(oid, 0, "items run past the value"))?;
    let item = |i: usize| 4 + ITEM * i;
    let byte = |at: usize| datum.get(at).copied().unwrap_or_default();
    let underflow = || malformed(oid, 0, "operator without its operands");
    let mut nodes = vec![Node::Operand; count];
    let mut pending: Vec<usize> = Vec::new();
    for i in (0..count).rev() {
        nodes[i] = match (byte(item(i)), byte(item(i) + 1)) {
            (QI_VAL, _) => Node::Operand,
            (QI_OPR, OP_NOT) => Node::Not(pending.pop().ok_or_else(underflow)?),
            (QI_OPR, op @ (OP_AND | OP_OR | OP_PHRASE)) => {
                let right = pending.pop().ok_or_else(underflow)?;
                let left = pending.pop().ok_or_else(underflow)?;
                Node::Binary(op, left, right)
            }
            (QI_OPR, _) => return Err(malformed(oid, item(i) + 1, "unknown tsquery operator")),
            _ => return Err(malformed(oid, item(i), "unknown tsquery item")),
        };
        pending.push(i);
    }
    let root = match (pending.pop(), pending.is_empty()) {
        (Some(root), true) => root,
        _ => return Err(malformed(oid, 0, "items do not form one query")),
    };
    let mut tasks = vec![Task::Item(root, 0, false)];
    while let Some(task) = tasks.pop() {
        match task {
            Task::Text(text) => out.push_str(text),
            Task::Operator(i) => match byte(item(i) + 1) {
                OP_AND => out.push_str(" & "),
                OP_OR => out.push_str(" | "),
                _ => match i16_at(oid, datum, item(i) + 2)? {
                    1 => out.push_str(" <-> "),
                    d => {
                        out.push_str(" <");
                        push_i64(out, i64::from(d));
                        out.push_str("> ");
                    }
                },
            },
            Task::Item(i, parent, right_of_phrase) => match nodes[i] {
                Node::Operand => operand(oid, datum, item(i), area, out)?,
                Node::Not(child) => {
                    out.push('!');
                    tasks.push(Task::Item(child, priority(OP_NOT), false));
                }
                Node::Binary(op, left, right) => {
                    let wrap = priority(op) < parent || (op == OP_PHRASE && right_of_phrase);
                    if wrap {
                        out.push_str("( ");
                        tasks.push(Task::Text(" )"));
                    }
                    tasks.push(Task::Item(right, priority(op), op == OP_PHRASE));
                    tasks.push(Task::Operator(i));
                    tasks.push(Task::Item(left, priority(op), false));
                }
            },
        }
    }
    Ok(())
}

/// An operand's text: its quoted string, then `:` with `*` for a prefix
/// match and its weight letters when it has either.
fn operand(
    oid: u32,
    datum: &[u8],
    at: usize,
    area: &[u8],
    out: &mut String,
) -> Result<(), TypeError> {
    let weight = datum.get(at + 1).copied().unwrap_or_default();
    let prefix = datum.get(at + 2).copied().unwrap_or_default() != 0;
    let start = (u32_at(oid, datum, at + 8)? >> 12) as usize;
    let rest = area
        .get(start..)
        .ok_or_else(|| malformed(oid, at + 8, "operand offset out of bounds"))?;
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed(oid, at + 8, "operand is not terminated"))?;
    let text = std::str::from_utf8(rest.get(..end).unwrap_or_default())
        .map_err(|_| malformed(oid, at + 8, "operand is not valid UTF-8"))?;
    quoted(text, out);
    if weight != 0 || prefix {
        out.push(':');
        if prefix {
            out.push('*');
        }
        for (bit, letter) in [(8, 'A'), (4, 'B'), (2, 'C'), (1, 'D')] {
            if weight & bit != 0 {
                out.push(letter);
            }
        }
    }
    Ok(())
}
