//! Values built by hand for the layouts the PostgreSQL-produced vectors do
//! not reach: malformed lengths, flags and offsets, attributes a
//! description cannot hold, unsupported types inside containers.

use super::tests::array_header;
use super::{output, Align, BaseType, Field, TypeError, TypeInfo};

#[test]
fn bits_vectors_and_snapshots_check_their_lengths() {
    let print = |base: BaseType, bytes: &[u8]| output(&TypeInfo::base(base), bytes);
    let malformed = |r: Result<String, TypeError>| matches!(r, Err(TypeError::Malformed { .. }));
    // 9 bits need 2 bytes; a negative bit count is never valid.
    let mut nine = 9i32.to_le_bytes().to_vec();
    nine.push(0xaa);
    assert!(malformed(print(BaseType::Varbit, &nine)));
    nine.push(0x80);
    assert_eq!(print(BaseType::Varbit, &nine).as_deref(), Ok("101010101"));
    assert!(malformed(print(BaseType::Bit, &(-1i32).to_le_bytes())));

    // int2vector: one dimension, and no more elements than bytes.
    let vector = |ndim: i32, n: i32, values: &[i16]| {
        let mut b = array_header(ndim, 0, 21, &[(n, 0)]);
        for v in values {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    };
    assert_eq!(
        print(BaseType::Int2vector, &vector(1, 2, &[-1, 7])).as_deref(),
        Ok("-1 7")
    );
    assert!(malformed(print(
        BaseType::Int2vector,
        &vector(1, 3, &[1, 2])
    )));
    assert!(malformed(print(
        BaseType::Int2vector,
        &vector(2, 2, &[1, 2])
    )));

    // tid: block number in two 16-bit halves, high first.
    let tid = [1, 0, 2, 0, 3, 0];
    assert_eq!(print(BaseType::Tid, &tid).as_deref(), Ok("(65538,3)"));

    // pg_snapshot: xmin, xmax, then as many xips as it claims.
    let mut snap = 2u32.to_le_bytes().to_vec();
    for v in [10u64, 20, 11] {
        snap.extend_from_slice(&v.to_le_bytes());
    }
    assert!(malformed(print(BaseType::PgSnapshot, &snap)));
    snap.extend_from_slice(&12u64.to_le_bytes());
    assert_eq!(
        print(BaseType::PgSnapshot, &snap).as_deref(),
        Ok("10:20:11,12")
    );
}

#[test]
fn geometric_values_print_their_floats_and_check_point_counts() {
    let print = |base: BaseType, floats: &[f64], head: &[u8]| {
        let mut b = head.to_vec();
        for f in floats {
            b.extend_from_slice(&f.to_le_bytes());
        }
        output(&TypeInfo::base(base), &b)
    };
    assert_eq!(
        print(BaseType::Point, &[-0.0, f64::NAN], &[]).as_deref(),
        Ok("(-0,NaN)")
    );
    assert_eq!(
        print(BaseType::Circle, &[1.0, 2.0, f64::INFINITY], &[]).as_deref(),
        Ok("<(1,2),Infinity>")
    );
    // An open path of two points: count, closed flag, padding, points.
    let mut head = 2i32.to_le_bytes().to_vec();
    head.extend_from_slice(&[0; 8]);
    assert_eq!(
        print(BaseType::Path, &[0.0, 0.5, 1e300, -1.0], &head).as_deref(),
        Ok("[(0,0.5),(1e+300,-1)]")
    );
    assert!(matches!(
        print(BaseType::Path, &[0.0, 0.5], &head),
        Err(TypeError::Malformed { oid: 602, .. })
    ));
    assert!(matches!(
        print(BaseType::Line, &[1.0, 2.0], &[]),
        Err(TypeError::Malformed { oid: 628, .. })
    ));
}

#[test]
fn ranges_check_their_type_and_follow_multirange_offsets() {
    let int4range = TypeInfo::builtin(3904).expect("int4range");
    let range = |flags: u8, bounds: &[i32]| {
        let mut b = 3904u32.to_le_bytes().to_vec();
        for v in bounds {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.push(flags);
        b
    };
    assert_eq!(
        output(&int4range, &range(0x02, &[1, 5])).as_deref(),
        Ok("[1,5)")
    );
    assert_eq!(
        output(&int4range, &range(0x01, &[])).as_deref(),
        Ok("empty")
    );
    // Lower bound infinite, upper inclusive.
    assert_eq!(
        output(&int4range, &range(0x0c, &[7])).as_deref(),
        Ok("(,7]")
    );
    // A bound the flags promise but the value lacks.
    assert!(matches!(
        output(&int4range, &range(0x02, &[1])),
        Err(TypeError::Malformed { .. })
    ));
    // Another range type's value.
    let mut other = range(0x02, &[1, 5]);
    other[..4].copy_from_slice(&3926u32.to_le_bytes());
    assert!(matches!(
        output(&int4range, &other),
        Err(TypeError::Malformed { oid: 3904, .. })
    ));

    // Six ranges: items 1-3 are lengths, item 4 an offset (high bit), item
    // 5 a length again.
    let multi = TypeInfo::builtin(4451).expect("int4multirange");
    let mut b = 4451u32.to_le_bytes().to_vec();
    b.extend_from_slice(&6u32.to_le_bytes());
    for item in [8u32, 8, 8, 0x8000_0020, 8] {
        b.extend_from_slice(&item.to_le_bytes());
    }
    b.extend_from_slice(&[0x02; 6]);
    b.extend_from_slice(&[0, 0]); // pad to the subtype's alignment
    for v in 0..12i32 {
        b.extend_from_slice(&(4 * v).to_le_bytes());
    }
    assert_eq!(
        output(&multi, &b).as_deref(),
        Ok("{[0,4),[8,12),[16,20),[24,28),[32,36),[40,44)}")
    );
    b.truncate(b.len() - 4);
    assert!(matches!(
        output(&multi, &b),
        Err(TypeError::Malformed { .. })
    ));
}

#[test]
fn composites_quote_fields_and_refuse_values_their_description_cannot_hold() {
    let comp = TypeInfo::composite(
        60000,
        vec![
            Field::of(TypeInfo::base(BaseType::Int4)),
            Field::dropped(2, true, Align::Short),
            Field::of(TypeInfo::base(BaseType::Text)),
        ],
    );
    // Type modifier, type OID, item pointer, attribute count, infomask,
    // t_hoff (24: data at payload offset 20), padding, then the data.
    let value = |oid: u32, natts: u16, data: &[u8]| {
        let mut b = (-1i32).to_le_bytes().to_vec();
        b.extend_from_slice(&oid.to_le_bytes());
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0]);
        b.extend_from_slice(&natts.to_le_bytes());
        b.extend_from_slice(&0x0002u16.to_le_bytes());
        b.extend_from_slice(&[24, 0]);
        b.extend_from_slice(data);
        b
    };
    let data = [5, 0, 0, 0, 7, 0, 0x09, b'a', b' ', b'b'];
    assert_eq!(
        output(&comp, &value(60000, 3, &data)).as_deref(),
        Ok("(5,\"a b\")")
    );
    // Written before the text attribute was added: it prints as null.
    assert_eq!(
        output(&comp, &value(60000, 2, &data[..6])).as_deref(),
        Ok("(5,)")
    );
    assert!(matches!(
        output(&comp, &value(60001, 3, &data)),
        Err(TypeError::Malformed { oid: 60000, .. })
    ));
    // More attributes than the description knows (one added since).
    assert!(matches!(
        output(&comp, &value(60000, 4, &data)),
        Err(TypeError::Malformed { oid: 60000, .. })
    ));
    // A live attribute of a type that cannot be printed makes the whole
    // type unsupported; a dropped one does not.
    let odd = TypeInfo::composite(
        60002,
        vec![Field::of(TypeInfo::unsupported(
            2205,
            4,
            true,
            Align::Int,
            None,
        ))],
    );
    assert!(matches!(
        output(&odd, &value(60002, 1, &data[..4])),
        Err(TypeError::Unsupported { oid: 2205, .. })
    ));
}

/// A tsquery of `items` (type, operator or weight, prefix flag, the
/// operand's offset in the string area) over the NUL-terminated `strings`.
fn tsquery(items: &[(u8, u8, u8, u32)], strings: &[u8]) -> Vec<u8> {
    let mut b = (items.len() as i32).to_le_bytes().to_vec();
    for &(kind, op_or_weight, prefix, offset) in items {
        let mut item = [0u8; 12];
        item[0] = kind;
        item[1] = op_or_weight;
        item[2] = prefix;
        if kind == 2 {
            item[2..4].copy_from_slice(&1i16.to_le_bytes());
        }
        item[8..12].copy_from_slice(&(offset << 12 | 1).to_le_bytes());
        b.extend_from_slice(&item);
    }
    b.extend_from_slice(strings);
    b
}

#[test]
fn text_search_values_are_checked_and_deep_queries_do_not_recurse() {
    let tsq = TypeInfo::base(BaseType::Tsquery);
    let tsv = TypeInfo::base(BaseType::Tsvector);
    // a & !b, in prefix order: the operator, its right operand, its left.
    let q = tsquery(
        &[(2, 2, 0, 0), (2, 1, 0, 0), (1, 0, 0, 2), (1, 8, 1, 0)],
        b"a\0b\0",
    );
    assert_eq!(output(&tsq, &q).as_deref(), Ok("'a':*A & !'b'"));
    // An operator short of operands, and an operand past the strings.
    let short = tsquery(&[(2, 2, 0, 0), (1, 0, 0, 0)], b"a\0");
    assert!(matches!(
        output(&tsq, &short),
        Err(TypeError::Malformed { .. })
    ));
    let past = tsquery(&[(1, 0, 0, 9)], b"a\0");
    assert!(matches!(
        output(&tsq, &past),
        Err(TypeError::Malformed { .. })
    ));
    // 100000 nested NOTs print without recursing.
    let mut items = vec![(2, 1, 0, 0); 100_000];
    items.push((1, 0, 0, 0));
    let deep = output(&tsq, &tsquery(&items, b"z\0")).expect("deep query");
    assert_eq!(deep.len(), 100_003);
    assert!(deep.ends_with("!!'z'"));

    // tsvector: one lexeme `ab` with positions 3 (weight B) and 7.
    let mut v = 1i32.to_le_bytes().to_vec();
    v.extend_from_slice(&(2u32 << 1 | 1).to_le_bytes());
    v.extend_from_slice(b"ab");
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&(0x8000u16 | 3).to_le_bytes());
    v.extend_from_slice(&7u16.to_le_bytes());
    assert_eq!(output(&tsv, &v).as_deref(), Ok("'ab':3B,7"));
    v.truncate(v.len() - 2);
    assert!(matches!(output(&tsv, &v), Err(TypeError::Malformed { .. })));
}

#[test]
fn xml_declarations_print_as_xml_out_prints_them() {
    let xml = TypeInfo::base(BaseType::Xml);
    let print = |s: &str| output(&xml, s.as_bytes());
    assert_eq!(
        print("<?xml version=\"1.0\"?>\n<a/>").as_deref(),
        Ok("<a/>")
    );
    assert_eq!(
        print("<?xml version='1.1' encoding='UTF-8'?><a/>").as_deref(),
        Ok("<?xml version=\"1.1\"?><a/>")
    );
    assert_eq!(print("\n<a/>").as_deref(), Ok("<a/>"));
    // Declarations that do not parse leave the value as stored.
    for raw in [
        "<?xml version=\"1.0\"standalone=\"yes\"?><a/>",
        "<?xml version=\"1.0\" standalone=\"maybe\"?><a/>",
        "<?xml version=\"1.0\" ?",
        "<?xml version=\"ü\"?><a/>",
        "<?xml",
    ] {
        assert_eq!(print(raw).as_deref(), Ok(raw));
    }
    assert_eq!(
        print("<?xml-stylesheet href=\"s\"?>").as_deref(),
        Ok("<?xml-stylesheet href=\"s\"?>")
    );
}

#[test]
fn jsonpath_items_that_loop_are_refused() {
    let jp = TypeInfo::base(BaseType::Jsonpath);
    // Lax mode; `!(...)` whose operand is itself (relative offset 0).
    let mut looping = 0x8000_0001u32.to_le_bytes().to_vec();
    looping.extend_from_slice(&[6, 0, 0, 0]);
    looping.extend_from_slice(&0i32.to_le_bytes());
    looping.extend_from_slice(&0i32.to_le_bytes());
    assert!(matches!(
        output(&jp, &looping),
        Err(TypeError::Malformed { oid: 4072, .. })
    ));
    // Strict mode, `$` then `.a` (its next item, 8 bytes on).
    let mut path = 1u32.to_le_bytes().to_vec();
    path.extend_from_slice(&[27, 0, 0, 0]);
    path.extend_from_slice(&8i32.to_le_bytes());
    path.extend_from_slice(&[25, 0, 0, 0]);
    path.extend_from_slice(&0i32.to_le_bytes());
    path.extend_from_slice(&1i32.to_le_bytes());
    path.extend_from_slice(b"a\0");
    assert_eq!(output(&jp, &path).as_deref(), Ok("strict $.\"a\""));
    path.truncate(path.len() - 2);
    assert!(matches!(
        output(&jp, &path),
        Err(TypeError::Malformed { .. })
    ));
}
