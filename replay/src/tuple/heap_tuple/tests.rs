//! Deforming hand-built tuples. The builder below follows the writer's rules
//! (aligned fixed-width values, unaligned 1-byte headers, zero padding), and
//! the live-server test `tests/tuple_oracle.rs` checks the same decoder
//! against tuples PostgreSQL wrote.

use proptest::prelude::*;

use super::*;
use crate::tuple::compress::Compression;
use crate::tuple::schema::{AttrSchema, Storage};
use crate::tuple::varlena::ToastPointer;

fn attr(attnum: i16, len: i16, align: Align) -> AttrSchema {
    AttrSchema {
        name: format!("c{attnum}"),
        attnum,
        type_oid: 0,
        typmod: -1,
        len,
        byval: len > 0 && len <= 8,
        align,
        storage: if len == -1 {
            Storage::Extended
        } else {
            Storage::Plain
        },
        dropped: false,
        missing: None,
        generated: false,
    }
}

fn schema(cols: &[(i16, Align)]) -> RelSchema {
    RelSchema {
        attrs: cols
            .iter()
            .enumerate()
            .map(|(i, &(len, align))| attr(i as i16 + 1, len, align))
            .collect(),
    }
}

/// A value to store, in the form the writer would choose.
#[derive(Clone, Debug)]
enum Val {
    Null,
    Fixed(Vec<u8>),
    /// Payload with a 1-byte header, unaligned.
    Short(Vec<u8>),
    /// Payload with a 4-byte header, aligned.
    Long(Vec<u8>),
    /// An 18-byte TOAST pointer, unaligned.
    Pointer([u8; 18]),
    CStr(Vec<u8>),
}

struct Built {
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    fragment: Vec<u8>,
}

fn pad_to(data: &mut Vec<u8>, align: Align) {
    while data.len() % align.bytes() != 0 {
        data.push(0);
    }
}

fn build(schema: &RelSchema, vals: &[Val]) -> Built {
    let natts = vals.len();
    let has_null = vals.iter().any(|v| matches!(v, Val::Null));
    let bitmap_len = if has_null { natts.div_ceil(8) } else { 0 };
    let hoff = (23 + bitmap_len).div_ceil(8) * 8;
    let mut fragment = vec![0u8; hoff - 23];
    let mut data = Vec::new();
    for (i, v) in vals.iter().enumerate() {
        if !matches!(v, Val::Null) && has_null {
            fragment[i / 8] |= 1 << (i % 8);
        }
        let align = schema.attrs.get(i).map_or(Align::Char, |a| a.align);
        match v {
            Val::Null => {}
            Val::Fixed(b) | Val::CStr(b) => {
                pad_to(&mut data, align);
                data.extend(b);
                if matches!(v, Val::CStr(_)) {
                    data.push(0);
                }
            }
            Val::Short(b) => {
                data.push((((b.len() + 1) as u8) << 1) | 1);
                data.extend(b);
            }
            Val::Long(b) => {
                pad_to(&mut data, align);
                data.extend((((b.len() + 4) as u32) << 2).to_le_bytes());
                data.extend(b);
            }
            Val::Pointer(p) => data.extend(p),
        }
    }
    fragment.extend(data);
    Built {
        infomask2: natts as u16,
        infomask: u16::from(has_null),
        hoff: hoff as u8,
        fragment,
    }
}

fn run<'a>(b: &'a Built, s: &RelSchema) -> Result<Vec<RawDatum<'a>>, TupleError> {
    deform(b.infomask2, b.infomask, b.hoff, &b.fragment, s)
}

fn expect(vals: &[Val]) -> Vec<RawDatum<'_>> {
    vals.iter()
        .map(|v| match v {
            Val::Null => RawDatum::Null,
            Val::Fixed(b) => RawDatum::Fixed(b),
            Val::CStr(b) => RawDatum::CString(b),
            Val::Short(b) | Val::Long(b) => RawDatum::Varlena(Varlena::Plain(b)),
            Val::Pointer(p) => RawDatum::Varlena(super::read_varlena(p, 0).unwrap().0),
        })
        .collect()
}

fn pointer(value_id: u32) -> [u8; 18] {
    let mut p = [0u8; 18];
    p[0] = 0x01;
    p[1] = 18;
    p[2..6].copy_from_slice(&5004i32.to_le_bytes());
    p[6..10].copy_from_slice(&(1200u32 | 1 << 30).to_le_bytes());
    p[10..14].copy_from_slice(&value_id.to_le_bytes());
    p[14..18].copy_from_slice(&16_390u32.to_le_bytes());
    p
}

#[test]
fn null_bitmap_over_two_bytes() {
    let s = schema(&[(4, Align::Int); 10]);
    let vals: Vec<Val> = (0..10u32)
        .map(|i| {
            if i % 3 == 1 {
                Val::Null
            } else {
                Val::Fixed(i.to_le_bytes().to_vec())
            }
        })
        .collect();
    let b = build(&s, &vals);
    assert_eq!(b.hoff, 32, "23 + 2 bitmap bytes, maxaligned");
    assert_eq!(run(&b, &s).unwrap(), expect(&vals));
}

#[test]
fn every_alignment() {
    use Align::*;
    let s = schema(&[
        (1, Char),
        (2, Short),
        (1, Char),
        (4, Int),
        (1, Char),
        (8, Double),
        (1, Char),
        (12, Double),
        (6, Int),
        (16, Char),
        (64, Char),
    ]);
    let vals = vec![
        Val::Fixed(vec![1]),
        Val::Fixed(vec![2, 2]),
        Val::Fixed(vec![3]),
        Val::Fixed(vec![4; 4]),
        Val::Fixed(vec![5]),
        Val::Fixed(vec![6; 8]),
        Val::Fixed(vec![7]),
        Val::Fixed(vec![8; 12]),
        Val::Fixed(vec![9; 6]),
        Val::Fixed(vec![10; 16]),
        Val::Fixed(vec![11; 64]),
    ];
    let b = build(&s, &vals);
    // One byte before the data (t_hoff 24), then the values and their padding.
    let data = [1, 1, 2, 1, 3, 4, 1, 3, 8, 1, 7, 12, 6, 16, 64];
    assert_eq!(b.fragment.len(), 1 + data.iter().sum::<usize>());
    assert_eq!(run(&b, &s).unwrap(), expect(&vals));
}

#[test]
fn short_and_long_varlenas_and_the_pad_byte_peek() {
    use Align::*;
    let s = schema(&[
        (1, Char),
        (-1, Int),
        (1, Char),
        (-1, Int),
        (2, Short),
        (-1, Double),
        (-1, Int),
        (1, Char),
        (-1, Int),
    ]);
    let vals = vec![
        Val::Fixed(vec![1]),
        // Short header right after a 1-byte value: no alignment.
        Val::Short(b"hello".to_vec()),
        Val::Fixed(vec![2]),
        // 4-byte header of total size 64: first byte 0x00, like padding.
        Val::Long(vec![b'a'; 60]),
        Val::Fixed(vec![3, 3]),
        // 8-aligned 4-byte header after padding (an array of doubles).
        Val::Long(vec![b'd'; 300]),
        // Empty value (header 0x03).
        Val::Short(vec![]),
        Val::Fixed(vec![4]),
        // An unaligned TOAST pointer.
        Val::Pointer(pointer(77)),
    ];
    let b = build(&s, &vals);
    let got = run(&b, &s).unwrap();
    assert_eq!(got, expect(&vals));
    let RawDatum::Varlena(Varlena::External(p)) = got[8] else {
        panic!("{:?}", got[8])
    };
    assert_eq!(
        p,
        ToastPointer {
            raw_size: 5004,
            ext_size: 1200,
            compression: Some(Compression::Lz4),
            value_id: 77,
            toast_relid: 16_390
        }
    );
}

#[test]
fn missing_and_extra_attributes() {
    let s = schema(&[
        (4, Align::Int),
        (-1, Align::Int),
        (8, Align::Double),
        (-1, Align::Int),
    ]);
    let vals = vec![Val::Fixed(vec![1, 0, 0, 0]), Val::Short(b"x".to_vec())];
    let b = build(&s, &vals);
    let got = run(&b, &s).unwrap();
    assert_eq!(got[..2], expect(&vals)[..]);
    assert_eq!(got[2..], [RawDatum::Missing, RawDatum::Missing]);
    // A tuple with more attributes than the schema: the extras are ignored.
    let short_schema = schema(&[(4, Align::Int)]);
    assert_eq!(run(&b, &short_schema).unwrap(), expect(&vals)[..1]);
}

#[test]
fn dropped_columns_are_walked_over() {
    let mut s = schema(&[(4, Align::Int), (8, Align::Double), (-1, Align::Int)]);
    s.attrs[1].dropped = true;
    s.attrs[1].type_oid = 0;
    // A row written before the drop still holds the bytes.
    let old = vec![
        Val::Fixed(vec![1; 4]),
        Val::Fixed(vec![2; 8]),
        Val::Short(b"ok".to_vec()),
    ];
    let b = build(&s, &old);
    assert_eq!(run(&b, &s).unwrap(), expect(&old));
    // A row written after it has NULL there.
    let new = vec![
        Val::Fixed(vec![1; 4]),
        Val::Null,
        Val::Short(b"ok".to_vec()),
    ];
    let b = build(&s, &new);
    assert_eq!(run(&b, &s).unwrap(), expect(&new));
}

#[test]
fn cstrings() {
    let s = schema(&[(1, Align::Char), (-2, Align::Char), (4, Align::Int)]);
    let vals = vec![
        Val::Fixed(vec![9]),
        Val::CStr(b"abc".to_vec()),
        Val::Fixed(vec![1; 4]),
    ];
    let b = build(&s, &vals);
    assert_eq!(run(&b, &s).unwrap(), expect(&vals));
    let unterminated = Built {
        fragment: vec![0, 9, b'a', b'b'],
        ..b
    };
    let e = run(&unterminated, &s).unwrap_err();
    assert!(matches!(e.kind, TupleErrorKind::UnterminatedCString), "{e}");
    assert_eq!((e.attnum, e.offset), (Some(2), Some(2)));
}

#[test]
fn truncation_is_an_error_naming_attribute_and_offset() {
    let s = schema(&[
        (4, Align::Int),
        (-1, Align::Int),
        (8, Align::Double),
        (-1, Align::Int),
    ]);
    let vals = vec![
        Val::Fixed(vec![1; 4]),
        Val::Null,
        Val::Fixed(vec![2; 8]),
        Val::Long(vec![b'z'; 200]),
    ];
    let b = build(&s, &vals);
    assert_eq!(run(&b, &s).unwrap(), expect(&vals));
    for cut in 0..b.fragment.len() {
        let t = Built {
            fragment: b.fragment[..cut].to_vec(),
            ..b
        };
        let e = run(&t, &s).unwrap_err();
        if cut >= 1 + 4 + 4 + 8 {
            assert_eq!(e.attnum, Some(4), "cut {cut}: {e}");
            assert_eq!(e.offset, Some(1 + 16), "cut {cut}: {e}");
        } else if cut > 1 {
            assert!(
                matches!(e.kind, TupleErrorKind::Truncated { .. }),
                "cut {cut}: {e}"
            );
        }
    }
}

#[test]
fn bad_headers() {
    let s = schema(&[(4, Align::Int)]);
    let ok = build(&s, &[Val::Fixed(vec![1; 4])]);
    for hoff in [0u8, 22, 255] {
        let e = deform(ok.infomask2, ok.infomask, hoff, &ok.fragment, &s).unwrap_err();
        assert!(matches!(e.kind, TupleErrorKind::BadHoff { .. }), "{e}");
    }
    // HASNULL with 20 attributes needs 3 bitmap bytes, more than t_hoff 24 leaves.
    let e = deform(20, HEAP_HASNULL, 24, &[0; 8], &s).unwrap_err();
    assert!(
        matches!(e.kind, TupleErrorKind::BadHoff { bitmap_len: 3, .. }),
        "{e}"
    );
    let zero_len = schema(&[(0, Align::Int)]);
    let e = run(&ok, &zero_len).unwrap_err();
    assert!(
        matches!(e.kind, TupleErrorKind::BadAttLen { attlen: 0 }),
        "{e}"
    );
}

fn val_for(len: i16) -> BoxedStrategy<Val> {
    match len {
        -1 => prop_oneof![
            prop::collection::vec(any::<u8>(), 0..127).prop_map(Val::Short),
            prop::collection::vec(any::<u8>(), 0..400).prop_map(Val::Long),
            any::<u32>().prop_map(|id| Val::Pointer(pointer(id))),
            Just(Val::Null),
        ]
        .boxed(),
        -2 => prop_oneof![
            prop::collection::vec(1u8..=255, 0..20).prop_map(Val::CStr),
            Just(Val::Null)
        ]
        .boxed(),
        n => prop_oneof![
            prop::collection::vec(any::<u8>(), n as usize).prop_map(Val::Fixed),
            Just(Val::Null)
        ]
        .boxed(),
    }
}

fn layout() -> impl Strategy<Value = (i16, Align)> {
    prop_oneof![
        Just((1, Align::Char)),
        Just((2, Align::Short)),
        Just((4, Align::Int)),
        Just((8, Align::Double)),
        Just((12, Align::Double)),
        Just((6, Align::Short)),
        Just((-1, Align::Int)),
        Just((-1, Align::Double)),
        Just((-2, Align::Char)),
    ]
}

fn schema_and_row() -> impl Strategy<Value = (RelSchema, Vec<Val>)> {
    prop::collection::vec(layout(), 1..30).prop_flat_map(|cols| {
        let s = schema(&cols);
        let vals: Vec<_> = cols.iter().map(|&(len, _)| val_for(len)).collect();
        (Just(s), vals)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn built_rows_deform_back((s, vals) in schema_and_row(), stored in 0usize..30) {
        // Store only a prefix of the attributes: the rest are missing.
        let stored = stored.min(vals.len());
        let b = build(&s, &vals[..stored]);
        let got = run(&b, &s).unwrap();
        let mut want = expect(&vals[..stored]);
        want.resize(vals.len(), RawDatum::Missing);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        cols in prop::collection::vec(layout(), 0..20),
        infomask2 in any::<u16>(),
        infomask in any::<u16>(),
        hoff in any::<u8>(),
        fragment in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let _ = deform(infomask2, infomask, hoff, &fragment, &schema(&cols));
    }

    #[test]
    fn corrupted_rows_never_panic(
        (s, vals) in schema_and_row(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut b = build(&s, &vals);
        if !b.fragment.is_empty() {
            for (at, byte) in flips {
                let i = at.index(b.fragment.len());
                b.fragment[i] = byte;
            }
        }
        let _ = run(&b, &s);
    }
}
