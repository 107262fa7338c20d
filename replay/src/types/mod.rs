//! Datum bytes to PostgreSQL's text output.
//!
//! Logical decoding prints every column through its type's output function;
//! this module does the same from the bytes stored in the WAL, so that the
//! decoded values compare equal, character for character, with what the
//! server itself would print.
//!
//! # Inputs
//!
//! [`output`] takes a [`TypeInfo`] and the stored bytes of one non-null
//! value:
//!
//! - for fixed-length types, the `typlen` bytes as stored in the tuple
//!   (little-endian, x86-64);
//! - for varlena types, the *payload*: the bytes after the 1- or 4-byte
//!   varlena header, already decompressed and reassembled from TOAST. Arrays
//!   and jsonb lay out their insides relative to a 4-byte header; that is
//!   accounted for here, so the caller need not care which header the tuple
//!   used.
//!
//! # Session settings reproduced
//!
//! The output is the one a session with these settings gets, which are the
//! settings the oracle's walsender runs with: `TimeZone = 'UTC'`,
//! `DateStyle = 'ISO, MDY'`, `IntervalStyle = 'postgres'`,
//! `extra_float_digits = 1` (shortest exact floats), `bytea_output = 'hex'`,
//! `lc_monetary = 'C'`, server encoding UTF-8. The output is that of the
//! type's *output function*: `bool` prints `t`/`f` and `inet` omits a full
//! netmask, which is not what a `::text` cast shows.
//!
//! # Coverage
//!
//! Supported: bool, int2, int4, int8, oid, float4, float8, numeric, text,
//! varchar, bpchar, name, "char", bytea, date, time, timetz, timestamp,
//! timestamptz, interval, uuid, json, jsonb, jsonpath, inet, cidr, macaddr,
//! macaddr8, money, pg_lsn, bit, varbit, xid, xid8, cid, tid, int2vector,
//! oidvector, refcursor, pg_snapshot, txid_snapshot, tsvector, tsquery, xml,
//! the geometric types (point, lseg, box, line, circle, path, polygon),
//! enums, ranges and multiranges over any of these, composite types of any
//! of these, domains over any of these, and arrays of any of them. Any
//! other type yields [`TypeError::Unsupported`], so that the caller can name
//! the column and fall back. Bytes that are not a valid value yield
//! [`TypeError::Malformed`]; no input makes this module panic.

mod array;
mod bits;
mod builtin;
mod datetime;
mod error;
mod float;
mod geo;
#[cfg(test)]
mod hand_tests;
mod info;
mod intvector;
mod jsonb;
mod jsonpath;
mod network;
mod numeric;
mod pow5;
mod push;
mod range;
mod read;
mod record;
mod ryu;
mod scalar;
mod snapshot;
#[cfg(test)]
mod tests;
mod textsearch;
#[cfg(test)]
mod vectors;
mod xml;

pub use builtin::BaseType;
pub use error::TypeError;
pub use info::{Align, Field, TypeInfo, TypeKind};

/// What the server's major version changes in the text of the same stored
/// value: from PostgreSQL 17 an interval whose fields are all at their
/// maximum (minimum) is `infinity` (`-infinity`), where 15 and 16 print
/// the longest interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dialect {
    /// Intervals have infinities (PostgreSQL 17 and later).
    pub interval_infinities: bool,
}

impl Dialect {
    /// The dialect of PostgreSQL `major`.
    pub fn of(major: crate::wal::PgMajor) -> Dialect {
        Dialect {
            interval_infinities: major >= crate::wal::PgMajor::Pg17,
        }
    }
}

/// The text PostgreSQL 15's output function gives for a stored datum of
/// type `ty` (see the module documentation for what `datum` holds).
pub fn output(ty: &TypeInfo, datum: &[u8]) -> Result<String, TypeError> {
    let mut out = String::new();
    write(ty, datum, Dialect::default(), &mut out)?;
    Ok(out)
}

/// Like [`output`], for the server whose dialect is `dialect`, appending
/// to `out`, which lets a caller reuse one buffer for many values. On
/// error `out` is left as it was.
pub fn output_into(
    ty: &TypeInfo,
    datum: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    let start = out.len();
    let result = write(ty, datum, dialect, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Appends the text of `datum`; on error `out` may hold a partial value.
fn write(ty: &TypeInfo, datum: &[u8], dialect: Dialect, out: &mut String) -> Result<(), TypeError> {
    match &ty.kind {
        TypeKind::Base(base) => base_out(*base, ty.oid, datum, dialect, out),
        TypeKind::Enum { labels } => {
            let value = u32::from_le_bytes(read::exact(ty.oid, datum)?);
            let label = labels.get(&value).ok_or(TypeError::UnknownEnumValue {
                type_oid: ty.oid,
                value_oid: value,
            })?;
            out.push_str(label);
            Ok(())
        }
        TypeKind::Array { element, delimiter } => {
            array::array_out(ty.oid, element, *delimiter, datum, dialect, out)
        }
        TypeKind::Domain { base } => write(base, datum, dialect, out),
        TypeKind::Range { subtype } => {
            ensure_supported(subtype)?;
            range::range_out(ty.oid, subtype, datum, dialect, out)
        }
        TypeKind::Multirange { range } => {
            ensure_supported(range)?;
            range::multirange_out(ty.oid, range, datum, dialect, out)
        }
        TypeKind::Composite { fields } => {
            ensure_supported(ty)?;
            record::record_out(ty.oid, fields, datum, dialect, out)
        }
        TypeKind::Unsupported { name } => Err(TypeError::Unsupported {
            oid: ty.oid,
            name: name.clone(),
        }),
    }
}

/// Fails if `ty`, or a type inside it, cannot be printed: a container
/// fails even when it holds no value of that type.
fn ensure_supported(ty: &TypeInfo) -> Result<(), TypeError> {
    ty.first_unsupported()
        .map_or(Ok(()), |t| Err(unsupported(t)))
}

/// The error for a type that cannot be printed.
fn unsupported(ty: &TypeInfo) -> TypeError {
    let name = match &ty.kind {
        TypeKind::Unsupported { name } => name.clone(),
        _ => None,
    };
    TypeError::Unsupported { oid: ty.oid, name }
}

fn base_out(
    base: BaseType,
    oid: u32,
    datum: &[u8],
    dialect: Dialect,
    out: &mut String,
) -> Result<(), TypeError> {
    match base {
        BaseType::Bool => scalar::bool_out(oid, datum, out),
        BaseType::Char => scalar::char_out(oid, datum, out),
        BaseType::Name => scalar::name_out(oid, datum, out),
        BaseType::Int2 => scalar::int_out(oid, datum, 2, true, out),
        BaseType::Int4 => scalar::int_out(oid, datum, 4, true, out),
        BaseType::Int8 => scalar::int_out(oid, datum, 8, true, out),
        BaseType::Oid => scalar::int_out(oid, datum, 4, false, out),
        BaseType::Text
        | BaseType::Varchar
        | BaseType::Bpchar
        | BaseType::Json
        | BaseType::Refcursor => scalar::text_out(oid, datum, out),
        BaseType::Xid | BaseType::Cid => scalar::int_out(oid, datum, 4, false, out),
        BaseType::Xid8 => scalar::int_out(oid, datum, 8, false, out),
        BaseType::Tid => scalar::tid_out(oid, datum, out),
        BaseType::Int2vector => intvector::intvector_out(oid, datum, false, out),
        BaseType::Oidvector => intvector::intvector_out(oid, datum, true, out),
        BaseType::Bit | BaseType::Varbit => bits::varbit_out(oid, datum, out),
        BaseType::PgSnapshot | BaseType::TxidSnapshot => snapshot::snapshot_out(oid, datum, out),
        BaseType::Bytea => {
            scalar::bytea_out(datum, out);
            Ok(())
        }
        BaseType::Money => scalar::money_out(oid, datum, out),
        BaseType::Uuid => scalar::uuid_out(oid, datum, out),
        BaseType::Macaddr => scalar::macaddr_out::<6>(oid, datum, out),
        BaseType::Macaddr8 => scalar::macaddr_out::<8>(oid, datum, out),
        BaseType::PgLsn => scalar::pg_lsn_out(oid, datum, out),
        BaseType::Point => geo::geo_out(oid, geo::Shape::Point, datum, out),
        BaseType::Lseg => geo::geo_out(oid, geo::Shape::Lseg, datum, out),
        BaseType::Box => geo::geo_out(oid, geo::Shape::Box, datum, out),
        BaseType::Line => geo::geo_out(oid, geo::Shape::Line, datum, out),
        BaseType::Circle => geo::geo_out(oid, geo::Shape::Circle, datum, out),
        BaseType::Path => geo::geo_out(oid, geo::Shape::Path, datum, out),
        BaseType::Polygon => geo::geo_out(oid, geo::Shape::Polygon, datum, out),
        BaseType::Float4 => float::float4_out(oid, datum, out),
        BaseType::Float8 => float::float8_out(oid, datum, out),
        BaseType::Numeric => numeric::numeric_out(oid, datum, out),
        BaseType::Date => datetime::date_out(oid, datum, out),
        BaseType::Time => datetime::time_out(oid, datum, out),
        BaseType::Timetz => datetime::timetz_out(oid, datum, out),
        BaseType::Timestamp => datetime::timestamp_out(oid, datum, false, out),
        BaseType::Timestamptz => datetime::timestamp_out(oid, datum, true, out),
        BaseType::Interval => datetime::interval_out(oid, datum, dialect.interval_infinities, out),
        BaseType::Inet => network::inet_out(oid, datum, false, out),
        BaseType::Cidr => network::inet_out(oid, datum, true, out),
        BaseType::Jsonb => jsonb::jsonb_out(oid, datum, out),
        BaseType::Xml => xml::xml_out(oid, datum, out),
        BaseType::Jsonpath => jsonpath::jsonpath_out(oid, datum, out),
        BaseType::Tsvector => textsearch::tsvector_out(oid, datum, out),
        BaseType::Tsquery => textsearch::tsquery_out(oid, datum, out),
    }
}
