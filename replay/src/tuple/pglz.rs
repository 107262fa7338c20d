//! pglz decompression, PostgreSQL's own LZ-family format.
//!
//! The stream has no header. It is a sequence of groups: one control byte
//! whose bits, least significant first, say what each of the next (up to)
//! eight items is. A 0 bit is a literal byte, copied as is. A 1 bit is a
//! back-reference tag of two bytes — the low nibble of the first is the
//! length minus 3, its high nibble and the second byte form a 12-bit
//! distance back from the current end of the output — or three bytes when the
//! nibble is 15, the third byte adding up to 255 more to a length of 18.
//! A back-reference may overlap the bytes it produces, which repeats a
//! pattern whose period is the distance.
//!
//! Decoding stops when either the input or the expected output is exhausted,
//! and is only valid when both ran out together (PostgreSQL's "check
//! complete" mode, used for whole values).

use super::error::{TupleError, TupleErrorKind};

/// Most output one input byte can produce: a 3-byte tag yields 273 bytes.
const MAX_RATIO: usize = 92;

/// Decompresses `src` into exactly `raw_size` bytes, consuming all of it.
pub(crate) fn decompress(src: &[u8], raw_size: usize) -> Result<Vec<u8>, TupleError> {
    if raw_size > src.len().saturating_mul(MAX_RATIO) {
        return Err(TupleErrorKind::DecompressedSize {
            raw_size: raw_size as u64,
            compressed: src.len(),
        }
        .into());
    }
    let mut out = vec![0u8; raw_size];
    let (sp, dp) = decode(src, &mut out)?;
    if sp != src.len() || dp != raw_size {
        return Err(TupleError::new(TupleErrorKind::CorruptPglz {
            reason: if dp != raw_size {
                "input ended before the declared size was produced"
            } else {
                "input left over after the declared size was produced"
            },
        })
        .with_offset(sp));
    }
    Ok(out)
}

fn corrupt(reason: &'static str, at: usize) -> TupleError {
    TupleError::new(TupleErrorKind::CorruptPglz { reason }).with_offset(at)
}

/// Worst case of one control group: the control byte, eight 3-byte tags and
/// 8 bytes of slack for a fixed-size literal copy.
const GROUP_IN: usize = 1 + 8 * 3 + 8;
/// Worst case of one control group's output: eight 273-byte matches.
const GROUP_OUT: usize = 8 * 273;
/// Matches of at most this length, and at least this far back, are copied
/// as a fixed-size block.
const SHORT_COPY: usize = 18;

/// Runs the decoder until input or output is exhausted; returns how much of
/// each was used.
fn decode(src: &[u8], out: &mut [u8]) -> Result<(usize, usize), TupleError> {
    let (mut sp, mut dp) = decode_groups(src, out)?;
    let (slen, dlen) = (src.len(), out.len());
    // The tail, checking every item against both ends.
    while sp < slen && dp < dlen {
        let mut ctrl = src.get(sp).copied().unwrap_or(0);
        sp += 1;
        for _ in 0..8 {
            if sp >= slen || dp >= dlen {
                break;
            }
            if ctrl & 1 == 0 {
                if let (Some(&b), Some(d)) = (src.get(sp), out.get_mut(dp)) {
                    *d = b;
                }
                sp += 1;
                dp += 1;
            } else {
                let tag_at = sp;
                let (b0, b1) = match (src.get(sp), src.get(sp + 1)) {
                    (Some(&b0), Some(&b1)) => (b0, b1),
                    _ => return Err(corrupt("back-reference runs past the input", tag_at)),
                };
                sp += 2;
                let mut len = usize::from(b0 & 0x0f) + 3;
                let off = usize::from(b0 & 0xf0) << 4 | usize::from(b1);
                if len == 18 {
                    let extra = src
                        .get(sp)
                        .ok_or_else(|| corrupt("back-reference runs past the input", tag_at))?;
                    len += usize::from(*extra);
                    sp += 1;
                }
                if off == 0 || off > dp {
                    return Err(corrupt("back-reference points before the output", tag_at));
                }
                len = len.min(dlen - dp);
                copy_match(out, dp, off, len);
                dp += len;
            }
            ctrl >>= 1;
        }
    }
    Ok((sp, dp))
}

/// Decodes whole control groups while both sides have room for a group's
/// worst case, so no item needs an end check and short copies may write a
/// few bytes past their end (what follows overwrites them; nothing reads
/// output beyond the current end). Returns where it stopped.
fn decode_groups(src: &[u8], out: &mut [u8]) -> Result<(usize, usize), TupleError> {
    let (mut sp, mut dp) = (0usize, 0usize);
    while sp + GROUP_IN <= src.len() && dp + GROUP_OUT <= out.len() {
        let mut ctrl = byte(src, sp)?;
        sp += 1;
        let mut items = 0u32;
        while items < 8 {
            if ctrl & 1 == 0 {
                // A run of literals: copy 8 bytes, keep as many as the run.
                let run = ctrl.trailing_zeros().min(8 - items);
                block_copy::<8>(src, sp, out, dp)?;
                sp += run as usize;
                dp += run as usize;
                items += run;
                ctrl = ctrl.checked_shr(run).unwrap_or(0);
                continue;
            }
            let tag_at = sp;
            let (b0, b1) = (byte(src, sp)?, byte(src, sp + 1)?);
            let mut len = usize::from(b0 & 0x0f) + 3;
            let off = usize::from(b0 & 0xf0) << 4 | usize::from(b1);
            sp += 2;
            if len == 18 {
                len += usize::from(byte(src, sp)?);
                sp += 1;
            }
            if off == 0 || off > dp {
                return Err(corrupt("back-reference points before the output", tag_at));
            }
            if off >= SHORT_COPY && len <= SHORT_COPY {
                let mut chunk = [0u8; SHORT_COPY];
                chunk.copy_from_slice(out.get(dp - off..dp - off + SHORT_COPY).ok_or_else(bound)?);
                out.get_mut(dp..dp + SHORT_COPY)
                    .ok_or_else(bound)?
                    .copy_from_slice(&chunk);
            } else {
                copy_match(out, dp, off, len);
            }
            dp += len;
            items += 1;
            ctrl >>= 1;
        }
    }
    Ok((sp, dp))
}

/// The error for a bound the group decoder established beforehand; never
/// expected to happen.
fn bound() -> TupleError {
    TupleError::new(TupleErrorKind::CorruptPglz {
        reason: "decoder bound violated",
    })
}

#[inline(always)]
fn byte(src: &[u8], at: usize) -> Result<u8, TupleError> {
    src.get(at).copied().ok_or_else(bound)
}

/// Copies `N` bytes from `src[sp..]` to `out[dp..]`.
#[inline(always)]
fn block_copy<const N: usize>(
    src: &[u8],
    sp: usize,
    out: &mut [u8],
    dp: usize,
) -> Result<(), TupleError> {
    let s = src.get(sp..sp + N).ok_or_else(bound)?;
    out.get_mut(dp..dp + N)
        .ok_or_else(bound)?
        .copy_from_slice(s);
    Ok(())
}

/// Appends `len` bytes at `dp` copied from `off` bytes back, byte by byte in
/// effect (so an overlapping copy repeats the last `off` bytes). The caller
/// guarantees `0 < off <= dp` and `dp + len <= out.len()`.
#[inline]
fn copy_match(out: &mut [u8], dp: usize, off: usize, len: usize) {
    let start = dp - off;
    if off >= len {
        out.copy_within(start..start + len, dp);
    } else if off == 1 {
        let b = out.get(start).copied().unwrap_or(0);
        if let Some(d) = out.get_mut(dp..dp + len) {
            d.fill(b);
        }
    } else {
        // The output is periodic with period `off` from `start` on: copy
        // whole periods from `start`, doubling the chunk each time.
        let mut done = 0;
        while done < len {
            let n = (len - done).min(done + off);
            out.copy_within(start..start + n, dp + done);
            done += n;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
