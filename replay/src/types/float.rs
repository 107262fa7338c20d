//! float4 and float8 as `float4out`/`float8out` print them when
//! `extra_float_digits > 0` (the default): the shortest decimal that reads
//! back as the same binary value, with PostgreSQL's choice of digits (see
//! [`super::ryu`]).
//!
//! Layout: plain notation when the decimal exponent of the first digit is in
//! `-4..15` (float8) or `-4..6` (float4), otherwise `d.ddde±XX` with at
//! least two exponent digits. Zero prints as `0` or `-0`, and the special
//! values as `NaN`, `Infinity` and `-Infinity` (NaN never has a sign).

use super::error::TypeError;
use super::push::{push_ascii, push_u64};
use super::read::exact;
use super::ryu::{self, Decimal};

/// `float4out`.
pub(super) fn float4_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let bits = u32::from_le_bytes(exact(oid, datum)?);
    let negative = bits >> 31 != 0;
    let exponent = (bits >> 23) & 0xff;
    let mantissa = bits & 0x7f_ffff;
    if !special(
        exponent == 0xff,
        exponent == 0 && mantissa == 0,
        mantissa != 0,
        negative,
        out,
    ) {
        lay_out(ryu::single(mantissa, exponent), negative, 6, out);
    }
    Ok(())
}

/// `float8out`.
pub(super) fn float8_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    push_float8(u64::from_le_bytes(exact(oid, datum)?), out);
    Ok(())
}

/// Appends the float8 with these bits as `float8out` (and the geometric
/// types' `float8out_internal`) prints it.
pub(super) fn push_float8(bits: u64, out: &mut String) {
    let negative = bits >> 63 != 0;
    let exponent = ((bits >> 52) & 0x7ff) as u32;
    let mantissa = bits & 0x000f_ffff_ffff_ffff;
    if !special(
        exponent == 0x7ff,
        exponent == 0 && mantissa == 0,
        mantissa != 0,
        negative,
        out,
    ) {
        lay_out(ryu::double(mantissa, exponent), negative, 15, out);
    }
}

/// Prints NaN, the infinities and the zeros; false for any other value.
/// `all_ones` says the exponent field is all ones (NaN or infinity).
fn special(all_ones: bool, zero: bool, mantissa: bool, negative: bool, out: &mut String) -> bool {
    if all_ones && mantissa {
        out.push_str("NaN");
        return true;
    }
    if !all_ones && !zero {
        return false;
    }
    if negative {
        out.push('-');
    }
    out.push_str(if all_ones { "Infinity" } else { "0" });
    true
}

/// Writes `d` in plain notation when its leading digit's decimal exponent is
/// in `-4..plain_below`, else in scientific notation.
fn lay_out(d: Decimal, negative: bool, plain_below: i32, out: &mut String) {
    let mut buf = [0u8; 20];
    let digits = decimal_digits(d.digits, &mut buf);
    let len = digits.len() as i32;
    let lead_exp = d.exponent + len - 1;
    if negative {
        out.push('-');
    }
    if (-4..plain_below).contains(&lead_exp) {
        let int_len = d.exponent + len;
        if int_len <= 0 {
            out.push_str("0.");
            for _ in 0..-int_len {
                out.push('0');
            }
            push_ascii(out, digits);
        } else if d.exponent < 0 {
            let (int, frac) = digits.split_at(int_len as usize);
            push_ascii(out, int);
            out.push('.');
            push_ascii(out, frac);
        } else {
            push_ascii(out, digits);
            for _ in 0..d.exponent {
                out.push('0');
            }
        }
        return;
    }
    // Exact integers keep their trailing zeros in `digits`; scientific
    // notation moves them into the exponent.
    let mut digits = digits;
    if d.exponent == 0 {
        while let [rest @ .., b'0'] = digits {
            if rest.is_empty() {
                break;
            }
            digits = rest;
        }
    }
    let (first, rest) = digits.split_at(1.min(digits.len()));
    push_ascii(out, first);
    if !rest.is_empty() {
        out.push('.');
        push_ascii(out, rest);
    }
    out.push('e');
    out.push(if lead_exp < 0 { '-' } else { '+' });
    let e = lead_exp.unsigned_abs();
    if e < 10 {
        out.push('0');
    }
    push_u64(out, u64::from(e));
}

/// The decimal digits of `v` (at least one), written into `buf`.
fn decimal_digits(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}
