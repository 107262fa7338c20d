//! The `datum` target: stored datum bytes through `types::output`.
//!
//! # Input layout
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | type: index into [`types`] (modulo its length) |
//! | 1..   | the datum as `output` takes it (fixed-length bytes, or a varlena payload) |
//!
//! # What is checked
//!
//! Besides "no panic", with each input printed in the [`Dialect`] of every
//! supported major version:
//!
//! - [`output`] (PostgreSQL 15's text) and [`output_into`] in the default
//!   dialect agree;
//! - on error, `output_into` leaves the buffer as it was, as documented;
//! - the dialect changes only the text of valid values, never whether a
//!   value prints or the error it gives, and where a later version's text
//!   differs from 15's it holds an `infinity` (from 17 an interval whose
//!   fields are all at their extreme is infinite, the only difference
//!   [`Dialect`] documents).

use std::collections::HashMap;
use std::sync::OnceLock;

use walfill_replay::types::{output, output_into, BaseType, Dialect, TypeError, TypeInfo};
use walfill_replay::wal::PgMajor;

/// OIDs given to the domains, arrays of domains and the enum of the table
/// (arbitrary: no output depends on them).
const DOMAIN_OID_BASE: u32 = 90_000;
const DOMAIN_ARRAY_OID_BASE: u32 = 91_000;
const ENUM_OID: u32 = 92_000;
const ENUM_ARRAY_OID: u32 = 92_001;

/// Labels of the enum type, by `pg_enum` OID.
pub const ENUM_LABELS: [(u32, &str); 4] = [(1, "a"), (2, "happy"), (3, "with space"), (4, "ü")];

/// Every type the harnesses print, indexed by a selector byte:
///
/// - `0..n`: the built-in base types, in the order of [`BaseType::ALL`];
/// - `n..2n`: their standard array types;
/// - `2n..3n`: a domain over each base type;
/// - `3n..4n`: an array of each of those domains;
/// - `4n`: an enum ([`ENUM_LABELS`]), `4n + 1`: an array of it.
pub fn types() -> &'static [TypeInfo] {
    static TYPES: OnceLock<Vec<TypeInfo>> = OnceLock::new();
    TYPES.get_or_init(|| {
        let bases = BaseType::ALL.map(TypeInfo::base);
        let arrays = BaseType::ALL.map(|b| {
            TypeInfo::builtin(b.array_oid())
                .unwrap_or_else(|| TypeInfo::array_of(b.array_oid(), TypeInfo::base(b), b','))
        });
        let domain =
            |i: usize, b: BaseType| TypeInfo::domain(DOMAIN_OID_BASE + i as u32, TypeInfo::base(b));
        let domains = (0..BaseType::ALL.len()).map(|i| domain(i, BaseType::ALL[i]));
        let domain_arrays = (0..BaseType::ALL.len()).map(|i| {
            TypeInfo::array_of(
                DOMAIN_ARRAY_OID_BASE + i as u32,
                domain(i, BaseType::ALL[i]),
                b',',
            )
        });
        let labels: HashMap<u32, String> = ENUM_LABELS
            .iter()
            .map(|&(k, v)| (k, v.to_string()))
            .collect();
        let enum_type = TypeInfo::enum_type(ENUM_OID, labels);
        let enum_array = TypeInfo::array_of(ENUM_ARRAY_OID, enum_type.clone(), b',');
        bases
            .into_iter()
            .chain(arrays)
            .chain(domains)
            .chain(domain_arrays)
            .chain([enum_type, enum_array])
            .collect()
    })
}

/// What kind of type a selector stands for, for building seeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeSel {
    /// A base type.
    Base(BaseType),
    /// The standard array type of a base type.
    Array(BaseType),
    /// A domain over a base type.
    Domain(BaseType),
    /// An array of a domain over a base type.
    DomainArray(BaseType),
    /// The enum.
    Enum,
    /// The array of the enum.
    EnumArray,
}

/// The selector byte of a type in [`types`].
pub fn selector(sel: TypeSel) -> u8 {
    let n = BaseType::ALL.len();
    let idx = |b: BaseType| BaseType::ALL.iter().position(|&x| x == b).unwrap_or(0);
    let i = match sel {
        TypeSel::Base(b) => idx(b),
        TypeSel::Array(b) => n + idx(b),
        TypeSel::Domain(b) => 2 * n + idx(b),
        TypeSel::DomainArray(b) => 3 * n + idx(b),
        TypeSel::Enum => 4 * n,
        TypeSel::EnumArray => 4 * n + 1,
    };
    i as u8
}

/// Builds a `datum` input.
pub fn encode(sel: TypeSel, datum: &[u8]) -> Vec<u8> {
    let mut out = vec![selector(sel)];
    out.extend_from_slice(datum);
    out
}

/// Runs the `datum` harness on one input.
pub fn run(data: &[u8]) {
    let Some((&sel, datum)) = data.split_first() else {
        return;
    };
    let types = types();
    let ty = &types[usize::from(sel) % types.len()];
    print(ty, datum);
}

/// The dialects the harness prints in: one per supported major version.
const MAJORS: [PgMajor; 4] = [PgMajor::Pg15, PgMajor::Pg16, PgMajor::Pg17, PgMajor::Pg18];

/// Prints `datum` as `ty` with [`output`] and with [`output_into`] in every
/// dialect, and checks that they agree.
pub fn print(ty: &TypeInfo, datum: &[u8]) {
    let direct = output(ty, datum);
    let default = append(ty, datum, Dialect::default());
    match (&direct, &default) {
        (Ok(text), Ok(appended)) => assert_eq!(
            appended, text,
            "output and output_into differ for type {}",
            ty.oid
        ),
        (Err(a), Err(b)) => {
            assert_eq!(
                a, b,
                "output and output_into fail differently for type {}",
                ty.oid
            );
            let _ = a.to_string();
        }
        _ => panic!(
            "output gave {direct:?} but output_into {default:?} for type {}",
            ty.oid
        ),
    }
    let mut seen = vec![Dialect::default()];
    for major in MAJORS {
        let dialect = Dialect::of(major);
        if seen.contains(&dialect) {
            continue;
        }
        seen.push(dialect);
        let other = append(ty, datum, dialect);
        match (&default, &other) {
            (Ok(text), Ok(other_text)) => assert!(
                text == other_text || other_text.contains("infinity"),
                "{major:?} prints {other_text:?} where 15 prints {text:?} (type {}), \
                 and no interval in it is infinite",
                ty.oid
            ),
            (Err(a), Err(b)) => assert_eq!(
                a, b,
                "{major:?} fails differently from 15 for type {}",
                ty.oid
            ),
            _ => panic!(
                "15 gives {default:?} but {major:?} gives {other:?} for type {}",
                ty.oid
            ),
        }
    }
}

/// [`output_into`] onto a buffer that already holds text: returns what it
/// appended, after checking that on error it left the buffer as it was.
fn append(ty: &TypeInfo, datum: &[u8], dialect: Dialect) -> Result<String, TypeError> {
    const PREFIX: &str = "prefix|";
    let mut buf = String::from(PREFIX);
    let result = output_into(ty, datum, dialect, &mut buf);
    match result {
        Ok(()) => match buf.strip_prefix(PREFIX) {
            Some(text) => Ok(text.to_string()),
            None => panic!(
                "output_into changed the text before its own (type {}, {dialect:?})",
                ty.oid
            ),
        },
        Err(e) => {
            assert_eq!(
                buf, PREFIX,
                "output_into changed the buffer on error (type {}, {dialect:?})",
                ty.oid
            );
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest intervals, which PostgreSQL 17 prints as infinities, pass
    /// the dialect check alone and inside an array.
    #[test]
    fn infinite_intervals_differ_only_by_dialect() {
        for (time, days, months) in [
            (i64::MAX, i32::MAX, i32::MAX),
            (i64::MIN, i32::MIN, i32::MIN),
        ] {
            let mut datum = time.to_le_bytes().to_vec();
            datum.extend_from_slice(&days.to_le_bytes());
            datum.extend_from_slice(&months.to_le_bytes());
            let interval = TypeInfo::base(BaseType::Interval);
            let text = output(&interval, &datum).unwrap();
            let mut infinite = String::new();
            output_into(&interval, &datum, Dialect::of(PgMajor::Pg17), &mut infinite).unwrap();
            assert_ne!(text, infinite);
            assert!(infinite.ends_with("infinity"), "{infinite}");
            run(&encode(TypeSel::Base(BaseType::Interval), &datum));
            // A one-dimensional array without nulls: ndim, data offset (0),
            // element type, length, lower bound, then the element.
            let mut array: Vec<u8> = [1u32, 0, 1186, 1, 1]
                .iter()
                .flat_map(|n| n.to_le_bytes())
                .collect();
            array.extend_from_slice(&datum);
            let array_type = &types()[usize::from(selector(TypeSel::Array(BaseType::Interval)))];
            let mut infinite = String::new();
            output_into(
                array_type,
                &array,
                Dialect::of(PgMajor::Pg17),
                &mut infinite,
            )
            .unwrap();
            assert!(infinite.contains("infinity"), "{infinite}");
            run(&encode(TypeSel::Array(BaseType::Interval), &array));
        }
    }
}
