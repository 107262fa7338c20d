//! PostgreSQL WAL positions.

use std::fmt;
use std::str::FromStr;

/// A log sequence number: a byte position in the WAL, printed `X/Y` like PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The invalid LSN, `0/0`.
    pub const INVALID: Lsn = Lsn(0);

    /// Whether this is a real position (not `0/0`).
    pub fn is_valid(self) -> bool {
        self.0 != 0
    }

    /// Offset of this position inside its segment, for a segment size in bytes.
    pub fn segment_offset(self, segment_size: u64) -> u64 {
        self.0 % segment_size
    }

    /// Offset of this position inside its WAL page.
    pub fn page_offset(self, page_size: u64) -> u64 {
        self.0 % page_size
    }

    /// `self - other` in bytes, or `None` if `other` is later.
    pub fn checked_sub(self, other: Lsn) -> Option<u64> {
        self.0.checked_sub(other.0)
    }

    /// This position advanced by `bytes`.
    pub fn advance(self, bytes: u64) -> Lsn {
        Lsn(self.0 + bytes)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// The text is not an LSN of the form `X/Y` with hexadecimal halves.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid LSN {0:?}: expected two hexadecimal numbers separated by '/', like 0/16B3748")]
pub struct ParseLsnError(pub String);

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError(s.to_string());
        let (hi, lo) = s.trim().split_once('/').ok_or_else(err)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

impl serde::Serialize for Lsn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Lsn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `pg_lsn` values in and out of PostgreSQL (binary: a big-endian u64).
#[cfg(feature = "postgres")]
mod pg {
    use bytes::BufMut;
    use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};

    use super::Lsn;

    impl ToSql for Lsn {
        fn to_sql(
            &self,
            _: &Type,
            out: &mut bytes::BytesMut,
        ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
            out.put_u64(self.0);
            Ok(IsNull::No)
        }

        fn accepts(ty: &Type) -> bool {
            *ty == Type::PG_LSN
        }

        to_sql_checked!();
    }

    impl<'a> FromSql<'a> for Lsn {
        fn from_sql(
            _: &Type,
            raw: &'a [u8],
        ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
            let bytes: [u8; 8] = raw
                .try_into()
                .map_err(|_| format!("a pg_lsn of {} bytes", raw.len()))?;
            Ok(Lsn(u64::from_be_bytes(bytes)))
        }

        fn accepts(ty: &Type) -> bool {
            *ty == Type::PG_LSN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trips_through_text() {
        for text in ["0/0", "0/16B3748", "1/0", "FFFFFFFF/FFFFFFFF"] {
            let lsn: Lsn = text.parse().unwrap();
            assert_eq!(lsn.to_string(), text);
        }
        assert_eq!("0/16b3748".parse::<Lsn>().unwrap(), Lsn(0x16B3748));
        assert!("16B3748".parse::<Lsn>().is_err());
        assert!("0/1/2".parse::<Lsn>().is_err());
        assert!("x/1".parse::<Lsn>().is_err());
        assert_eq!(Lsn(0x0300_0028).segment_offset(16 << 20), 0x28);
    }
}
