//! inet and cidr.
//!
//! The payload is a family byte (2 for IPv4, 3 for IPv6: PostgreSQL's own
//! numbering, not the operating system's), the netmask length in bits, then
//! the 4 or 16 address bytes. IPv6 addresses print in the compressed form:
//! the longest run of two or more zero groups (the first such run on a tie)
//! becomes `::`, and IPv4-mapped or -compatible addresses end in dotted
//! quads. inet prints `/bits` only when it is shorter than the address;
//! cidr always does.

use super::error::{malformed, TypeError};
use super::push::{push_hex, push_u64};

const FAMILY_V4: u8 = 2;
const FAMILY_V6: u8 = 3;

/// `inet_out` (`cidr` false) and `cidr_out` (`cidr` true).
pub(super) fn inet_out(
    oid: u32,
    datum: &[u8],
    cidr: bool,
    out: &mut String,
) -> Result<(), TypeError> {
    let (&family, rest) = datum
        .split_first()
        .ok_or_else(|| malformed(oid, 0, "value is truncated"))?;
    let (&bits, addr) = rest
        .split_first()
        .ok_or_else(|| malformed(oid, 1, "value is truncated"))?;
    let full = match (family, addr.len()) {
        (FAMILY_V4, 4) => {
            for (i, b) in addr.iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_u64(out, u64::from(*b));
            }
            32
        }
        (FAMILY_V6, 16) => {
            let mut words = [0u16; 8];
            for (w, pair) in words.iter_mut().zip(addr.chunks_exact(2)) {
                *w = u16::from_be_bytes([pair[0], pair[1]]);
            }
            push_v6(out, &words, addr);
            128
        }
        (FAMILY_V4 | FAMILY_V6, _) => {
            return Err(malformed(oid, 2, "address length does not match family"))
        }
        _ => return Err(malformed(oid, 0, "unknown address family")),
    };
    if bits > full {
        return Err(malformed(oid, 1, "netmask longer than the address"));
    }
    if cidr || bits != full {
        out.push('/');
        push_u64(out, u64::from(bits));
    }
    Ok(())
}

/// The compressed text of an IPv6 address given as eight 16-bit groups (and
/// its 16 bytes, for a trailing dotted quad).
fn push_v6(out: &mut String, words: &[u16; 8], bytes: &[u8]) {
    // The longest run of zero groups; ties keep the earliest.
    let (mut best_start, mut best_len) = (0usize, 0usize);
    let mut i = 0;
    while i < 8 {
        if words[i] == 0 {
            let start = i;
            while i < 8 && words[i] == 0 {
                i += 1;
            }
            if i - start > best_len {
                best_start = start;
                best_len = i - start;
            }
        } else {
            i += 1;
        }
    }
    let run = if best_len >= 2 {
        Some(best_start..best_start + best_len)
    } else {
        None
    };
    for (i, &w) in words.iter().enumerate() {
        if let Some(r) = &run {
            if r.contains(&i) {
                if i == r.start {
                    out.push(':');
                }
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        // An IPv4-compatible (::a.b.c.d) or IPv4-mapped (::ffff:a.b.c.d)
        // address ends in a dotted quad.
        let embeds_v4 =
            i == 6 && best_start == 0 && (best_len == 6 || (best_len == 5 && words[5] == 0xffff));
        if embeds_v4 && run.is_some() {
            for (k, b) in bytes.iter().skip(12).enumerate() {
                if k > 0 {
                    out.push('.');
                }
                push_u64(out, u64::from(*b));
            }
            return;
        }
        push_hex(out, u32::from(w));
    }
    if let Some(r) = &run {
        if r.end == 8 {
            out.push(':');
        }
    }
}
