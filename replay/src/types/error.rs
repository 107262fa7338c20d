//! Errors of datum output.

use thiserror::Error;

/// Why a datum could not be printed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TypeError {
    /// The type (or an element or base type inside it) is not one this module
    /// can print; the caller names the column and falls back.
    #[error("unsupported type {oid}{}", name_suffix(name))]
    Unsupported {
        /// OID of the type that is not supported.
        oid: u32,
        /// Its name, if the catalog gave one.
        name: Option<String>,
    },
    /// The stored bytes are not a valid value of the type.
    #[error("malformed value of type {oid} at byte {offset}: {reason}")]
    Malformed {
        /// OID of the type whose bytes are bad (the innermost one).
        oid: u32,
        /// Offset into the datum handed to that type's output, in bytes.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// An enum value whose `pg_enum` row the type description does not know
    /// (for example a label added after the description was taken).
    #[error("enum type {type_oid} has no label for pg_enum row {value_oid}")]
    UnknownEnumValue {
        /// The enum type.
        type_oid: u32,
        /// The stored `pg_enum` row OID.
        value_oid: u32,
    },
}

/// ` (name)` when the name is known.
fn name_suffix(name: &Option<String>) -> String {
    name.as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default()
}

/// Shorthand for a [`TypeError::Malformed`].
pub(crate) fn malformed(oid: u32, offset: usize, reason: &'static str) -> TypeError {
    TypeError::Malformed {
        oid,
        offset,
        reason,
    }
}
