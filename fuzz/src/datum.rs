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
//! Besides "no panic": [`output`] and [`output_into`] agree, and on error
//! `output_into` leaves the buffer as it was, as documented.

use std::collections::HashMap;
use std::sync::OnceLock;

use walfill_replay::types::{output, output_into, BaseType, TypeInfo};

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

/// Prints `datum` as `ty` both ways and checks they agree.
pub fn print(ty: &TypeInfo, datum: &[u8]) {
    const PREFIX: &str = "prefix|";
    let direct = output(ty, datum);
    let mut buf = String::from(PREFIX);
    let appended = output_into(ty, datum, &mut buf);
    match (&direct, &appended) {
        (Ok(text), Ok(())) => assert_eq!(
            buf.strip_prefix(PREFIX),
            Some(text.as_str()),
            "output and output_into differ for type {}",
            ty.oid
        ),
        (Err(a), Err(b)) => {
            assert_eq!(
                a, b,
                "output and output_into fail differently for type {}",
                ty.oid
            );
            assert_eq!(
                buf, PREFIX,
                "output_into changed the buffer on error (type {})",
                ty.oid
            );
            let _ = a.to_string();
        }
        _ => panic!(
            "output gave {direct:?} but output_into {appended:?} for type {}",
            ty.oid
        ),
    }
}
