//! numeric: base-10000 digits with a weight and a display scale.
//!
//! The payload starts with a 16-bit header word whose top two bits choose the
//! form: `10` short (sign, dscale and weight packed into the word), `00`/`01`
//! long (positive/negative; a second word holds the weight), `11` special
//! (NaN, Infinity, -Infinity). Digits follow as little-endian 16-bit values
//! in `0..10000`, most significant first. The value is
//! `Σ digit[k] × 10000^(weight − k)`, and the text shows exactly `dscale`
//! decimal places.

use super::error::{malformed, TypeError};
use super::push::push_u64;
use super::read::{i16_at, u16_at};

const SIGN_MASK: u16 = 0xC000;
const NEG: u16 = 0x4000;
const SHORT: u16 = 0x8000;
const SPECIAL: u16 = 0xC000;
const NAN: u16 = 0xC000;
const PINF: u16 = 0xD000;
const NINF: u16 = 0xF000;
const SHORT_SIGN: u16 = 0x2000;
const SHORT_DSCALE_MASK: u16 = 0x1F80;
const SHORT_DSCALE_SHIFT: u16 = 7;
const SHORT_WEIGHT_SIGN: u16 = 0x0040;
const SHORT_WEIGHT_MASK: u16 = 0x003F;
const LONG_DSCALE_MASK: u16 = 0x3FFF;
const NBASE: u16 = 10000;

/// `numeric_out` of a numeric payload.
pub(super) fn numeric_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let header = u16_at(oid, datum, 0)?;
    let (negative, dscale, weight, digits_at) = match header & SIGN_MASK {
        SPECIAL => {
            out.push_str(match header {
                NAN => "NaN",
                PINF => "Infinity",
                NINF => "-Infinity",
                _ => return Err(malformed(oid, 0, "unknown special numeric")),
            });
            return Ok(());
        }
        SHORT => {
            let magnitude = i32::from(header & SHORT_WEIGHT_MASK);
            let weight = if header & SHORT_WEIGHT_SIGN != 0 {
                magnitude - 64
            } else {
                magnitude
            };
            let dscale = (header & SHORT_DSCALE_MASK) >> SHORT_DSCALE_SHIFT;
            (header & SHORT_SIGN != 0, dscale, weight, 2)
        }
        sign => {
            let weight = i32::from(i16_at(oid, datum, 2)?);
            (sign == NEG, header & LONG_DSCALE_MASK, weight, 4)
        }
    };
    let digit_bytes = datum.get(digits_at..).unwrap_or_default();
    if digit_bytes.len() % 2 != 0 {
        return Err(malformed(oid, datum.len(), "odd number of digit bytes"));
    }
    let ndigits = digit_bytes.len() / 2;
    let digit = |k: i64| -> Result<u16, TypeError> {
        if k < 0 || k >= ndigits as i64 {
            return Ok(0);
        }
        let at = digits_at + 2 * k as usize;
        let d = u16_at(oid, datum, at)?;
        if d >= NBASE {
            return Err(malformed(oid, at, "numeric digit out of range"));
        }
        Ok(d)
    };
    out.reserve(ndigits * 4 + usize::from(dscale) + 4);
    if negative {
        out.push('-');
    }
    // Integer part.
    let mut k: i64;
    if weight < 0 {
        out.push('0');
        k = i64::from(weight) + 1;
    } else {
        push_u64(out, u64::from(digit(0)?));
        for i in 1..=i64::from(weight) {
            push_group(out, digit(i)?, 4);
        }
        k = i64::from(weight) + 1;
    }
    // Fraction: exactly dscale decimal digits.
    if dscale > 0 {
        out.push('.');
        let mut left = usize::from(dscale);
        while left > 0 {
            let take = left.min(4);
            push_group(out, digit(k)?, take);
            left -= take;
            k += 1;
        }
    }
    Ok(())
}

/// Appends the first `take` of the four zero-padded decimal digits of `d`.
fn push_group(out: &mut String, d: u16, take: usize) {
    let group = [
        b'0' + (d / 1000) as u8,
        b'0' + (d / 100 % 10) as u8,
        b'0' + (d / 10 % 10) as u8,
        b'0' + (d % 10) as u8,
    ];
    for &c in group.iter().take(take) {
        out.push(char::from(c));
    }
}
