//! bit and varbit: `varbit_out` (which `bit_out` shares) prints one `0` or
//! `1` per bit, most significant bit of each byte first.
//!
//! The payload is the number of bits (int32), then the bits, padded with
//! zeros to a whole byte.

use super::error::{malformed, TypeError};
use super::read::i32_at;

/// `varbit_out` and `bit_out`.
pub(super) fn varbit_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let len = i32_at(oid, datum, 0)?;
    let len = usize::try_from(len).map_err(|_| malformed(oid, 0, "negative bit length"))?;
    let bytes = datum
        .get(4..)
        .and_then(|rest| rest.get(..len.div_ceil(8)))
        .ok_or_else(|| malformed(oid, 4, "fewer bytes than the bit length needs"))?;
    out.reserve(len);
    for i in 0..len {
        let byte = bytes.get(i / 8).copied().unwrap_or_default();
        out.push(if byte & (0x80 >> (i % 8)) != 0 {
            '1'
        } else {
            '0'
        });
    }
    Ok(())
}
