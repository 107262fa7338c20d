//! The oracle test's ranges, multiranges and composites: their cases and
//! random values in binary form (`range_recv`, `multirange_recv`,
//! `record_recv`), or text for numrange.

use postgres::Client;
use proptest::collection::vec;
use proptest::prelude::*;
use walfill_replay::types::{BaseType, Field, TypeInfo};

use super::database::type_oid;
use super::strategies::{self, Param};
use super::{case_count, Case, SCALAR_CASES};

/// `comp`, a composite with a dropped attribute, an enum, a range and a
/// nested composite, sent in binary (`record_recv`: the live attributes,
/// each with its type OID and length).
pub(crate) fn composite_case(client: &mut Client, mood: TypeInfo, moods: Param) -> (Case, u32) {
    let inner_oid = type_oid(client, "inner_c");
    let inner = TypeInfo::composite(
        inner_oid,
        vec![
            Field::of(TypeInfo::base(BaseType::Text)),
            Field::of(TypeInfo::base(BaseType::Int8)),
        ],
    );
    let int4range = TypeInfo::builtin(3904).expect("int4range");
    let comp_oid = type_oid(client, "comp");
    let ty = TypeInfo::composite(
        comp_oid,
        vec![
            Field::of(TypeInfo::base(BaseType::Int4)),
            Field::dropped(-1, false, walfill_replay::types::Align::Int),
            Field::of(TypeInfo::base(BaseType::Text)),
            Field::of(TypeInfo::base(BaseType::Float8)),
            Field::of(mood.clone()),
            Field::of(int4range),
            Field::of(inner),
            Field::of(TypeInfo::base(BaseType::Timestamptz)),
        ],
    );
    let no_top = strategies::int4()
        .prop_filter("canonical form overflows", |v| {
            *v != i32::MAX.to_be_bytes().to_vec()
        })
        .boxed();
    let inner_values = record(vec![(25, strategies::text(12)), (20, strategies::int8())]);
    let values = record(vec![
        (23, strategies::int4()),
        (25, strategies::text(20)),
        (701, strategies::float8()),
        (mood.oid, moods),
        (3904, range(no_top, Key::Signed)),
        (inner_oid, inner_values),
        (1184, strategies::timestamp()),
    ]);
    let case = Case {
        sql_type: "comp".into(),
        param_type: "comp".into(),
        ty,
        values,
        cases: case_count(SCALAR_CASES),
    };
    (case, comp_oid)
}

/// The built-in ranges and a user-defined range over text, each with its
/// multirange. Bounds go in binary, ordered by their sort key (a signed
/// integer's big-endian bytes with the sign bit flipped, text's bytes: the
/// test database collates in C); numrange goes as text.
pub(crate) fn range_cases(client: &mut Client) -> Vec<(Case, u32)> {
    let no_top = |p: Param, top: Vec<u8>| {
        p.prop_filter("canonical form overflows", move |v| *v != top)
            .boxed()
    };
    let specs: Vec<(&str, &str, BaseType, Param, &str)> = vec![
        (
            "int4range",
            "int4multirange",
            BaseType::Int4,
            range(
                no_top(strategies::int4(), i32::MAX.to_be_bytes().to_vec()),
                Key::Signed,
            ),
            "int4range",
        ),
        (
            "int8range",
            "int8multirange",
            BaseType::Int8,
            range(
                no_top(strategies::int8(), i64::MAX.to_be_bytes().to_vec()),
                Key::Signed,
            ),
            "int8range",
        ),
        (
            "numrange",
            "nummultirange",
            BaseType::Numeric,
            numrange(),
            "text",
        ),
        (
            "tsrange",
            "tsmultirange",
            BaseType::Timestamp,
            range(strategies::timestamp(), Key::Signed),
            "tsrange",
        ),
        (
            "tstzrange",
            "tstzmultirange",
            BaseType::Timestamptz,
            range(strategies::timestamp(), Key::Signed),
            "tstzrange",
        ),
        (
            "daterange",
            "datemultirange",
            BaseType::Date,
            range(strategies::date_for_ranges(), Key::Signed),
            "daterange",
        ),
        (
            "textrange",
            "textmultirange",
            BaseType::Text,
            range(strategies::text(12), Key::Bytes),
            "textrange",
        ),
    ];
    let mut out = Vec::new();
    for (sql, multi_sql, subtype, values, param) in specs {
        let oid = type_oid(client, sql);
        let ty = TypeInfo::range_of(oid, TypeInfo::base(subtype));
        let multi = TypeInfo::multirange_of(type_oid(client, multi_sql), ty.clone());
        let param_oid = type_oid(client, param);
        let (multi_param, multi_values) = if param == "text" {
            ("text".to_string(), multirange_text(values.clone()))
        } else {
            (multi_sql.to_string(), multirange(values.clone()))
        };
        let case = |sql: &str, param: String, ty: TypeInfo, values: Param| Case {
            sql_type: sql.to_string(),
            param_type: param,
            ty,
            values,
            cases: case_count(SCALAR_CASES),
        };
        out.push((case(sql, param.to_string(), ty, values), param_oid));
        let multi_oid = type_oid(client, &multi_param);
        out.push((case(multi_sql, multi_param, multi, multi_values), multi_oid));
    }
    out
}

/// How range bounds sort, from their binary form.
#[derive(Clone, Copy)]
pub(crate) enum Key {
    /// A big-endian signed integer (int, timestamp, date).
    Signed,
    /// Bytes (text in the C collation).
    Bytes,
}

fn sort_key(key: Key, bytes: &[u8]) -> Vec<u8> {
    let mut k = bytes.to_vec();
    if let (Key::Signed, Some(first)) = (key, k.first_mut()) {
        *first ^= 0x80;
    }
    k
}

const RANGE_EMPTY: u8 = 0x01;
const RANGE_LB_INC: u8 = 0x02;
const RANGE_UB_INC: u8 = 0x04;
const RANGE_LB_INF: u8 = 0x08;
const RANGE_UB_INF: u8 = 0x10;

/// Range flags: empty now and then, else any mix of inclusive and infinite
/// bounds.
fn range_flags() -> impl Strategy<Value = u8> {
    prop_oneof![
        1 => Just(RANGE_EMPTY),
        9 => (0u8..16).prop_map(|b| {
            [RANGE_LB_INC, RANGE_UB_INC, RANGE_LB_INF, RANGE_UB_INF]
                .iter()
                .enumerate()
                .filter(|(i, _)| b & (1 << i) != 0)
                .fold(0, |f, (_, bit)| f | bit)
        }),
    ]
}

/// A range in binary form (flags, then each finite bound as length and
/// value) over bounds drawn from `bound`, the lower one not above the
/// upper one.
pub(crate) fn range(bound: Param, key: Key) -> Param {
    (range_flags(), bound.clone(), bound)
        .prop_map(move |(flags, a, b)| {
            let (lo, hi) = if sort_key(key, &a) <= sort_key(key, &b) {
                (a, b)
            } else {
                (b, a)
            };
            let mut out = vec![flags];
            if flags & RANGE_EMPTY == 0 {
                for (inf, v) in [(RANGE_LB_INF, lo), (RANGE_UB_INF, hi)] {
                    if flags & inf == 0 {
                        out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        out.extend_from_slice(&v);
                    }
                }
            }
            out
        })
        .boxed()
}

/// numrange text: decimal bounds of a shared scale, in order, inclusive or
/// not, infinite now and then.
pub(crate) fn numrange() -> Param {
    (range_flags(), any::<i64>(), any::<i64>(), 0..8u32)
        .prop_map(|(flags, a, b, scale)| {
            if flags & RANGE_EMPTY != 0 {
                return b"empty".to_vec();
            }
            let (lo, hi) = (a.min(b), a.max(b));
            let num = |v: i64| {
                let digits = v.unsigned_abs().to_string();
                let scale = scale as usize;
                let padded = format!("{digits:0>width$}", width = scale + 1);
                let (int, frac) = padded.split_at(padded.len() - scale);
                let sign = if v < 0 { "-" } else { "" };
                if scale == 0 {
                    format!("{sign}{int}")
                } else {
                    format!("{sign}{int}.{frac}")
                }
            };
            let lower = if flags & RANGE_LB_INF != 0 {
                String::new()
            } else {
                num(lo)
            };
            let upper = if flags & RANGE_UB_INF != 0 {
                String::new()
            } else {
                num(hi)
            };
            let open = if flags & RANGE_LB_INC != 0 { '[' } else { '(' };
            let close = if flags & RANGE_UB_INC != 0 { ']' } else { ')' };
            format!("{open}{lower},{upper}{close}").into_bytes()
        })
        .boxed()
}

/// A multirange in binary form: a count, then each range's length and
/// binary form.
pub(crate) fn multirange(range: Param) -> Param {
    vec(range, 0..5)
        .prop_map(|ranges| {
            let mut out = (ranges.len() as i32).to_be_bytes().to_vec();
            for r in ranges {
                out.extend_from_slice(&(r.len() as i32).to_be_bytes());
                out.extend_from_slice(&r);
            }
            out
        })
        .boxed()
}

/// A multirange in text form from ranges in text form.
pub(crate) fn multirange_text(range: Param) -> Param {
    vec(range, 0..5)
        .prop_map(|ranges| {
            let texts: Vec<String> = ranges
                .into_iter()
                .map(|r| String::from_utf8(r).unwrap_or_default())
                .collect();
            format!("{{{}}}", texts.join(",")).into_bytes()
        })
        .boxed()
}

/// A composite in binary form (`record_recv`): the number of fields, then
/// each field's type OID and length (-1 for NULL, about one in six) and
/// value.
pub(crate) fn record(fields: Vec<(u32, Param)>) -> Param {
    let parts: Vec<BoxedStrategy<(u32, Option<Vec<u8>>)>> = fields
        .into_iter()
        .map(|(oid, values)| {
            proptest::option::weighted(0.85, values)
                .prop_map(move |v| (oid, v))
                .boxed()
        })
        .collect();
    parts
        .prop_map(|fields| {
            let mut out = (fields.len() as i32).to_be_bytes().to_vec();
            for (oid, value) in fields {
                out.extend_from_slice(&oid.to_be_bytes());
                match value {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(v) => {
                        out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                        out.extend_from_slice(&v);
                    }
                }
            }
            out
        })
        .boxed()
}
