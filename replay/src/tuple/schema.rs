//! What the tuple decoder needs to know about a relation's columns.
//!
//! A [`RelSchema`] lists every attribute of a relation in attnum order,
//! **dropped columns included**: old tuples still hold bytes for a dropped
//! column, so the decoder must step over them with the length and alignment
//! the column had. The catalog fills these types, either from the live
//! catalog or from the catalog journal carried alongside the WAL, which is why
//! they are serializable.

use serde::{Deserialize, Serialize};

/// The columns of one relation, in attnum order (1, 2, …), dropped ones
/// included, system columns excluded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelSchema {
    /// One entry per attribute; `attrs[i].attnum == i + 1`.
    pub attrs: Vec<AttrSchema>,
}

/// One attribute of a relation (a row of `pg_attribute` joined with the
/// storage facts of its type).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttrSchema {
    /// Column name (`........pg.dropped.N........` for dropped columns).
    pub name: String,
    /// 1-based attribute number.
    pub attnum: i16,
    /// Type OID (`atttypid`; 0 for dropped columns).
    pub type_oid: u32,
    /// Type modifier (`atttypmod`, -1 if none).
    pub typmod: i32,
    /// Stored length (`attlen`): > 0 fixed width, -1 varlena, -2 C string.
    pub len: i16,
    /// Whether the value is passed by value (`attbyval`).
    pub byval: bool,
    /// Alignment of the stored value (`attalign`).
    pub align: Align,
    /// Storage strategy of the column (`attstorage`).
    pub storage: Storage,
    /// Whether the column has been dropped (`attisdropped`).
    pub dropped: bool,
    /// The value rows written before the column was added hold, in the
    /// type's text output form (`attmissingval` when `atthasmissing`); `None`
    /// means such rows read as NULL.
    pub missing: Option<String>,
    /// Whether it is a stored generated column (`attgenerated`): logical
    /// decoding leaves such columns out of what it sends.
    #[serde(default)]
    pub generated: bool,
}

/// Alignment of a stored attribute (`attalign`, `typalign`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Align {
    /// `c`: no alignment.
    Char,
    /// `s`: 2 bytes.
    Short,
    /// `i`: 4 bytes.
    Int,
    /// `d`: 8 bytes.
    Double,
}

impl Align {
    /// The alignment for a catalog code (`c`, `s`, `i`, `d`).
    pub fn from_code(code: u8) -> Option<Align> {
        match code {
            b'c' => Some(Align::Char),
            b's' => Some(Align::Short),
            b'i' => Some(Align::Int),
            b'd' => Some(Align::Double),
            _ => None,
        }
    }

    /// The catalog code of this alignment.
    pub fn code(self) -> u8 {
        match self {
            Align::Char => b'c',
            Align::Short => b's',
            Align::Int => b'i',
            Align::Double => b'd',
        }
    }

    /// The alignment in bytes (1, 2, 4 or 8).
    pub fn bytes(self) -> usize {
        match self {
            Align::Char => 1,
            Align::Short => 2,
            Align::Int => 4,
            Align::Double => 8,
        }
    }

    /// `off` rounded up to this alignment, or `None` on overflow.
    pub(crate) fn align_up(self, off: usize) -> Option<usize> {
        let mask = self.bytes() - 1;
        off.checked_add(mask).map(|o| o & !mask)
    }
}

/// Storage strategy of a column (`attstorage`, `typstorage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Storage {
    /// `p`: always inline and uncompressed; varlenas keep a 4-byte header.
    Plain,
    /// `e`: may be moved out of line, never compressed.
    External,
    /// `m`: may be compressed; moved out of line only as a last resort.
    Main,
    /// `x`: may be compressed and moved out of line.
    Extended,
}

impl Storage {
    /// The storage strategy for a catalog code (`p`, `e`, `m`, `x`).
    pub fn from_code(code: u8) -> Option<Storage> {
        match code {
            b'p' => Some(Storage::Plain),
            b'e' => Some(Storage::External),
            b'm' => Some(Storage::Main),
            b'x' => Some(Storage::Extended),
            _ => None,
        }
    }

    /// The catalog code of this storage strategy.
    pub fn code(self) -> u8 {
        match self {
            Storage::Plain => b'p',
            Storage::External => b'e',
            Storage::Main => b'm',
            Storage::Extended => b'x',
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in [b'c', b's', b'i', b'd'] {
            assert_eq!(Align::from_code(c).map(Align::code), Some(c));
        }
        for c in [b'p', b'e', b'm', b'x'] {
            assert_eq!(Storage::from_code(c).map(Storage::code), Some(c));
        }
        assert_eq!(Align::from_code(b'x'), None);
        assert_eq!(Storage::from_code(b'i'), None);
    }

    #[test]
    fn align_up_rounds() {
        assert_eq!(Align::Char.align_up(5), Some(5));
        assert_eq!(Align::Short.align_up(5), Some(6));
        assert_eq!(Align::Int.align_up(5), Some(8));
        assert_eq!(Align::Int.align_up(8), Some(8));
        assert_eq!(Align::Double.align_up(9), Some(16));
        assert_eq!(Align::Double.align_up(usize::MAX), None);
    }
}
