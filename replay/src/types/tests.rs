//! Robustness and API tests of datum output. Exact output is checked against
//! PostgreSQL-produced vectors in `vectors.rs` and against a live server in
//! the crate's `types_oracle` integration test.

use std::collections::HashMap;

use proptest::prelude::*;

use super::vectors::{load, payload, type_of};
use super::{output, output_into, Align, BaseType, Dialect, TypeError, TypeInfo};
use crate::wal::PgMajor;

/// Every kind of type the module handles, and some it does not.
fn all_types() -> Vec<TypeInfo> {
    let mut types = Vec::new();
    for base in BaseType::ALL {
        types.push(TypeInfo::base(base));
        types.push(TypeInfo::builtin(base.array_oid()).expect("array"));
    }
    let labels = HashMap::from([(1u32, "a".to_string()), (2u32, "b c".to_string())]);
    let en = TypeInfo::enum_type(70000, labels);
    types.push(TypeInfo::array_of(70001, en.clone(), b','));
    types.push(en);
    let dom = TypeInfo::domain(70002, TypeInfo::base(BaseType::Numeric));
    types.push(TypeInfo::array_of(70003, dom.clone(), b','));
    types.push(dom);
    let dom_arr = TypeInfo::domain(70004, TypeInfo::builtin(1016).expect("int8[]"));
    types.push(TypeInfo::array_of(70005, dom_arr.clone(), b';'));
    types.push(dom_arr);
    for oid in [3904, 3905, 4451, 6150, 3906, 4532, 3908, 4533, 3926, 4536] {
        types.push(TypeInfo::builtin(oid).expect("built-in range"));
    }
    let textrange = TypeInfo::range_of(70006, TypeInfo::base(BaseType::Text));
    types.push(TypeInfo::multirange_of(70007, textrange.clone()));
    let comp = TypeInfo::composite(
        70008,
        vec![
            super::Field::of(TypeInfo::base(BaseType::Int8)),
            super::Field::dropped(-1, false, Align::Int),
            super::Field::of(textrange.clone()),
            super::Field::of(TypeInfo::base(BaseType::Text)),
        ],
    );
    types.push(TypeInfo::array_of(70009, comp.clone(), b','));
    types.push(comp);
    types.push(textrange);
    let odd = TypeInfo::unsupported(2205, 4, true, Align::Int, Some("regclass".into()));
    types.push(TypeInfo::array_of(2210, odd.clone(), b','));
    types.push(odd);
    types
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        for ty in all_types() {
            let mut out = String::from("x");
            if output_into(&ty, &bytes, Dialect::default(), &mut out).is_err() {
                prop_assert_eq!(&out, "x");
            }
        }
    }

    #[test]
    fn mutated_vectors_never_panic(
        pick in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let (enums, vectors) = load();
        let v = &vectors[pick.index(vectors.len())];
        let ty = type_of(&v.spec, &enums);
        let (datum, _) = payload(&ty, &v.stored);
        let mut bytes = datum.to_vec();
        if !bytes.is_empty() {
            for (at, value) in &edits {
                let i = at.index(bytes.len());
                bytes[i] = *value;
            }
        }
        if truncate && !bytes.is_empty() {
            bytes.truncate(cut.index(bytes.len()));
        }
        let _ = output(&ty, &bytes);
    }
}

/// Array header with the given dimensions, element type and data offset, as
/// payload bytes (without the varlena header).
pub(super) fn array_header(ndim: i32, data_offset: i32, elem: u32, dims: &[(i32, i32)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&ndim.to_le_bytes());
    b.extend_from_slice(&data_offset.to_le_bytes());
    b.extend_from_slice(&elem.to_le_bytes());
    for (len, _) in dims {
        b.extend_from_slice(&len.to_le_bytes());
    }
    for (_, lb) in dims {
        b.extend_from_slice(&lb.to_le_bytes());
    }
    b
}

#[test]
fn unsupported_types_are_named() {
    let odd = TypeInfo::unsupported(2205, 4, true, Align::Int, Some("regclass".into()));
    assert_eq!(
        output(&odd, b"x"),
        Err(TypeError::Unsupported {
            oid: 2205,
            name: Some("regclass".into())
        })
    );
    // An array over an unsupported element fails even when empty.
    let arr = TypeInfo::array_of(2210, odd, b',');
    let empty = array_header(0, 0, 2205, &[]);
    assert!(matches!(
        output(&arr, &empty),
        Err(TypeError::Unsupported { oid: 2205, .. })
    ));
    let through_domain =
        TypeInfo::domain(1, TypeInfo::unsupported(1033, 12, false, Align::Int, None));
    assert!(matches!(
        output(&through_domain, b""),
        Err(TypeError::Unsupported {
            oid: 1033,
            name: None
        })
    ));
}

#[test]
fn unknown_enum_value_is_reported() {
    let en = TypeInfo::enum_type(500, HashMap::from([(7, "seven".to_string())]));
    assert_eq!(output(&en, &7u32.to_le_bytes()).as_deref(), Ok("seven"));
    assert_eq!(
        output(&en, &8u32.to_le_bytes()),
        Err(TypeError::UnknownEnumValue {
            type_oid: 500,
            value_oid: 8
        })
    );
}

#[test]
fn malformed_values_are_errors() {
    let int4 = TypeInfo::base(BaseType::Int4);
    assert!(matches!(
        output(&int4, &[1, 2, 3]),
        Err(TypeError::Malformed { oid: 23, .. })
    ));
    let text = TypeInfo::base(BaseType::Text);
    assert!(matches!(
        output(&text, &[0xff]),
        Err(TypeError::Malformed { oid: 25, .. })
    ));
    // int4[] claiming the wrong element type.
    let arr = TypeInfo::builtin(1007).expect("int4[]");
    let mut bytes = array_header(1, 0, 20, &[(1, 1)]);
    bytes.extend_from_slice(&[0, 0, 0, 0, 5, 0, 0, 0]);
    assert!(matches!(
        output(&arr, &bytes),
        Err(TypeError::Malformed { .. })
    ));
    // A billion elements claimed, a handful of bytes present: fails fast.
    let mut bytes = array_header(1, 0, 23, &[(1_000_000_000, 1)]);
    bytes.extend_from_slice(&[0; 12]);
    assert!(matches!(
        output(&arr, &bytes),
        Err(TypeError::Malformed { .. })
    ));
}

#[test]
fn pg_lsn_prints_upper_case_hex_halves() {
    let lsn = TypeInfo::base(BaseType::PgLsn);
    let print = |v: u64| output(&lsn, &v.to_le_bytes());
    assert_eq!(print(0).as_deref(), Ok("0/0"));
    assert_eq!(print(0x0000_0001_0000_0000).as_deref(), Ok("1/0"));
    assert_eq!(print(0x0000_001a_0000_0b0c).as_deref(), Ok("1A/B0C"));
    assert_eq!(print(0x0000_0000_016b_3748).as_deref(), Ok("0/16B3748"));
    assert_eq!(print(u64::MAX).as_deref(), Ok("FFFFFFFF/FFFFFFFF"));
    assert!(matches!(
        output(&lsn, &[0; 4]),
        Err(TypeError::Malformed { oid: 3220, .. })
    ));

    // pg_lsn[]: 8-byte elements, aligned like int8's.
    let arr = TypeInfo::builtin(3221).expect("pg_lsn[]");
    let mut bytes = array_header(1, 0, 3220, &[(2, 1)]);
    bytes.extend_from_slice(&0x0000_000a_0000_000bu64.to_le_bytes());
    bytes.extend_from_slice(&0x0000_0000_0000_0001u64.to_le_bytes());
    assert_eq!(output(&arr, &bytes).as_deref(), Ok("{A/B,0/1}"));
}

#[test]
fn deep_jsonb_nesting_does_not_recurse() {
    // 100000 nested one-element arrays: `[[[…]]]`, built the way jsonb lays
    // them out (each level a container entry padded to 4 bytes).
    const DEPTH: usize = 100_000;
    let mut inner = Vec::with_capacity(8 * DEPTH + 4);
    for level in 0..DEPTH {
        let rest = 8 * (DEPTH - level - 1) + 4;
        inner.extend_from_slice(&0x4000_0001u32.to_le_bytes());
        inner.extend_from_slice(&(0x5000_0000u32 | rest as u32).to_le_bytes());
    }
    inner.extend_from_slice(&0x4000_0000u32.to_le_bytes()); // innermost: []
    let text = output(&TypeInfo::base(BaseType::Jsonb), &inner).expect("deep jsonb");
    assert_eq!(text.len(), 2 * (DEPTH + 1));
}

/// Rough throughput of the common types; run with `cargo test --release
/// -p walfill-replay --lib types::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore = "timing, not a check"]
fn throughput() {
    const FORTY_INT4: &str = "(SELECT array_agg(CASE WHEN i % 3 = 0 THEN NULL ELSE i END) \
                              FROM generate_series(1, 40) i)";
    let (enums, vectors) = load();
    let pick = |spec: &str, expr: &str| {
        let v = vectors
            .iter()
            .find(|v| v.spec == spec && v.expr == expr)
            .expect("vector");
        let ty = type_of(&v.spec, &enums);
        let datum = payload(&ty, &v.stored).0.to_vec();
        (ty, datum)
    };
    let cases = [
        ("int4", pick("b:23", "-2147483648")),
        ("numeric 123.45", pick("b:1700", "'123.45'")),
        (
            "numeric 40 digits",
            pick("b:1700", "'99999999999999999999.99999999999999999999'"),
        ),
        (
            "timestamptz",
            pick("b:1184", "'2020-06-01 12:00:00.654321+05:30'"),
        ),
        ("text 5 bytes", pick("b:25", "'hello'")),
        ("float8", pick("b:701", "'0.30000000000000004'")),
        (
            "jsonb nested",
            pick("b:3802", "'{\"a\": {\"b\": {\"c\": [1, {\"d\": null}]}}}'"),
        ),
        ("int4[] 40 items", pick("b:1007", FORTY_INT4)),
    ];
    const N: u32 = 2_000_000;
    let mut out = String::with_capacity(256);
    for (name, (ty, datum)) in &cases {
        let start = std::time::Instant::now();
        for _ in 0..N {
            out.clear();
            output_into(
                ty,
                std::hint::black_box(datum),
                Dialect::default(),
                &mut out,
            )
            .expect("output");
        }
        let reuse = f64::from(N) / start.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        for _ in 0..N {
            std::hint::black_box(output(ty, std::hint::black_box(datum)).expect("output"));
        }
        let fresh = f64::from(N) / start.elapsed().as_secs_f64();
        eprintln!(
            "{name:>20}: {:>6.1} M values/s into a reused buffer, {:>6.1} M/s allocating",
            reuse / 1e6,
            fresh / 1e6
        );
    }
}

#[test]
fn intervals_have_infinities_from_postgresql_17() {
    let interval = TypeInfo::base(BaseType::Interval);
    let extreme = |time: i64, days: i32, months: i32| {
        [
            &time.to_le_bytes()[..],
            &days.to_le_bytes(),
            &months.to_le_bytes(),
        ]
        .concat()
    };
    let print = |datum: &[u8], major| {
        let mut out = String::new();
        output_into(&interval, datum, Dialect::of(major), &mut out).unwrap();
        out
    };
    let max = extreme(i64::MAX, i32::MAX, i32::MAX);
    let min = extreme(i64::MIN, i32::MIN, i32::MIN);
    for major in [PgMajor::Pg15, PgMajor::Pg16] {
        assert_eq!(
            print(&max, major),
            "178956970 years 7 mons 2147483647 days 2562047788:00:54.775807"
        );
        assert!(print(&min, major).starts_with("-178956970 years"));
    }
    for major in [PgMajor::Pg17, PgMajor::Pg18] {
        assert_eq!(print(&max, major), "infinity");
        assert_eq!(print(&min, major), "-infinity");
        // One field short of the extreme is an ordinary interval.
        assert!(print(&extreme(i64::MAX, i32::MAX, 0), major).contains("days"));
    }
}
