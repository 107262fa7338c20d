//! pg_snapshot and txid_snapshot (the same layout and output function,
//! `pg_snapshot_out`): `xmin:xmax:xip,...` in decimal.
//!
//! The payload is the number of in-progress transactions (uint32), then
//! xmin, xmax and each in-progress transaction as 64-bit full transaction
//! IDs.

use super::error::{malformed, TypeError};
use super::push::push_u64;
use super::read::{bytes_at, u32_at};

/// `pg_snapshot_out`.
pub(super) fn snapshot_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let nxip = u32_at(oid, datum, 0)? as usize;
    if nxip > datum.len().saturating_sub(20) / 8 {
        return Err(malformed(oid, 0, "more transactions than the value holds"));
    }
    let u64_at = |at: usize| bytes_at::<8>(oid, datum, at).map(u64::from_le_bytes);
    push_u64(out, u64_at(4)?);
    out.push(':');
    push_u64(out, u64_at(12)?);
    out.push(':');
    for i in 0..nxip {
        if i > 0 {
            out.push(',');
        }
        push_u64(out, u64_at(20 + 8 * i)?);
    }
    Ok(())
}
