//! Test vectors produced by PostgreSQL: stored attribute bytes (read with
//! pageinspect) and the output function's text for them. See
//! `testdata/README.md` for how they are made.

use std::collections::HashMap;

use super::{output, output_into, Align, Dialect, Field, TypeInfo};

const VECTORS: &str = include_str!("testdata/vectors.tsv");

/// One stored value and its expected text.
pub(super) struct Vector {
    pub(super) spec: String,
    pub(super) header: String,
    pub(super) expr: String,
    pub(super) stored: Vec<u8>,
    pub(super) shown: String,
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Enum labels by enum type OID, and every vector.
pub(super) fn load() -> (HashMap<u32, HashMap<u32, String>>, Vec<Vector>) {
    let mut enums: HashMap<u32, HashMap<u32, String>> = HashMap::new();
    let mut vectors = Vec::new();
    for line in VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        if f[0] == "enum" {
            let label = String::from_utf8(unhex(f[3])).expect("utf8 label");
            enums
                .entry(f[1].parse().expect("oid"))
                .or_default()
                .insert(f[2].parse().expect("oid"), label);
            continue;
        }
        assert_eq!(f.len(), 5, "bad vector line {line}");
        vectors.push(Vector {
            spec: f[0].to_string(),
            header: f[1].to_string(),
            expr: f[2].to_string(),
            stored: unhex(f[3]),
            shown: String::from_utf8(unhex(f[4])).expect("utf8 output"),
        });
    }
    (enums, vectors)
}

/// The [`TypeInfo`] a vector's type spec stands for.
pub(super) fn type_of(spec: &str, enums: &HashMap<u32, HashMap<u32, String>>) -> TypeInfo {
    let parts: Vec<&str> = spec.split(':').collect();
    let num = |i: usize| -> u32 { parts[i].parse().expect("oid in spec") };
    let enum_type =
        |oid: u32| TypeInfo::enum_type(oid, enums.get(&oid).cloned().unwrap_or_default());
    let builtin = |oid: u32| TypeInfo::builtin(oid).expect("builtin oid");
    match parts[0] {
        "b" => builtin(num(1)),
        "enum" => enum_type(num(1)),
        "enumarr" => TypeInfo::array_of(num(1), enum_type(num(2)), b','),
        "domain" => TypeInfo::domain(num(1), builtin(num(2))),
        "domainarr" => TypeInfo::array_of(num(1), TypeInfo::domain(num(2), builtin(num(3))), b','),
        "range" => TypeInfo::range_of(num(1), builtin(num(2))),
        "composite" => composite(num(1), parts[2]),
        "compositearr" => TypeInfo::array_of(num(1), composite(num(2), parts[3]), b','),
        "multirange" => {
            TypeInfo::multirange_of(num(1), TypeInfo::range_of(num(2), builtin(num(3))))
        }
        other => panic!("unknown type spec {other}"),
    }
}

/// A composite over built-in types from its spec: attribute type OIDs, or
/// `x<len><align>` for a dropped attribute.
fn composite(oid: u32, attrs: &str) -> TypeInfo {
    let fields = attrs
        .split(',')
        .filter(|a| !a.is_empty())
        .map(|a| match a.strip_prefix('x') {
            Some(layout) => {
                let (len, align) = layout.split_at(layout.len() - 1);
                let align = Align::from_code(align.as_bytes()[0]).expect("align code");
                Field::dropped(len.parse().expect("attlen"), false, align)
            }
            None => Field::of(TypeInfo::builtin(a.parse().expect("oid")).expect("builtin")),
        })
        .collect();
    TypeInfo::composite(oid, fields)
}

/// The datum as `output` takes it: fixed-length bytes as stored, varlena
/// payloads without their header. Also says whether the header was 1 byte.
pub(super) fn payload<'a>(ty: &TypeInfo, stored: &'a [u8]) -> (&'a [u8], bool) {
    if !ty.is_varlena() {
        return (stored, false);
    }
    let first = stored[0];
    if first & 1 == 1 {
        assert_ne!(first, 1, "TOAST pointer in a test vector");
        let len = usize::from(first >> 1);
        assert_eq!(len, stored.len(), "short varlena length");
        (&stored[1..], true)
    } else {
        let word = u32::from_le_bytes(stored[..4].try_into().expect("4 bytes"));
        assert_eq!(word & 3, 0, "compressed value in a test vector");
        assert_eq!((word >> 2) as usize, stored.len(), "varlena length");
        (&stored[4..], false)
    }
}

/// Checks every vector whose spec starts with one of `prefixes`.
fn check(prefixes: &[&str]) {
    let (enums, vectors) = load();
    let mut failures = Vec::new();
    let mut seen = 0;
    for v in vectors.iter().filter(|v| {
        prefixes
            .iter()
            .any(|p| v.spec == *p || v.spec.starts_with(&format!("{p}:")))
    }) {
        seen += 1;
        let ty = type_of(&v.spec, &enums);
        let (datum, _) = payload(&ty, &v.stored);
        match output(&ty, datum) {
            Ok(text) if text == v.shown => {}
            got => failures.push(format!(
                "{} {} {}: expected {:?}, got {:?}",
                v.spec, v.header, v.expr, v.shown, got
            )),
        }
        let mut buf = String::from("prefix|");
        let appended = output_into(&ty, datum, Dialect::default(), &mut buf);
        if appended.is_err() || buf != format!("prefix|{}", v.shown) {
            failures.push(format!(
                "{} {} {}: output_into gave {buf:?}",
                v.spec, v.header, v.expr
            ));
        }
    }
    assert!(seen > 0, "no vectors for {prefixes:?}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

macro_rules! vector_tests {
    ($($name:ident => [$($spec:expr),+];)+) => {
        $(#[test] fn $name() { check(&[$($spec),+]); })+
    };
}

vector_tests! {
    bool_vectors => ["b:16"];
    int2_vectors => ["b:21"];
    int4_vectors => ["b:23"];
    int8_vectors => ["b:20"];
    oid_vectors => ["b:26"];
    float4_vectors => ["b:700"];
    float8_vectors => ["b:701"];
    numeric_vectors => ["b:1700"];
    text_vectors => ["b:25"];
    varchar_vectors => ["b:1043"];
    bpchar_vectors => ["b:1042"];
    name_vectors => ["b:19"];
    char_vectors => ["b:18"];
    bytea_vectors => ["b:17"];
    date_vectors => ["b:1082"];
    time_vectors => ["b:1083"];
    timetz_vectors => ["b:1266"];
    timestamp_vectors => ["b:1114"];
    timestamptz_vectors => ["b:1184"];
    interval_vectors => ["b:1186"];
    uuid_vectors => ["b:2950"];
    json_vectors => ["b:114"];
    jsonb_vectors => ["b:3802"];
    inet_vectors => ["b:869"];
    cidr_vectors => ["b:650"];
    macaddr_vectors => ["b:829"];
    money_vectors => ["b:790"];
    pg_lsn_vectors => ["b:3220"];
    bit_vectors => ["b:1560", "b:1561"];
    varbit_vectors => ["b:1562", "b:1563"];
    macaddr8_vectors => ["b:774", "b:775"];
    xid_vectors => ["b:28", "b:1011"];
    cid_vectors => ["b:29", "b:1012"];
    xid8_vectors => ["b:5069", "b:271"];
    tid_vectors => ["b:27", "b:1010"];
    int2vector_vectors => ["b:22", "b:1006"];
    oidvector_vectors => ["b:30", "b:1013"];
    refcursor_vectors => ["b:1790", "b:2201"];
    snapshot_vectors => ["b:5038", "b:5039", "b:2970", "b:2949"];
    point_vectors => ["b:600", "b:1017"];
    lseg_vectors => ["b:601", "b:1018"];
    box_vectors => ["b:603", "b:1020"];
    line_vectors => ["b:628", "b:629"];
    circle_vectors => ["b:718", "b:719"];
    path_vectors => ["b:602", "b:1019"];
    polygon_vectors => ["b:604", "b:1027"];
    range_vectors => [
        "b:3904", "b:3926", "b:3906", "b:3908", "b:3910", "b:3912",
        "b:3905", "b:3927", "b:3907", "b:3909", "b:3911", "b:3913", "range"
    ];
    composite_vectors => ["composite", "compositearr"];
    tsvector_vectors => ["b:3614", "b:3643"];
    tsquery_vectors => ["b:3615", "b:3645"];
    xml_vectors => ["b:142", "b:143"];
    jsonpath_vectors => ["b:4072", "b:4073"];
    multirange_vectors => [
        "b:4451", "b:4536", "b:4532", "b:4533", "b:4534", "b:4535",
        "b:6150", "b:6157", "b:6151", "b:6152", "b:6153", "b:6155", "multirange"
    ];
    enum_vectors => ["enum", "enumarr"];
    domain_vectors => ["domain", "domainarr"];
    array_vectors => [
        "b:1007", "b:1016", "b:1005", "b:1000", "b:1028", "b:1021", "b:1022", "b:1231",
        "b:1009", "b:1015", "b:1014", "b:1003", "b:1002", "b:1001", "b:1182", "b:1183",
        "b:1270", "b:1115", "b:1185", "b:1187", "b:2951", "b:199", "b:3807", "b:1041",
        "b:651", "b:1040", "b:791", "b:3221"
    ];
}

#[test]
fn vectors_cover_both_header_forms_of_aligned_arrays() {
    let (enums, vectors) = load();
    // int8[] and float8[] elements are 8-byte aligned relative to a 4-byte
    // header; a 1-byte header shifts the payload, which must not matter.
    for spec in [
        "b:1016", "b:1022", "b:1115", "b:3221", "b:271", "b:1017", "b:3802",
    ] {
        let short = vectors
            .iter()
            .filter(|v| v.spec == spec)
            .filter(|v| payload(&type_of(&v.spec, &enums), &v.stored).1)
            .count();
        assert!(short > 0, "no 1-byte-header vector for {spec}");
    }
}
