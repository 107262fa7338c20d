//! Simple scalar types: booleans, integers (and the transaction and command
//! IDs), strings, bytea, money, uuid, macaddr, macaddr8, tid and pg_lsn.
//!
//! Strings are stored in the server encoding, which must be UTF-8 here; a
//! value that is not valid UTF-8 is reported as malformed.

use super::error::{malformed, TypeError};
use super::push::{push_hex_byte, push_hex_upper, push_i64, push_u64};
use super::read::exact;

/// `boolout`: `t` or `f`.
pub(super) fn bool_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let [b] = exact::<1>(oid, datum)?;
    out.push(if b != 0 { 't' } else { 'f' });
    Ok(())
}

/// `charout` (PostgreSQL 15+): the byte itself, nothing for a zero byte, and
/// `\ooo` (three octal digits) for bytes with the high bit set.
pub(super) fn char_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let [b] = exact::<1>(oid, datum)?;
    if b >= 0x80 {
        out.push('\\');
        out.push(char::from(b'0' + (b >> 6)));
        out.push(char::from(b'0' + ((b >> 3) & 7)));
        out.push(char::from(b'0' + (b & 7)));
    } else if b != 0 {
        out.push(char::from(b));
    }
    Ok(())
}

/// Text in the server encoding (text, varchar, bpchar with its padding,
/// json as entered).
pub(super) fn text_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let s = std::str::from_utf8(datum)
        .map_err(|e| malformed(oid, e.valid_up_to(), "text is not valid UTF-8"))?;
    out.push_str(s);
    Ok(())
}

/// `name`: a NUL-padded string in 64 bytes.
pub(super) fn name_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let bytes = exact::<64>(oid, datum)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    text_out(oid, bytes.get(..end).unwrap_or_default(), out)
}

/// `byteaout` with `bytea_output = 'hex'`.
pub(super) fn bytea_out(datum: &[u8], out: &mut String) {
    out.reserve(2 + 2 * datum.len());
    out.push_str("\\x");
    for &b in datum {
        push_hex_byte(out, b);
    }
}

/// int2, int4, int8, oid, xid, cid and xid8: little-endian integers of the
/// datum's width.
pub(super) fn int_out(
    oid: u32,
    datum: &[u8],
    width: usize,
    signed: bool,
    out: &mut String,
) -> Result<(), TypeError> {
    match (width, signed) {
        (2, _) => push_i64(out, i64::from(i16::from_le_bytes(exact(oid, datum)?))),
        (4, true) => push_i64(out, i64::from(i32::from_le_bytes(exact(oid, datum)?))),
        (4, false) => push_u64(out, u64::from(u32::from_le_bytes(exact(oid, datum)?))),
        (_, false) => push_u64(out, u64::from_le_bytes(exact(oid, datum)?)),
        _ => push_i64(out, i64::from_le_bytes(exact(oid, datum)?)),
    }
    Ok(())
}

/// `cash_out` with `lc_monetary = 'C'`: `$`, two fraction digits, `,` every
/// three integer digits, a leading `-` for negative amounts.
pub(super) fn money_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let value = i64::from_le_bytes(exact(oid, datum)?);
    let mut units = value.unsigned_abs();
    // Digits from the right: two fraction digits, the point, then groups.
    let mut buf = [0u8; 40];
    let mut i = buf.len();
    let mut put = |c: u8, i: &mut usize| {
        *i -= 1;
        buf[*i] = c;
    };
    for _ in 0..2 {
        put(b'0' + (units % 10) as u8, &mut i);
        units /= 10;
    }
    put(b'.', &mut i);
    let mut count = 0;
    loop {
        if count > 0 && count % 3 == 0 {
            put(b',', &mut i);
        }
        put(b'0' + (units % 10) as u8, &mut i);
        units /= 10;
        count += 1;
        if units == 0 {
            break;
        }
    }
    if value < 0 {
        out.push('-');
    }
    out.push('$');
    super::push::push_ascii(out, buf.get(i..).unwrap_or_default());
    Ok(())
}

/// `uuid_out`: lower-case hex in 8-4-4-4-12 groups.
pub(super) fn uuid_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let bytes = exact::<16>(oid, datum)?;
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        push_hex_byte(out, *b);
    }
    Ok(())
}

/// `macaddr_out` (`N` = 6) and `macaddr8_out` (`N` = 8): lower-case hex
/// bytes separated by `:`.
pub(super) fn macaddr_out<const N: usize>(
    oid: u32,
    datum: &[u8],
    out: &mut String,
) -> Result<(), TypeError> {
    let bytes = exact::<N>(oid, datum)?;
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        push_hex_byte(out, *b);
    }
    Ok(())
}

/// `pg_lsn_out`: `%X/%X` of the high and low 32 bits of the little-endian
/// 64-bit position.
pub(super) fn pg_lsn_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let lsn = u64::from_le_bytes(exact(oid, datum)?);
    push_hex_upper(out, (lsn >> 32) as u32);
    out.push('/');
    push_hex_upper(out, lsn as u32);
    Ok(())
}

/// `tidout`: `(block,offset)`. The block number is stored as two 16-bit
/// halves, high first, each little-endian; the offset follows.
pub(super) fn tid_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let b = exact::<6>(oid, datum)?;
    let hi = u32::from(u16::from_le_bytes([b[0], b[1]]));
    let lo = u32::from(u16::from_le_bytes([b[2], b[3]]));
    out.push('(');
    push_u64(out, u64::from(hi << 16 | lo));
    out.push(',');
    push_u64(out, u64::from(u16::from_le_bytes([b[4], b[5]])));
    out.push(')');
    Ok(())
}
