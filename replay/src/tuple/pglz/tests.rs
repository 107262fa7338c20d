//! pglz decoder tests: a value compressed by PostgreSQL, round trips through
//! a naive test-only compressor, corruption and arbitrary input.

use proptest::prelude::*;

use super::decompress;
use crate::tuple::error::TupleErrorKind;

/// Lower-case hex to bytes (test data only).
pub(crate) fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// The text stored by
/// `'PostgreSQL ' || md5('a') || repeat('ab', 40) || md5('b') || repeat('x', 1700) ||
///  'PostgreSQL ' || md5('a') || repeat('0123456789', 30) || repeat(md5('c'), 4) || ' tail'`.
pub(crate) fn sample_text() -> Vec<u8> {
    let (a, b, c) = (
        "0cc175b9c0f1b6a831c399e269772661",
        "92eb5ffee6ae2fec3ad71c777531578f",
        "4a8a08f09d37b73795649038408b5f33",
    );
    format!(
        "PostgreSQL {a}{}{b}{}PostgreSQL {a}{}{} tail",
        "ab".repeat(40),
        "x".repeat(1700),
        "0123456789".repeat(30),
        c.repeat(4)
    )
    .into_bytes()
}

/// The varlena PostgreSQL 15 stored for [`sample_text`] in a pglz-compressed
/// `text` column: 4-byte header, `va_tcinfo`, stream. Produced with
///
/// ```sql
/// CREATE EXTENSION pageinspect;
/// CREATE TABLE s (id int, v text) WITH (toast_tuple_target = 128);
/// ALTER TABLE s ALTER COLUMN v SET STORAGE MAIN;
/// INSERT INTO s VALUES (1, <the expression of sample_text>);
/// SELECT t_attrs[2] FROM heap_page_item_attrs(get_raw_page('s', 0), 's'::regclass);
/// ```
///
/// (the value must exceed the 2032-byte threshold for compression to be
/// tried; the low target keeps the compressed value inline).
pub(crate) const PG_PGLZ_SAMPLE: &str = "ea0200001b09000000506f73746772655300514c2030636331370035623963306631620036613833316333390039653236393737322036363161620f023c393200656235666665653600616532666563336100643731633737373580333135373866780f01ff7f0f01ff0f01ff0f01ff0f01ff0f01ff0f012b7f3f193000313233343536373806390f0aff0e0a3461386130003866303964333762003733373935363439003033383430386235086633330f204e20746169006c";

/// The same value stored the same way in a column declared
/// `v text COMPRESSION lz4`.
pub(crate) const PG_LZ4_SAMPLE: &str = "920200001b090040ff1e506f737467726553514c203063633137356239633066316236613833316333393965323639373732363631616202003bff123932656235666665653661653266656333616437316337373735333135373866780100ffffffffffff960f3f0718af303132333435363738390a00ff10ff11346138613038663039643337623733373935363439303338343038623566333320004d50207461696c";

/// A greedy pglz compressor for tests: longest match within the 4095-byte
/// window, overlapping matches allowed, 3-byte tags for long matches.
fn compress(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let ctrl_at = out.len();
        out.push(0u8);
        for bit in 0..8 {
            if i >= input.len() {
                break;
            }
            let (mut best_len, mut best_off) = (0, 0);
            for off in 1..=i.min(4095) {
                let mut l = 0;
                while l < 273 && i + l < input.len() && input[i + l] == input[i + l - off] {
                    l += 1;
                }
                if l > best_len {
                    (best_len, best_off) = (l, off);
                }
            }
            if best_len >= 3 {
                out[ctrl_at] |= 1 << bit;
                let hi = ((best_off >> 4) & 0xf0) as u8;
                if best_len >= 18 {
                    out.extend([hi | 0x0f, best_off as u8, (best_len - 18) as u8]);
                } else {
                    out.extend([hi | (best_len - 3) as u8, best_off as u8]);
                }
                i += best_len;
            } else {
                out.push(input[i]);
                i += 1;
            }
        }
    }
    out
}

#[test]
fn decodes_a_value_compressed_by_postgres() {
    let v = hex(PG_PGLZ_SAMPLE);
    let raw_size = u32::from_le_bytes(v[4..8].try_into().unwrap()) & 0x3fff_ffff;
    assert_eq!(v[4..8][3] >> 6, 0, "method pglz");
    let out = decompress(&v[8..], raw_size as usize).unwrap();
    assert_eq!(out, sample_text());
}

#[test]
fn every_truncation_is_an_error() {
    let v = hex(PG_PGLZ_SAMPLE);
    let raw = sample_text();
    for cut in 0..v.len() - 8 {
        assert!(
            decompress(&v[8..8 + cut], raw.len()).is_err(),
            "cut at {cut}"
        );
    }
}

#[test]
fn strict_completeness() {
    let v = hex(PG_PGLZ_SAMPLE);
    let raw = sample_text();
    // Asking for less output leaves input unread.
    let e = decompress(&v[8..], raw.len() - 1).unwrap_err();
    assert!(matches!(e.kind, TupleErrorKind::CorruptPglz { .. }));
    // Extra input after the end.
    let mut longer = v[8..].to_vec();
    longer.push(b'!');
    assert!(decompress(&longer, raw.len()).is_err());
    // An implausible size is refused before allocating.
    let e = decompress(&v[8..], 1 << 30).unwrap_err();
    assert!(matches!(e.kind, TupleErrorKind::DecompressedSize { .. }));
}

#[test]
fn bad_back_references() {
    // Control byte: first item is a match, but nothing has been produced yet.
    let e = decompress(&[0x01, 0x00, 0x01], 3).unwrap_err();
    assert!(matches!(e.kind, TupleErrorKind::CorruptPglz { .. }));
    assert_eq!(e.offset, Some(1));
    // Offset 0.
    assert!(decompress(&[0x02, b'a', 0x00, 0x00], 4).is_err());
    // Offset 2 with only one byte produced.
    assert!(decompress(&[0x02, b'a', 0x00, 0x02], 4).is_err());
    // A length-18 tag missing its third byte.
    assert!(decompress(&[0x02, b'a', 0x0f, 0x01], 40).is_err());
}

#[test]
fn overlapping_and_long_matches() {
    // "a" then a 3-byte tag: offset 1, length 18 + 255 = 273.
    let out = decompress(&[0x02, b'a', 0x0f, 0x01, 0xff], 274).unwrap();
    assert_eq!(out, vec![b'a'; 274]);
    // "abc" then offset 3, length 10: pattern repeats.
    let out = decompress(&[0x08, b'a', b'b', b'c', 0x07, 0x03], 13).unwrap();
    assert_eq!(out, b"abcabcabcabca");
    // A match longer than the remaining output is clamped.
    let out = decompress(&[0x02, b'z', 0x0f, 0x01, 0x00], 5).unwrap();
    assert_eq!(out, b"zzzzz");
}

#[test]
fn round_trips_through_the_test_compressor() {
    let raw = sample_text();
    let packed = compress(&raw);
    assert_eq!(decompress(&packed, raw.len()).unwrap(), raw);
    assert!(decompress(&[], 0).unwrap().is_empty());
}

#[test]
fn long_mixed_stream() {
    // Longer than a group's worst-case output many times over, with literal
    // runs of every length, short and long, near and overlapping matches.
    let mut raw = Vec::new();
    let mut x = 0x2545_f491_u32;
    while raw.len() < 12_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        match x % 4 {
            0 => raw.extend((0..x % 9).map(|i| b'a' + ((x >> i) % 26) as u8)),
            1 if raw.len() > 40 => {
                let from = raw.len() - 1 - (x as usize >> 8) % raw.len().min(4000);
                let n = 3 + (x as usize >> 4) % 40;
                for i in 0..n {
                    raw.push(raw[from + i]);
                }
            }
            2 => raw.extend(std::iter::repeat_n(b'-', (x % 300) as usize)),
            _ => raw.extend(b"0123456789".iter().cycle().take((x % 25) as usize)),
        }
    }
    let packed = compress(&raw);
    assert_eq!(decompress(&packed, raw.len()).unwrap(), raw);
}

fn patterned() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        (prop::collection::vec(any::<u8>(), 1..12), 1usize..60),
        0..40,
    )
    .prop_map(|runs| runs.into_iter().flat_map(|(p, n)| p.repeat(n)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn round_trip(raw in patterned()) {
        let packed = compress(&raw);
        prop_assert_eq!(decompress(&packed, raw.len()).unwrap(), raw);
    }

    #[test]
    fn arbitrary_input_never_panics(src in prop::collection::vec(any::<u8>(), 0..600), raw_size in 0usize..5000) {
        let _ = decompress(&src, raw_size);
    }
}
