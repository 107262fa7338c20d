//! Appending numbers to a `String` without going through `fmt`.

/// Appends `v` in decimal.
pub(super) fn push_u64(out: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    push_ascii(out, &buf[i..]);
}

/// Appends `v` in decimal with a leading `-` when negative.
pub(super) fn push_i64(out: &mut String, v: i64) {
    if v < 0 {
        out.push('-');
    }
    push_u64(out, v.unsigned_abs());
}

/// Appends `v` in decimal, left-padded with zeros to at least `width` digits.
pub(super) fn push_padded(out: &mut String, v: u64, width: usize) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut rest = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let digits = buf.len() - i;
    for _ in digits..width {
        out.push('0');
    }
    push_ascii(out, &buf[i..]);
}

/// Appends two digits, `00` to `99`.
pub(super) fn push_2(out: &mut String, v: u32) {
    out.push(char::from(b'0' + (v / 10 % 10) as u8));
    out.push(char::from(b'0' + (v % 10) as u8));
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Appends a byte as two lower-case hex digits.
pub(super) fn push_hex_byte(out: &mut String, b: u8) {
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0x0f)]));
}

/// Appends `v` in lower-case hex without leading zeros.
pub(super) fn push_hex(out: &mut String, v: u32) {
    push_hex_digits(out, v, HEX);
}

/// Appends `v` in upper-case hex without leading zeros (`%X`).
pub(super) fn push_hex_upper(out: &mut String, v: u32) {
    push_hex_digits(out, v, HEX_UPPER);
}

fn push_hex_digits(out: &mut String, v: u32, digits: &[u8; 16]) {
    let mut started = false;
    for shift in (0..8).rev() {
        let nibble = (v >> (shift * 4)) & 0x0f;
        if nibble != 0 || started || shift == 0 {
            started = true;
            out.push(char::from(digits[nibble as usize]));
        }
    }
}

/// Double-quotes the text appended to `out` since `start` when it is empty
/// or holds one of `specials` or ASCII white space, doubling `"` and `\`
/// inside the quotes: how `record_out` and `range_out` quote a field.
pub(super) fn quote_doubling(out: &mut String, start: usize, specials: &[u8]) {
    let text = out.get(start..).unwrap_or_default();
    let quote = text.is_empty()
        || text.bytes().any(|b| {
            specials.contains(&b) || matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
        });
    if !quote {
        return;
    }
    let text = text.to_string();
    out.truncate(start);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('"');
}

/// Appends bytes known to be ASCII.
pub(super) fn push_ascii(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(char::from(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        let mut s = String::new();
        push_u64(&mut s, 0);
        s.push(' ');
        push_i64(&mut s, i64::MIN);
        s.push(' ');
        push_u64(&mut s, u64::MAX);
        s.push(' ');
        push_padded(&mut s, 7, 4);
        s.push(' ');
        push_padded(&mut s, 123456, 4);
        s.push(' ');
        push_2(&mut s, 5);
        s.push(' ');
        push_hex(&mut s, 0);
        push_hex(&mut s, 0xab0);
        s.push(' ');
        push_hex_byte(&mut s, 0x0f);
        s.push(' ');
        push_hex_upper(&mut s, 0);
        push_hex_upper(&mut s, 0xab0);
        push_hex_upper(&mut s, u32::MAX);
        assert_eq!(
            s,
            "0 -9223372036854775808 18446744073709551615 0007 123456 05 0ab0 0f 0AB0FFFFFFFF"
        );
    }
}
