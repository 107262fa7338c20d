//! The built-in base types this module prints, with the `pg_type` facts
//! (OIDs, layout, array delimiter) that describe their stored values.

use serde::{Deserialize, Serialize};

use crate::tuple::Align;

/// The built-in scalar types this module can print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BaseType {
    /// `bool` (16).
    Bool,
    /// `bytea` (17).
    Bytea,
    /// `"char"` (18).
    Char,
    /// `name` (19).
    Name,
    /// `int8` (20).
    Int8,
    /// `int2` (21).
    Int2,
    /// `int2vector` (22).
    Int2vector,
    /// `int4` (23).
    Int4,
    /// `text` (25).
    Text,
    /// `oid` (26).
    Oid,
    /// `tid` (27).
    Tid,
    /// `xid` (28).
    Xid,
    /// `cid` (29).
    Cid,
    /// `oidvector` (30).
    Oidvector,
    /// `json` (114).
    Json,
    /// `xml` (142).
    Xml,
    /// `point` (600).
    Point,
    /// `lseg` (601).
    Lseg,
    /// `path` (602).
    Path,
    /// `box` (603).
    Box,
    /// `polygon` (604).
    Polygon,
    /// `line` (628).
    Line,
    /// `cidr` (650).
    Cidr,
    /// `float4` (700).
    Float4,
    /// `float8` (701).
    Float8,
    /// `circle` (718).
    Circle,
    /// `macaddr8` (774).
    Macaddr8,
    /// `money` (790).
    Money,
    /// `macaddr` (829).
    Macaddr,
    /// `inet` (869).
    Inet,
    /// `bpchar`, i.e. `char(n)` (1042).
    Bpchar,
    /// `varchar` (1043).
    Varchar,
    /// `date` (1082).
    Date,
    /// `time` (1083).
    Time,
    /// `timestamp` (1114).
    Timestamp,
    /// `timestamptz` (1184).
    Timestamptz,
    /// `interval` (1186).
    Interval,
    /// `timetz` (1266).
    Timetz,
    /// `bit` (1560).
    Bit,
    /// `varbit` (1562).
    Varbit,
    /// `numeric` (1700).
    Numeric,
    /// `refcursor` (1790).
    Refcursor,
    /// `uuid` (2950).
    Uuid,
    /// `txid_snapshot` (2970).
    TxidSnapshot,
    /// `pg_lsn` (3220).
    PgLsn,
    /// `tsvector` (3614).
    Tsvector,
    /// `tsquery` (3615).
    Tsquery,
    /// `jsonb` (3802).
    Jsonb,
    /// `jsonpath` (4072).
    Jsonpath,
    /// `pg_snapshot` (5038).
    PgSnapshot,
    /// `xid8` (5069).
    Xid8,
}

/// One row of the built-in table: type, OID, array type OID, typlen, byval,
/// align, delimiter (values of `pg_type.dat`, identical in PostgreSQL 15 to
/// 18).
struct Builtin {
    base: BaseType,
    oid: u32,
    array_oid: u32,
    len: i16,
    byval: bool,
    align: Align,
    delimiter: u8,
}

const fn row(
    base: BaseType,
    oid: u32,
    array_oid: u32,
    len: i16,
    byval: bool,
    align: Align,
) -> Builtin {
    Builtin {
        base,
        oid,
        array_oid,
        len,
        byval,
        align,
        delimiter: b',',
    }
}

const BUILTINS: &[Builtin] = &[
    row(BaseType::Bool, 16, 1000, 1, true, Align::Char),
    row(BaseType::Bytea, 17, 1001, -1, false, Align::Int),
    row(BaseType::Char, 18, 1002, 1, true, Align::Char),
    row(BaseType::Name, 19, 1003, 64, false, Align::Char),
    row(BaseType::Int8, 20, 1016, 8, true, Align::Double),
    row(BaseType::Int2, 21, 1005, 2, true, Align::Short),
    row(BaseType::Int2vector, 22, 1006, -1, false, Align::Int),
    row(BaseType::Int4, 23, 1007, 4, true, Align::Int),
    row(BaseType::Text, 25, 1009, -1, false, Align::Int),
    row(BaseType::Oid, 26, 1028, 4, true, Align::Int),
    row(BaseType::Tid, 27, 1010, 6, false, Align::Short),
    row(BaseType::Xid, 28, 1011, 4, true, Align::Int),
    row(BaseType::Cid, 29, 1012, 4, true, Align::Int),
    row(BaseType::Oidvector, 30, 1013, -1, false, Align::Int),
    row(BaseType::Json, 114, 199, -1, false, Align::Int),
    row(BaseType::Xml, 142, 143, -1, false, Align::Int),
    row(BaseType::Point, 600, 1017, 16, false, Align::Double),
    row(BaseType::Lseg, 601, 1018, 32, false, Align::Double),
    row(BaseType::Path, 602, 1019, -1, false, Align::Double),
    // box is the one built-in type whose array delimiter is not a comma.
    Builtin {
        delimiter: b';',
        ..row(BaseType::Box, 603, 1020, 32, false, Align::Double)
    },
    row(BaseType::Polygon, 604, 1027, -1, false, Align::Double),
    row(BaseType::Line, 628, 629, 24, false, Align::Double),
    row(BaseType::Cidr, 650, 651, -1, false, Align::Int),
    row(BaseType::Float4, 700, 1021, 4, true, Align::Int),
    row(BaseType::Float8, 701, 1022, 8, true, Align::Double),
    row(BaseType::Circle, 718, 719, 24, false, Align::Double),
    row(BaseType::Macaddr8, 774, 775, 8, false, Align::Int),
    row(BaseType::Money, 790, 791, 8, true, Align::Double),
    row(BaseType::Macaddr, 829, 1040, 6, false, Align::Int),
    row(BaseType::Inet, 869, 1041, -1, false, Align::Int),
    row(BaseType::Bpchar, 1042, 1014, -1, false, Align::Int),
    row(BaseType::Varchar, 1043, 1015, -1, false, Align::Int),
    row(BaseType::Date, 1082, 1182, 4, true, Align::Int),
    row(BaseType::Time, 1083, 1183, 8, true, Align::Double),
    row(BaseType::Timestamp, 1114, 1115, 8, true, Align::Double),
    row(BaseType::Timestamptz, 1184, 1185, 8, true, Align::Double),
    row(BaseType::Interval, 1186, 1187, 16, false, Align::Double),
    row(BaseType::Timetz, 1266, 1270, 12, false, Align::Double),
    row(BaseType::Bit, 1560, 1561, -1, false, Align::Int),
    row(BaseType::Varbit, 1562, 1563, -1, false, Align::Int),
    row(BaseType::Numeric, 1700, 1231, -1, false, Align::Int),
    row(BaseType::Refcursor, 1790, 2201, -1, false, Align::Int),
    row(BaseType::Uuid, 2950, 2951, 16, false, Align::Char),
    row(BaseType::TxidSnapshot, 2970, 2949, -1, false, Align::Double),
    row(BaseType::PgLsn, 3220, 3221, 8, true, Align::Double),
    row(BaseType::Tsvector, 3614, 3643, -1, false, Align::Int),
    row(BaseType::Tsquery, 3615, 3645, -1, false, Align::Int),
    row(BaseType::Jsonb, 3802, 3807, -1, false, Align::Int),
    row(BaseType::Jsonpath, 4072, 4073, -1, false, Align::Int),
    row(BaseType::PgSnapshot, 5038, 5039, -1, false, Align::Double),
    row(BaseType::Xid8, 5069, 271, 8, true, Align::Double),
];

impl BaseType {
    /// Every supported base type.
    pub const ALL: [BaseType; 51] = [
        BaseType::Bool,
        BaseType::Bytea,
        BaseType::Char,
        BaseType::Name,
        BaseType::Int8,
        BaseType::Int2,
        BaseType::Int2vector,
        BaseType::Int4,
        BaseType::Text,
        BaseType::Oid,
        BaseType::Tid,
        BaseType::Xid,
        BaseType::Cid,
        BaseType::Oidvector,
        BaseType::Json,
        BaseType::Xml,
        BaseType::Point,
        BaseType::Lseg,
        BaseType::Path,
        BaseType::Box,
        BaseType::Polygon,
        BaseType::Line,
        BaseType::Cidr,
        BaseType::Float4,
        BaseType::Float8,
        BaseType::Circle,
        BaseType::Macaddr8,
        BaseType::Money,
        BaseType::Macaddr,
        BaseType::Inet,
        BaseType::Bpchar,
        BaseType::Varchar,
        BaseType::Date,
        BaseType::Time,
        BaseType::Timestamp,
        BaseType::Timestamptz,
        BaseType::Interval,
        BaseType::Timetz,
        BaseType::Bit,
        BaseType::Varbit,
        BaseType::Numeric,
        BaseType::Refcursor,
        BaseType::Uuid,
        BaseType::TxidSnapshot,
        BaseType::PgLsn,
        BaseType::Tsvector,
        BaseType::Tsquery,
        BaseType::Jsonb,
        BaseType::Jsonpath,
        BaseType::PgSnapshot,
        BaseType::Xid8,
    ];

    fn row(self) -> &'static Builtin {
        // BUILTINS lists every variant once; the fallback is never taken but
        // keeps this total without a panic path.
        BUILTINS
            .iter()
            .find(|b| b.base == self)
            .unwrap_or(&BUILTINS[0])
    }

    /// The type's OID.
    pub fn oid(self) -> u32 {
        self.row().oid
    }

    /// The OID of the type's standard array type (`_typname`).
    pub fn array_oid(self) -> u32 {
        self.row().array_oid
    }

    /// The type's `typdelim`: what separates its values in an array's text
    /// (`;` for `box`, `,` for every other built-in type).
    pub fn delimiter(self) -> u8 {
        self.row().delimiter
    }

    /// `typlen`, `typbyval` and `typalign`.
    pub fn layout(self) -> (i16, bool, Align) {
        let b = self.row();
        (b.len, b.byval, b.align)
    }

    /// The C name of the type's output function (`typoutput`'s `prosrc`).
    pub fn output_function(self) -> &'static str {
        match self {
            BaseType::Bool => "boolout",
            BaseType::Bytea => "byteaout",
            BaseType::Char => "charout",
            BaseType::Name => "nameout",
            BaseType::Int8 => "int8out",
            BaseType::Int2 => "int2out",
            BaseType::Int2vector => "int2vectorout",
            BaseType::Int4 => "int4out",
            BaseType::Text | BaseType::Refcursor => "textout",
            BaseType::Oid => "oidout",
            BaseType::Tid => "tidout",
            BaseType::Xid => "xidout",
            BaseType::Cid => "cidout",
            BaseType::Oidvector => "oidvectorout",
            BaseType::Json => "json_out",
            BaseType::Xml => "xml_out",
            BaseType::Point => "point_out",
            BaseType::Lseg => "lseg_out",
            BaseType::Path => "path_out",
            BaseType::Box => "box_out",
            BaseType::Polygon => "poly_out",
            BaseType::Line => "line_out",
            BaseType::Cidr => "cidr_out",
            BaseType::Float4 => "float4out",
            BaseType::Float8 => "float8out",
            BaseType::Circle => "circle_out",
            BaseType::Macaddr8 => "macaddr8_out",
            BaseType::Money => "cash_out",
            BaseType::Macaddr => "macaddr_out",
            BaseType::Inet => "inet_out",
            BaseType::Bpchar => "bpcharout",
            BaseType::Varchar => "varcharout",
            BaseType::Date => "date_out",
            BaseType::Time => "time_out",
            BaseType::Timestamp => "timestamp_out",
            BaseType::Timestamptz => "timestamptz_out",
            BaseType::Interval => "interval_out",
            BaseType::Timetz => "timetz_out",
            BaseType::Bit => "bit_out",
            BaseType::Varbit => "varbit_out",
            BaseType::Numeric => "numeric_out",
            BaseType::Uuid => "uuid_out",
            BaseType::TxidSnapshot => "pg_snapshot_out",
            BaseType::PgLsn => "pg_lsn_out",
            BaseType::Tsvector => "tsvectorout",
            BaseType::Tsquery => "tsqueryout",
            BaseType::Jsonb => "jsonb_out",
            BaseType::Jsonpath => "jsonpath_out",
            BaseType::PgSnapshot => "pg_snapshot_out",
            BaseType::Xid8 => "xid8out",
        }
    }

    /// The base type whose output function has this C name: how a
    /// user-defined base type declared over that built-in function prints.
    pub fn from_output_function(name: &str) -> Option<BaseType> {
        BaseType::ALL
            .into_iter()
            .find(|b| b.output_function() == name)
    }

    /// The base type with this OID, if supported.
    pub fn from_oid(oid: u32) -> Option<BaseType> {
        BUILTINS.iter().find(|b| b.oid == oid).map(|b| b.base)
    }

    /// The base type whose standard array type has this OID.
    pub fn from_array_oid(oid: u32) -> Option<BaseType> {
        BUILTINS.iter().find(|b| b.array_oid == oid).map(|b| b.base)
    }
}

/// A built-in range type: its OID and its array's, its multirange's and
/// that one's array's, and its subtype (`pg_range`, PostgreSQL 15 to 18).
pub(super) struct BuiltinRange {
    pub(super) oid: u32,
    pub(super) array_oid: u32,
    pub(super) multirange_oid: u32,
    pub(super) multirange_array_oid: u32,
    pub(super) subtype: BaseType,
}

const fn range(
    oid: u32,
    array_oid: u32,
    multirange_oid: u32,
    multirange_array_oid: u32,
    subtype: BaseType,
) -> BuiltinRange {
    BuiltinRange {
        oid,
        array_oid,
        multirange_oid,
        multirange_array_oid,
        subtype,
    }
}

/// int4range, numrange, tsrange, tstzrange, daterange and int8range.
pub(super) const RANGES: &[BuiltinRange] = &[
    range(3904, 3905, 4451, 6150, BaseType::Int4),
    range(3906, 3907, 4532, 6151, BaseType::Numeric),
    range(3908, 3909, 4533, 6152, BaseType::Timestamp),
    range(3910, 3911, 4534, 6153, BaseType::Timestamptz),
    range(3912, 3913, 4535, 6155, BaseType::Date),
    range(3926, 3927, 4536, 6157, BaseType::Int8),
];

impl BuiltinRange {
    /// The built-in range whose range, multirange or array type has this OID.
    pub(super) fn find(oid: u32) -> Option<&'static BuiltinRange> {
        RANGES
            .iter()
            .find(|r| [r.oid, r.array_oid, r.multirange_oid, r.multirange_array_oid].contains(&oid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_are_unique_and_all_lists_every_row() {
        assert_eq!(BaseType::ALL.len(), BUILTINS.len());
        for (i, b) in BUILTINS.iter().enumerate() {
            assert!(BaseType::ALL.contains(&b.base));
            for other in &BUILTINS[i + 1..] {
                assert_ne!(b.base, other.base);
                assert_ne!(b.oid, other.oid);
                assert_ne!(b.array_oid, other.array_oid);
            }
        }
    }
}
