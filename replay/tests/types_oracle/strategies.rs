//! Random values for the oracle test, as bytes of a query parameter in
//! PostgreSQL's *binary* format (big-endian, what the type's receive function
//! reads). Text-like values are UTF-8 text parameters that the query casts
//! to the column type, so the server's input functions do the parsing.

use proptest::collection::vec;
use proptest::prelude::*;

/// A strategy yielding one encoded parameter.
pub(crate) type Param = BoxedStrategy<Vec<u8>>;

/// Lowest valid timestamp (4714-11-24 00:00:00 BC) and the first invalid
/// one past the top (294277-01-01), in microseconds from 2000-01-01.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// Valid dates: days from 2000-01-01.
const MIN_DATE: i32 = -2_451_545;
const END_DATE: i32 = 2_145_031_949;
const USECS_PER_DAY: i64 = 86_400_000_000;

pub(crate) fn boolean() -> Param {
    any::<bool>().prop_map(|b| vec![u8::from(b)]).boxed()
}

pub(crate) fn int2() -> Param {
    prop_oneof![Just(i16::MIN), Just(i16::MAX), Just(0), any::<i16>()]
        .prop_map(|v| v.to_be_bytes().to_vec())
        .boxed()
}

pub(crate) fn int4() -> Param {
    prop_oneof![Just(i32::MIN), Just(i32::MAX), -1000..1000i32, any::<i32>()]
        .prop_map(|v| v.to_be_bytes().to_vec())
        .boxed()
}

pub(crate) fn int8() -> Param {
    prop_oneof![Just(i64::MIN), Just(i64::MAX), -1000..1000i64, any::<i64>()]
        .prop_map(|v| v.to_be_bytes().to_vec())
        .boxed()
}

pub(crate) fn oid() -> Param {
    prop_oneof![Just(u32::MAX), Just(0), any::<u32>()]
        .prop_map(|v| v.to_be_bytes().to_vec())
        .boxed()
}

/// WAL positions: both halves at their ends, small offsets, any value.
pub(crate) fn pg_lsn() -> Param {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        0..0x1_0000_0000u64,
        (0..0x100u64, any::<u32>()).prop_map(|(hi, lo)| hi << 32 | u64::from(lo)),
        any::<u64>(),
    ]
    .prop_map(|v| v.to_be_bytes().to_vec())
    .boxed()
}

pub(crate) fn positive_int4() -> Param {
    (1..=i32::MAX)
        .prop_map(|v| v.to_be_bytes().to_vec())
        .boxed()
}

pub(crate) fn float4() -> Param {
    prop_oneof![
        3 => any::<u32>(),
        1 => 0u32..0x0080_0000, // subnormals
        1 => prop::sample::select(vec![0x8000_0000u32, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0x7f7f_ffff]),
        3 => (any::<i32>(), 0..12i32).prop_map(|(m, k)| (m as f32 / 10f32.powi(k)).to_bits()),
        2 => (-99999..99999i32, -12..12i32).prop_map(|(m, k)| (m as f32 * 10f32.powi(k)).to_bits()),
    ]
    .prop_map(|bits| bits.to_be_bytes().to_vec())
    .boxed()
}

pub(crate) fn float8() -> Param {
    prop_oneof![
        3 => any::<u64>(),
        1 => 0u64..0x0010_0000_0000_0000, // subnormals
        1 => prop::sample::select(vec![
            0x8000_0000_0000_0000u64, 0x7ff0_0000_0000_0000, 0xfff0_0000_0000_0000,
            0x7ff8_0000_0000_0000, 0x7fef_ffff_ffff_ffff, 1,
        ]),
        3 => (any::<i64>(), 0..20i32).prop_map(|(m, k)| (m as f64 / 10f64.powi(k)).to_bits()),
        2 => (-9_999_999..9_999_999i64, -20..20i32).prop_map(|(m, k)| (m as f64 * 10f64.powi(k)).to_bits()),
    ]
    .prop_map(|bits| bits.to_be_bytes().to_vec())
    .boxed()
}

/// numeric literals: specials, plain decimals of random scale, exponents.
pub(crate) fn numeric() -> Param {
    prop_oneof![
        1 => prop::sample::select(vec!["NaN", "Infinity", "-Infinity", "0", "-0", "0.0000"])
            .prop_map(str::to_string),
        6 => "-?[0-9]{1,30}(\\.[0-9]{0,30})?",
        3 => "-?[0-9]{1,12}(\\.[0-9]{0,12})?e-?[0-9]{1,3}",
        1 => "-?0\\.0{0,40}[1-9]{1,3}",
    ]
    .prop_map(String::into_bytes)
    .boxed()
}

fn text_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('a', 'z'),
        3 => prop::sample::select(vec![
            ' ', '"', '\\', '{', '}', ',', '\t', '\n', '\r', '\x0b', '\x0c', '\'', '[', ']', ':',
            '=', 'N', 'U', 'L', 'é', '✓', '😀', '\x01', '\x7f',
        ]),
        1 => any::<char>().prop_filter("no NUL", |c| *c != '\0'),
    ]
}

/// Text with quotes, backslashes, braces, white space and non-ASCII.
pub(crate) fn text(max_chars: usize) -> Param {
    prop_oneof![
        1 => prop::sample::select(vec!["", "NULL", "null", "NuLl", " NULL"]).prop_map(str::to_string),
        8 => vec(text_char(), 0..max_chars).prop_map(|cs| cs.into_iter().collect::<String>()),
    ]
    .prop_map(String::into_bytes)
    .boxed()
}

pub(crate) fn char_byte() -> Param {
    any::<u8>().prop_map(|b| vec![b]).boxed()
}

pub(crate) fn bytea() -> Param {
    vec(any::<u8>(), 0..40).boxed()
}

pub(crate) fn date() -> Param {
    prop_oneof![
        Just(i32::MIN),
        Just(i32::MAX),
        Just(MIN_DATE),
        Just(END_DATE - 1),
        MIN_DATE..END_DATE,
        -800_000..800_000i32,
    ]
    .prop_map(|d| d.to_be_bytes().to_vec())
    .boxed()
}

fn time_of_day() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(USECS_PER_DAY),
        0..=USECS_PER_DAY,
        (0..86_400i64).prop_map(|s| s * 1_000_000),
        (0..864_000i64).prop_map(|s| s * 100_000),
    ]
}

pub(crate) fn time() -> Param {
    time_of_day().prop_map(|t| t.to_be_bytes().to_vec()).boxed()
}

pub(crate) fn timetz() -> Param {
    let zone = prop_oneof![
        -57_599..=57_599i32,
        (-63..=63i32).prop_map(|q| q * 900),
        Just(0),
    ];
    (time_of_day(), zone)
        .prop_map(|(t, z)| {
            let mut b = t.to_be_bytes().to_vec();
            b.extend_from_slice(&z.to_be_bytes());
            b
        })
        .boxed()
}

pub(crate) fn timestamp() -> Param {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(MIN_TIMESTAMP),
        Just(END_TIMESTAMP - 1),
        MIN_TIMESTAMP..END_TIMESTAMP,
        (i64::from(MIN_DATE)..4_000_000i64, time_of_day())
            .prop_map(|(d, t)| d * USECS_PER_DAY + t.min(USECS_PER_DAY - 1)),
        (-100_000_000_000i64..100_000_000_000).prop_map(|s| s * 1_000_000),
    ]
    .prop_map(|t| t.to_be_bytes().to_vec())
    .boxed()
}

pub(crate) fn interval() -> Param {
    let time = prop_oneof![
        any::<i64>(),
        -200 * USECS_PER_DAY..200 * USECS_PER_DAY,
        (-100_000i64..100_000).prop_map(|s| s * 1_000_000),
        Just(0),
    ];
    let days = prop_oneof![any::<i32>(), -1000..1000i32, Just(0)];
    let months = prop_oneof![any::<i32>(), -100..100i32, Just(0)];
    (time, days, months)
        .prop_map(|(t, d, m)| {
            let mut b = t.to_be_bytes().to_vec();
            b.extend_from_slice(&d.to_be_bytes());
            b.extend_from_slice(&m.to_be_bytes());
            b
        })
        .boxed()
}

pub(crate) fn fixed_bytes(n: usize) -> Param {
    vec(any::<u8>(), n).boxed()
}

pub(crate) fn money() -> Param {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        -1_000_000..1_000_000i64,
        any::<i64>()
    ]
    .prop_map(|v| v.to_be_bytes().to_vec())
    .boxed()
}

/// inet (`cidr` false) or cidr (true) in binary form: family, bits, is_cidr,
/// address length, address. IPv6 groups are often zero (or ffff) so that
/// zero compression and embedded IPv4 forms come up.
pub(crate) fn inet(cidr: bool) -> Param {
    let v4 = (vec(any::<u8>(), 4), 0..=32u8).prop_map(|(a, bits)| (2u8, bits, a));
    let group = prop_oneof![3 => Just(0u16), 1 => Just(0xffff), 2 => any::<u16>(), 1 => 1..8u16];
    let v6 = (vec(group, 8), 0..=128u8).prop_map(|(words, bits)| {
        let addr = words
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect::<Vec<u8>>();
        (3u8, bits, addr)
    });
    prop_oneof![v4, v6]
        .prop_map(move |(family, bits, mut addr)| {
            if cidr {
                // A cidr value has no bits set past its netmask.
                for (i, byte) in addr.iter_mut().enumerate() {
                    let keep = (usize::from(bits).saturating_sub(8 * i)).min(8);
                    *byte &= !(0xffu16 >> keep) as u8;
                }
            }
            let mut b = vec![family, bits, u8::from(cidr), addr.len() as u8];
            b.extend_from_slice(&addr);
            b
        })
        .boxed()
}

/// One of a fixed set of texts (enum labels).
pub(crate) fn one_of(labels: Vec<String>) -> Param {
    prop::sample::select(labels)
        .prop_map(String::into_bytes)
        .boxed()
}

fn json_string() -> impl Strategy<Value = String> {
    // Characters, each written plainly or as a \u escape (surrogate pairs
    // for the astral plane); control characters are always escaped.
    let piece = (
        text_char().prop_filter("no NUL", |c| *c != '\0'),
        any::<bool>(),
    )
        .prop_map(|(c, escape)| match c {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            '\n' if !escape => "\\n".to_string(),
            c if escape || (c as u32) < 0x20 => {
                let mut units = [0u16; 2];
                c.encode_utf16(&mut units)
                    .iter()
                    .map(|u| format!("\\u{u:04X}"))
                    .collect()
            }
            c => c.to_string(),
        });
    prop_oneof![
        1 => prop::sample::select(vec!["a", "b", "aa", "", "ключ", "NULL"]).prop_map(str::to_string),
        3 => vec(piece, 0..8).prop_map(|p| p.concat()),
    ]
    .prop_map(|s| format!("\"{s}\""))
}

fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?",
        "-?[1-9][0-9]{0,3}(\\.[0-9]{1,3})?[eE][-+]?[0-9]{1,2}",
    ]
}

/// JSON documents: scalars, nested arrays and objects (with duplicate
/// keys), random white space.
pub(crate) fn json() -> Param {
    let leaf = prop_oneof![
        prop::sample::select(vec!["null", "true", "false"]).prop_map(str::to_string),
        json_number(),
        json_string(),
    ];
    let doc = leaf.prop_recursive(4, 40, 6, |inner| {
        let sep = prop::sample::select(vec![",", ", ", " ,\n"]);
        prop_oneof![
            (vec(inner.clone(), 0..6), sep.clone())
                .prop_map(|(items, sep)| format!("[{}]", items.join(sep))),
            (vec((json_string(), inner), 0..6), sep).prop_map(|(pairs, sep)| {
                let pairs: Vec<String> = pairs
                    .into_iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                format!("{{{}}}", pairs.join(sep))
            }),
        ]
    });
    (doc, prop::sample::select(vec!["", " ", "\n\t"]))
        .prop_map(|(d, ws)| format!("{ws}{d}{ws}").into_bytes())
        .boxed()
}

/// Dates whose successor is a date too (daterange's canonical form adds a
/// day to an exclusive lower or inclusive upper bound).
pub(crate) fn date_for_ranges() -> Param {
    date()
        .prop_filter("last valid date", |d| {
            d.as_slice() != (END_DATE - 1).to_be_bytes()
        })
        .boxed()
}

/// A binary array of `elem_oid` elements drawn from `elem`: empty, or 1 to
/// 3 dimensions with random lower bounds and about one NULL in five.
pub(crate) fn array(elem: Param, elem_oid: u32) -> Param {
    let dims = prop_oneof![
        1 => Just(vec![]),
        5 => (1usize..=6).prop_map(|n| vec![n]),
        3 => (1usize..=3, 1usize..=3).prop_map(|(a, b)| vec![a, b]),
        1 => (1usize..=2, 1usize..=2, 1usize..=2).prop_map(|(a, b, c)| vec![a, b, c]),
    ];
    let bound = prop_oneof![4 => Just(1i32), 1 => -5..=5i32, 1 => any::<i16>().prop_map(i32::from)];
    (dims, vec(bound, 3))
        .prop_flat_map(move |(dims, bounds)| {
            let n = if dims.is_empty() {
                0
            } else {
                dims.iter().product()
            };
            let items = vec(proptest::option::weighted(0.8, elem.clone()), n);
            (Just(dims), Just(bounds), items)
        })
        .prop_map(move |(dims, bounds, items)| {
            let mut b = Vec::new();
            b.extend_from_slice(&(dims.len() as i32).to_be_bytes());
            b.extend_from_slice(&i32::from(items.iter().any(Option::is_none)).to_be_bytes());
            b.extend_from_slice(&elem_oid.to_be_bytes());
            for (d, lb) in dims.iter().zip(&bounds) {
                b.extend_from_slice(&(*d as i32).to_be_bytes());
                b.extend_from_slice(&lb.to_be_bytes());
            }
            for item in &items {
                match item {
                    None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(v) => {
                        b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        b.extend_from_slice(v);
                    }
                }
            }
            b
        })
        .boxed()
}
