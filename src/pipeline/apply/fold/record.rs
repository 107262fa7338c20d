//! The byte form of one pending write (a key and its [`Entry`]), shared by
//! the fold's arena and the sorted runs an external fold spills: one
//! allocation-free record per key instead of a map of owned strings.
//!
//! A record is the key, then the entry:
//! - key: a count, then each column's text as a length and its bytes;
//! - operation (one byte), commit LSN (8 bytes), seq, xid (0 when unknown,
//!   else xid + 1);
//! - values: a count, then each value as a tag (0 NULL, 1 unchanged,
//!   2 + length for text) and the text's bytes;
//! - fill key: 0, or 1 and a key.
//!
//! Counts, lengths, seq, xid and tags are LEB128 varints. The key comes
//! first and its encoding is canonical, so two records are of the same key
//! exactly when their key prefixes are equal, and [`cmp_keys`] orders
//! records as `Vec<String>` orders keys.

use std::cmp::Ordering;
use std::io;

use walfill_core::{Datum, Lsn, Version};

use super::{Entry, Op};

/// Appends `key` and `entry` as one record.
pub(crate) fn encode(out: &mut Vec<u8>, key: &[String], entry: &Entry) {
    encode_key(out, key);
    out.push(match entry.op {
        Op::Upsert => 0,
        Op::Delete => 1,
    });
    out.extend(entry.version.commit_lsn.0.to_le_bytes());
    put_varint(out, u64::from(entry.version.seq));
    put_varint(out, entry.xid.map_or(0, |x| u64::from(x) + 1));
    put_varint(out, entry.values.len() as u64);
    for value in &entry.values {
        match value {
            Datum::Null => put_varint(out, 0),
            Datum::Unchanged => put_varint(out, 1),
            Datum::Text(t) => {
                put_varint(out, t.len() as u64 + 2);
                out.extend(t.as_bytes());
            }
        }
    }
    match &entry.fill_key {
        Some(fill) => {
            out.push(1);
            encode_key(out, fill);
        }
        None => out.push(0),
    }
}

/// Appends `key` alone: the prefix of every record of that key.
pub(crate) fn encode_key(out: &mut Vec<u8>, key: &[String]) {
    put_varint(out, key.len() as u64);
    for column in key {
        put_varint(out, column.len() as u64);
        out.extend(column.as_bytes());
    }
}

/// The key and entry of a whole record.
pub(crate) fn decode(record: &[u8]) -> io::Result<(Vec<String>, Entry)> {
    let mut b = Bytes(record);
    let key = b.key()?;
    let op = match b.u8()? {
        0 => Op::Upsert,
        1 => Op::Delete,
        _ => return Err(corrupt()),
    };
    let version = b.version()?;
    let xid = match b.varint()? {
        0 => None,
        x => Some(u32::try_from(x - 1).map_err(|_| corrupt())?),
    };
    let count = b.varint()? as usize;
    let mut values = Vec::with_capacity(count.min(record.len()));
    for _ in 0..count {
        values.push(match b.varint()? {
            0 => Datum::Null,
            1 => Datum::Unchanged,
            n => Datum::Text(b.string(usize::try_from(n - 2).map_err(|_| corrupt())?)?),
        });
    }
    let fill_key = match b.u8()? {
        0 => None,
        1 => Some(b.key()?),
        _ => return Err(corrupt()),
    };
    if !b.0.is_empty() {
        return Err(corrupt());
    }
    Ok((
        key,
        Entry {
            op,
            version,
            xid,
            values,
            fill_key,
        },
    ))
}

/// The key of a record (or of a bare key's encoding).
pub(crate) fn decode_key(record: &[u8]) -> io::Result<Vec<String>> {
    Bytes(record).key()
}

/// How many leading bytes of `record` are its key.
pub(crate) fn key_len(record: &[u8]) -> io::Result<usize> {
    let mut b = Bytes(record);
    b.skip_key()?;
    Ok(record.len() - b.0.len())
}

/// The version of a record's entry.
pub(crate) fn version(record: &[u8]) -> io::Result<Version> {
    let mut b = Bytes(record);
    b.skip_key()?;
    b.u8()?;
    b.version()
}

/// Orders two records (or bare keys) by key, as `Vec<String>` orders
/// them: column by column, a shorter key first when it is a prefix. A
/// damaged encoding orders as if it ended there.
pub(crate) fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a, mut b) = (Bytes(a), Bytes(b));
    let (na, nb) = (a.varint().unwrap_or(0), b.varint().unwrap_or(0));
    for _ in 0..na.min(nb) {
        match (a.column(), b.column()) {
            (Ok(x), Ok(y)) => match x.cmp(y) {
                Ordering::Equal => {}
                other => return other,
            },
            (x, y) => return x.is_ok().cmp(&y.is_ok()),
        }
    }
    na.cmp(&nb)
}

/// Appends `v` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// How many bytes [`put_varint`] takes for `v`.
pub(crate) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a LEB128 varint at the start of `bytes`: its value and length.
pub(crate) fn read_varint(bytes: &[u8]) -> io::Result<(u64, usize)> {
    let mut b = Bytes(bytes);
    let v = b.varint()?;
    Ok((v, bytes.len() - b.0.len()))
}

pub(crate) fn corrupt() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "a folded record is damaged")
}

/// A cursor over one record.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(corrupt());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn varint(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt())
    }
    fn version(&mut self) -> io::Result<Version> {
        let lsn = u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| corrupt())?);
        let seq = u32::try_from(self.varint()?).map_err(|_| corrupt())?;
        Ok(Version {
            commit_lsn: Lsn(lsn),
            seq,
        })
    }
    fn column(&mut self) -> io::Result<&'a [u8]> {
        let n = usize::try_from(self.varint()?).map_err(|_| corrupt())?;
        self.take(n)
    }
    fn string(&mut self, n: usize) -> io::Result<String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| corrupt())
    }
    fn key(&mut self) -> io::Result<Vec<String>> {
        let n = self.varint()? as usize;
        let mut key = Vec::with_capacity(n.min(self.0.len()));
        for _ in 0..n {
            let column = self.column()?;
            key.push(String::from_utf8(column.to_vec()).map_err(|_| corrupt())?);
        }
        Ok(key)
    }
    fn skip_key(&mut self) -> io::Result<()> {
        let n = self.varint()?;
        for _ in 0..n {
            self.column()?;
        }
        Ok(())
    }
}

/// Entries of every shape, for tests of what stores records.
#[cfg(test)]
pub(crate) mod testing {
    use walfill_core::{Datum, Lsn, Version};

    use crate::pipeline::apply::fold::{Entry, Op};

    /// The `n`th entry: a delete without values, else an upsert; versions
    /// grow with `n`; some with an xid, some with a fill key.
    pub(crate) fn entry(n: u64, values: Vec<Datum>) -> Entry {
        Entry {
            op: if values.is_empty() {
                Op::Delete
            } else {
                Op::Upsert
            },
            version: Version {
                commit_lsn: Lsn(n << 40 | n),
                seq: (n as u32).wrapping_mul(40503),
            },
            xid: (n % 2 == 0).then_some(u32::MAX - n as u32),
            values,
            fill_key: (n % 3 == 0).then(|| vec![format!("k{n}"), String::new()]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::entry;
    use super::*;

    #[test]
    fn records_read_back_with_their_key_version_and_order() {
        let values = [
            vec![],
            vec![Datum::Null, Datum::Text("ü\t\n".into())],
            vec![Datum::Unchanged, Datum::Text(String::new())],
            vec![Datum::Text("x".repeat(300))],
        ];
        let keys: Vec<Vec<String>> = vec![
            vec![],
            vec!["".into()],
            vec!["".into(), "a".into()],
            vec!["a".into()],
            vec!["a".into(), "".into()],
            vec!["ab".into()],
            vec!["b".into(), "a".into()],
            vec!["é".repeat(70)],
        ];
        let mut records = Vec::new();
        for (n, key) in keys.iter().enumerate() {
            let e = entry(n as u64, values[n % values.len()].clone());
            let mut record = Vec::new();
            encode(&mut record, key, &e);
            assert_eq!(decode(&record).unwrap(), (key.clone(), e.clone()));
            assert_eq!(decode_key(&record).unwrap(), *key);
            assert_eq!(version(&record).unwrap(), e.version);
            let mut bare = Vec::new();
            encode_key(&mut bare, key);
            assert_eq!(&record[..key_len(&record).unwrap()], bare.as_slice());
            records.push(record);
        }
        for (i, a) in records.iter().enumerate() {
            for (j, b) in records.iter().enumerate() {
                assert_eq!(cmp_keys(a, b), keys[i].cmp(&keys[j]), "{i} {j}");
            }
        }
    }

    #[test]
    fn varints_round_trip() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(read_varint(&out).unwrap(), (v, out.len()));
        }
        assert!(read_varint(&[0x80]).is_err());
        assert!(read_varint(&[0xff; 11]).is_err());
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let key = vec!["k".to_string()];
        let mut record = Vec::new();
        encode(&mut record, &key, &entry(3, vec![Datum::Text("v".into())]));
        assert!(decode(&record).is_ok());
        for cut in 0..record.len() {
            assert!(decode(&record[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }
}
