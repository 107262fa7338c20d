//! The oracle test's built-in scalar cases, and random values of the system
//! types (xid8, bit strings, int2vector, oidvector, snapshots) and the
//! geometric types, as query parameters in binary form (or text the query
//! casts).

use proptest::collection::vec;
use proptest::prelude::*;
use walfill_replay::types::BaseType;

use super::strategies::{self, float8, Param};

/// Any unsigned 64-bit value (xid8), the ends often.
pub(crate) fn uint8() -> Param {
    prop_oneof![Just(0u64), Just(u64::MAX), 0..1000u64, any::<u64>()]
        .prop_map(|v| v.to_be_bytes().to_vec())
        .boxed()
}

/// bit strings of a length in `len`, in varbit's binary form (bit count,
/// then the bits with the last byte zero-padded).
pub(crate) fn bits(len: std::ops::RangeInclusive<usize>) -> Param {
    len.prop_flat_map(|n| (Just(n), vec(any::<u8>(), n.div_ceil(8))))
        .prop_map(|(n, mut bytes)| {
            if let Some(last) = bytes.last_mut() {
                if n % 8 != 0 {
                    *last &= 0xffu8 << (8 - n % 8);
                }
            }
            let mut b = (n as i32).to_be_bytes().to_vec();
            b.extend_from_slice(&bytes);
            b
        })
        .boxed()
}

/// int2vector text: up to 8 numbers separated by spaces.
pub(crate) fn int2vector() -> Param {
    vec(
        prop_oneof![Just(i16::MIN), Just(i16::MAX), any::<i16>()],
        0..8,
    )
    .prop_map(|v| {
        let words: Vec<String> = v.iter().map(i16::to_string).collect();
        words.join(" ").into_bytes()
    })
    .boxed()
}

/// oidvector text: up to 8 OIDs separated by spaces.
pub(crate) fn oidvector() -> Param {
    vec(prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()], 0..8)
        .prop_map(|v| {
            let words: Vec<String> = v.iter().map(u32::to_string).collect();
            words.join(" ").into_bytes()
        })
        .boxed()
}

/// Snapshot text `xmin:xmax:xip,...`: 0 < xmin <= xmax, in-progress
/// transactions ascending and distinct in `xmin..xmax`.
pub(crate) fn snapshot() -> Param {
    let xmin = prop_oneof![1..100u64, 1..u64::MAX / 2, Just(u64::MAX - 20)];
    (xmin, 0..20u64, vec(0..20u64, 0..6))
        .prop_map(|(xmin, span, mut offsets)| {
            offsets.retain(|&o| o < span);
            offsets.sort_unstable();
            offsets.dedup();
            let xip: Vec<String> = offsets.iter().map(|o| (xmin + o).to_string()).collect();
            format!("{xmin}:{}:{}", xmin + span, xip.join(",")).into_bytes()
        })
        .boxed()
}

/// `n` float8s back to back (a point, lseg or box in binary form).
pub(crate) fn floats(n: usize) -> Param {
    vec(float8(), n).prop_map(|v| v.concat()).boxed()
}

/// A line `{A,B,C}`: A and B not both (nearly) zero, which line_recv
/// rejects.
pub(crate) fn line() -> Param {
    floats(3)
        .prop_filter("A and B both zero", |b| {
            let coef = |i: usize| f64::from_be_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
            !(coef(0).abs() <= 1e-6 && coef(1).abs() <= 1e-6)
        })
        .boxed()
}

/// A circle: center and a radius that is not negative.
pub(crate) fn circle() -> Param {
    (floats(2), float8())
        .prop_map(|(mut center, radius)| {
            let r = f64::from_be_bytes(radius[..8].try_into().unwrap());
            center.extend_from_slice(&r.abs().to_be_bytes());
            center
        })
        .boxed()
}

/// A path: closed flag, point count, points.
pub(crate) fn path() -> Param {
    (any::<bool>(), vec(floats(2), 1..8))
        .prop_map(|(closed, points)| {
            let mut b = vec![u8::from(closed)];
            b.extend_from_slice(&(points.len() as i32).to_be_bytes());
            b.extend_from_slice(&points.concat());
            b
        })
        .boxed()
}

/// A polygon: point count, points.
pub(crate) fn polygon() -> Param {
    vec(floats(2), 1..8)
        .prop_map(|points| {
            let mut b = (points.len() as i32).to_be_bytes().to_vec();
            b.extend_from_slice(&points.concat());
            b
        })
        .boxed()
}

/// Built-in scalar cases: column type, parameter type (sent in binary), the
/// parameter type's OID, and the type under test.
pub(crate) const BUILTIN_CASES: &[(&str, &str, u32, BaseType)] = &[
    ("bool", "bool", 16, BaseType::Bool),
    ("int2", "int2", 21, BaseType::Int2),
    ("int4", "int4", 23, BaseType::Int4),
    ("int8", "int8", 20, BaseType::Int8),
    ("oid", "oid", 26, BaseType::Oid),
    ("float4", "float4", 700, BaseType::Float4),
    ("float8", "float8", 701, BaseType::Float8),
    ("numeric", "text", 25, BaseType::Numeric),
    ("text", "text", 25, BaseType::Text),
    ("varchar(12)", "text", 25, BaseType::Varchar),
    ("char(8)", "text", 25, BaseType::Bpchar),
    ("name", "text", 25, BaseType::Name),
    ("\"char\"", "\"char\"", 18, BaseType::Char),
    ("bytea", "bytea", 17, BaseType::Bytea),
    ("date", "date", 1082, BaseType::Date),
    ("time", "time", 1083, BaseType::Time),
    ("timetz", "timetz", 1266, BaseType::Timetz),
    ("timestamp", "timestamp", 1114, BaseType::Timestamp),
    ("timestamptz", "timestamptz", 1184, BaseType::Timestamptz),
    ("interval", "interval", 1186, BaseType::Interval),
    ("uuid", "uuid", 2950, BaseType::Uuid),
    ("json", "text", 25, BaseType::Json),
    ("jsonb", "text", 25, BaseType::Jsonb),
    ("inet", "inet", 869, BaseType::Inet),
    ("cidr", "cidr", 650, BaseType::Cidr),
    ("macaddr", "macaddr", 829, BaseType::Macaddr),
    ("money", "money", 790, BaseType::Money),
    ("pg_lsn", "pg_lsn", 3220, BaseType::PgLsn),
    ("bit(12)", "varbit", 1562, BaseType::Bit),
    ("varbit", "varbit", 1562, BaseType::Varbit),
    ("macaddr8", "macaddr8", 774, BaseType::Macaddr8),
    ("xid", "xid", 28, BaseType::Xid),
    ("cid", "cid", 29, BaseType::Cid),
    ("xid8", "xid8", 5069, BaseType::Xid8),
    ("tid", "tid", 27, BaseType::Tid),
    ("int2vector", "text", 25, BaseType::Int2vector),
    ("oidvector", "text", 25, BaseType::Oidvector),
    ("refcursor", "text", 25, BaseType::Refcursor),
    ("pg_snapshot", "text", 25, BaseType::PgSnapshot),
    ("txid_snapshot", "text", 25, BaseType::TxidSnapshot),
    ("point", "point", 600, BaseType::Point),
    ("lseg", "lseg", 601, BaseType::Lseg),
    ("box", "box", 603, BaseType::Box),
    ("line", "line", 628, BaseType::Line),
    ("circle", "circle", 718, BaseType::Circle),
    ("path", "path", 602, BaseType::Path),
    ("polygon", "polygon", 604, BaseType::Polygon),
    ("tsvector", "text", 25, BaseType::Tsvector),
    ("tsquery", "text", 25, BaseType::Tsquery),
    ("xml", "text", 25, BaseType::Xml),
    ("jsonpath", "text", 25, BaseType::Jsonpath),
];

/// Parameter values for a built-in type.
pub(crate) fn values_for(base: BaseType) -> Param {
    match base {
        BaseType::Bool => strategies::boolean(),
        BaseType::Int2 => strategies::int2(),
        BaseType::Int4 => strategies::int4(),
        BaseType::Int8 => strategies::int8(),
        BaseType::Oid => strategies::oid(),
        BaseType::Float4 => strategies::float4(),
        BaseType::Float8 => strategies::float8(),
        BaseType::Numeric => strategies::numeric(),
        BaseType::Text => strategies::text(30),
        BaseType::Varchar => strategies::text(16),
        BaseType::Bpchar => strategies::text(10),
        BaseType::Name => strategies::text(70),
        BaseType::Char => strategies::char_byte(),
        BaseType::Bytea => strategies::bytea(),
        BaseType::Date => strategies::date(),
        BaseType::Time => strategies::time(),
        BaseType::Timetz => strategies::timetz(),
        BaseType::Timestamp | BaseType::Timestamptz => strategies::timestamp(),
        BaseType::Interval => strategies::interval(),
        BaseType::Uuid => strategies::fixed_bytes(16),
        BaseType::Json | BaseType::Jsonb => strategies::json(),
        BaseType::Inet => strategies::inet(false),
        BaseType::Cidr => strategies::inet(true),
        BaseType::Macaddr => strategies::fixed_bytes(6),
        BaseType::Money => strategies::money(),
        BaseType::PgLsn => strategies::pg_lsn(),
        BaseType::Bit => bits(12..=12),
        BaseType::Varbit => bits(0..=80),
        BaseType::Macaddr8 => strategies::fixed_bytes(8),
        BaseType::Xid | BaseType::Cid => strategies::oid(),
        BaseType::Xid8 => uint8(),
        BaseType::Tid => strategies::fixed_bytes(6),
        BaseType::Int2vector => int2vector(),
        BaseType::Oidvector => oidvector(),
        BaseType::Refcursor => strategies::text(30),
        BaseType::PgSnapshot | BaseType::TxidSnapshot => snapshot(),
        BaseType::Point => floats(2),
        BaseType::Lseg | BaseType::Box => floats(4),
        BaseType::Line => line(),
        BaseType::Circle => circle(),
        BaseType::Path => path(),
        BaseType::Polygon => polygon(),
        BaseType::Tsvector => tsvector(),
        BaseType::Tsquery => tsquery(),
        BaseType::Xml => xml(),
        BaseType::Jsonpath => jsonpath(),
    }
}

/// A lexeme in tsvector and tsquery input syntax: quoted, with `'` and `\`
/// doubled.
fn lexeme() -> impl Strategy<Value = String> {
    let c = prop::sample::select(vec![
        'a', 'b', 'c', 'x', 'y', '1', '\'', '\\', ' ', ',', ':', '&', 'ü', '✓', '"',
    ]);
    vec(c, 1..6).prop_map(|cs| {
        let s: String = cs.into_iter().collect();
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
    })
}

/// tsvector text: lexemes, some with positions and weights.
pub(crate) fn tsvector() -> Param {
    let weight = prop::sample::select(vec!["", "A", "B", "C", "D"]);
    let position = (1..=16383u32, weight).prop_map(|(p, w)| format!("{p}{w}"));
    let entry = (lexeme(), vec(position, 0..4)).prop_map(|(l, ps)| {
        if ps.is_empty() {
            l
        } else {
            format!("{l}:{}", ps.join(","))
        }
    });
    vec(entry, 0..8)
        .prop_map(|entries| entries.join(" ").into_bytes())
        .boxed()
}

/// tsquery text: operands (prefix matches and weights now and then) under
/// `!`, `&`, `|`, `<->` and `<N>`, fully parenthesized.
pub(crate) fn tsquery() -> Param {
    let flags = prop::sample::select(vec!["", ":*", ":A", ":BC", ":*AD", ":ABCD"]);
    let leaf = (lexeme(), flags).prop_map(|(l, f)| format!("{l}{f}"));
    leaf.prop_recursive(5, 24, 2, |inner| {
        let op = prop::sample::select(vec!["&", "|", "<->", "<0>", "<2>", "<17>"]);
        prop_oneof![
            inner.clone().prop_map(|q| format!("!({q})")),
            (inner.clone(), op, inner).prop_map(|(a, op, b)| format!("({a}) {op} ({b})")),
        ]
    })
    .prop_map(String::into_bytes)
    .boxed()
}

/// XML content: text, elements and comments, after a declaration (of
/// version 1.0 or 1.1, with or without encoding and standalone, blanks
/// varied) or none, and a newline now and then.
pub(crate) fn xml() -> Param {
    let text = prop::sample::select(vec!["", "t", "a b", "&amp;", "&lt;x&gt;", "ü", "\n"]);
    let content = text
        .prop_map(str::to_string)
        .prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..3).prop_map(|v| v.concat()),
                (inner.clone(), prop::sample::select(vec!["a", "b-c", "d"]))
                    .prop_map(|(c, n)| format!("<{n} k=\"v\">{c}</{n}>")),
                inner.prop_map(|c| format!("<e>{c}</e><!-- note -->")),
            ]
        });
    let version = prop::sample::select(vec!["1.0", "1.1"]);
    let encoding = prop::sample::select(vec!["", " encoding=\"UTF-8\"", "  encoding='utf-8'"]);
    let standalone = prop::sample::select(vec!["", " standalone=\"yes\"", " standalone='no'"]);
    let blank = prop::sample::select(vec!["", " ", "\n"]);
    let decl = (version, encoding, standalone, blank.clone())
        .prop_map(|(v, e, s, b)| format!("<?xml version=\"{v}\"{e}{s}{b}?>"));
    (
        proptest::option::of(decl),
        prop::sample::select(vec!["", "\n", "\n\n"]),
        content,
    )
        .prop_map(|(decl, newline, content)| {
            format!("{}{newline}{content}", decl.unwrap_or_default()).into_bytes()
        })
        .boxed()
}

/// jsonpath text: a mode, then a path (accessors, item methods, filters
/// with predicates over relative paths) or arithmetic over paths and
/// literals.
pub(crate) fn jsonpath() -> Param {
    let accessor = prop::sample::select(vec![
        ".a",
        ".\"k y\"",
        "[*]",
        "[0]",
        "[1 to 3]",
        "[last]",
        "[0, last - 1]",
        ".*",
        ".**",
        ".**{2}",
        ".**{1 to last}",
        ".type()",
        ".size()",
        ".abs()",
        ".double()",
        ".keyvalue()",
        ".datetime()",
    ]);
    let literal = prop::sample::select(vec![
        "1",
        "-2.5",
        "1e3",
        "\"s\"",
        "\"q\\\"x\\n\"",
        "true",
        "null",
        "$v",
    ]);
    let relative = vec(accessor.clone(), 0..3).prop_map(|a| format!("@{}", a.concat()));
    let value = prop_oneof![relative.clone(), literal.prop_map(str::to_string),];
    let cmp = prop::sample::select(vec!["==", "!=", "<", ">", "<=", ">="]);
    let arith = prop::sample::select(vec!["+", "-", "*", "/", "%"]);
    let expr = value.prop_recursive(2, 8, 2, move |inner| {
        prop_oneof![
            (inner.clone(), arith.clone(), inner.clone())
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            inner.prop_map(|e| format!("-{e}")),
        ]
    });
    let atom = prop_oneof![
        (expr.clone(), cmp, expr.clone()).prop_map(|(a, op, b)| format!("{a} {op} {b}")),
        relative.clone().prop_map(|r| format!("exists ({r})")),
        expr.clone()
            .prop_map(|e| format!("{e} like_regex \"^a.c\" flag \"is\"")),
        expr.prop_map(|e| format!("{e} starts with \"x\"")),
    ];
    let predicate = atom.prop_recursive(2, 8, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} && {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
            inner.clone().prop_map(|p| format!("!({p})")),
            inner.prop_map(|p| format!("({p}) is unknown")),
        ]
    });
    let step = prop_oneof![
        4 => accessor.prop_map(str::to_string),
        1 => predicate.prop_map(|p| format!(" ? ({p})")),
    ];
    let path = vec(step, 0..4).prop_map(|s| format!("${}", s.concat()));
    let root = prop_oneof![
        3 => path.clone(),
        1 => (path.clone(), prop::sample::select(vec!["+", "*", "-"]), path)
            .prop_map(|(a, op, b)| format!("{a} {op} {b}")),
    ];
    (prop::sample::select(vec!["", "strict ", "lax "]), root)
        .prop_map(|(mode, p)| format!("{mode}{p}").into_bytes())
        .boxed()
}
