//! Constant fields added to the end of every row of a chunk on its way to
//! the destination.
//!
//! A chunk copied straight into a version's table carries its version
//! (`_walfill_lsn`, `_walfill_seq`) this way: the rows' COPY names those
//! columns too, and nothing about the table changes from chunk to chunk,
//! so chunks of different versions load side by side.

use bytes::{BufMut, BytesMut};

use crate::copy_data::{escape_copy_field, CopyFormat, BINARY_HEADER};
use crate::error::SnapshotError;

/// Fields to append to each row, in both COPY formats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSuffix {
    fields: i16,
    /// `\t`-separated text forms, each with its leading tab.
    text: Vec<u8>,
    /// Length words and send forms.
    binary: Vec<u8>,
}

impl RowSuffix {
    /// The fields `values`, each as its text form and its binary send form.
    pub fn new(values: &[(&str, &[u8])]) -> RowSuffix {
        let mut text = String::new();
        let mut binary = Vec::new();
        for (t, b) in values {
            text.push('\t');
            escape_copy_field(t, &mut text);
            binary.extend((b.len() as i32).to_be_bytes());
            binary.extend(*b);
        }
        RowSuffix {
            fields: values.len() as i16,
            text: text.into_bytes(),
            binary,
        }
    }

    /// Appends `piece` (whole rows of COPY data in `format`; with
    /// `first`, the chunk's first piece, which in binary starts with the
    /// header) to `out` with the fields added to each row.
    pub(crate) fn apply(
        &self,
        format: CopyFormat,
        piece: &[u8],
        first: bool,
        out: &mut BytesMut,
    ) -> Result<(), SnapshotError> {
        out.reserve(piece.len() + piece.len() / 4);
        match format {
            CopyFormat::Text => {
                for line in piece.split_inclusive(|b| *b == b'\n') {
                    let Some(row) = line.strip_suffix(b"\n") else {
                        return Err(malformed());
                    };
                    out.put_slice(row);
                    out.put_slice(&self.text);
                    out.put_u8(b'\n');
                }
            }
            CopyFormat::Binary => {
                let mut rest = piece;
                if first {
                    rest = rest.strip_prefix(BINARY_HEADER).ok_or_else(malformed)?;
                    out.put_slice(BINARY_HEADER);
                }
                while !rest.is_empty() {
                    let count = i16::from_be_bytes(word(rest, 0)?);
                    if count == -1 {
                        out.put_slice(rest);
                        if rest.len() != 2 {
                            return Err(malformed());
                        }
                        break;
                    }
                    let mut at = 2;
                    for _ in 0..count.max(0) {
                        let len = i32::from_be_bytes(word(rest, at)?);
                        at += 4 + usize::try_from(len).unwrap_or(0);
                    }
                    let row = rest.get(2..at).ok_or_else(malformed)?;
                    out.put_i16(count + self.fields);
                    out.put_slice(row);
                    out.put_slice(&self.binary);
                    rest = &rest[at..];
                }
            }
        }
        Ok(())
    }
}

fn word<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], SnapshotError> {
    bytes
        .get(at..at + N)
        .and_then(|w| w.try_into().ok())
        .ok_or_else(malformed)
}

fn malformed() -> SnapshotError {
    SnapshotError::Protocol("malformed COPY data on its way to the destination".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy_data::tests::binary_row;

    fn suffix() -> RowSuffix {
        RowSuffix::new(&[
            ("0/16B3748", &0x16B3748u64.to_be_bytes()),
            ("-3", &(-3i32).to_be_bytes()),
        ])
    }

    #[test]
    fn text_rows_get_the_fields_before_their_newline() {
        let mut out = BytesMut::new();
        suffix()
            .apply(CopyFormat::Text, b"1\ta\\tb\n2\t\\N\n", true, &mut out)
            .unwrap();
        assert_eq!(
            &out[..],
            b"1\ta\\tb\t0/16B3748\t-3\n2\t\\N\t0/16B3748\t-3\n"
        );
        assert!(suffix()
            .apply(CopyFormat::Text, b"1\tcut off", false, &mut BytesMut::new())
            .is_err());
    }

    #[test]
    fn binary_rows_get_the_fields_after_their_own() {
        let lsn = 0x16B3748u64.to_be_bytes();
        let seq = (-3i32).to_be_bytes();
        let mut piece = BINARY_HEADER.to_vec();
        piece.extend(binary_row(&[Some(b"\0\0\0\x07"), None]));
        piece.extend(binary_row(&[Some(b"abc"), Some(b"")]));
        let mut out = BytesMut::new();
        suffix()
            .apply(CopyFormat::Binary, &piece, true, &mut out)
            .unwrap();
        let mut expected = BINARY_HEADER.to_vec();
        expected.extend(binary_row(&[
            Some(b"\0\0\0\x07"),
            None,
            Some(&lsn),
            Some(&seq),
        ]));
        expected.extend(binary_row(&[
            Some(b"abc"),
            Some(b""),
            Some(&lsn),
            Some(&seq),
        ]));
        assert_eq!(&out[..], &expected[..]);

        // A later piece: no header; the last one ends with the trailer.
        let mut later = binary_row(&[None, None]);
        later.extend((-1i16).to_be_bytes());
        let mut out = BytesMut::new();
        suffix()
            .apply(CopyFormat::Binary, &later, false, &mut out)
            .unwrap();
        let mut expected = binary_row(&[None, None, Some(&lsn), Some(&seq)]);
        expected.extend((-1i16).to_be_bytes());
        assert_eq!(&out[..], &expected[..]);

        // Damage is refused, never read past.
        let row = binary_row(&[Some(b"abc")]);
        for cut in 1..row.len() {
            assert!(suffix()
                .apply(CopyFormat::Binary, &row[..cut], false, &mut BytesMut::new())
                .is_err());
        }
        assert!(suffix()
            .apply(CopyFormat::Binary, &row, true, &mut BytesMut::new())
            .is_err());
    }
}
