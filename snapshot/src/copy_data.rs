//! COPY data in its two encodings: the text format's escaping and the
//! binary format's header and rows.
//!
//! Binary COPY moves each value in its type's send/receive form: nothing is
//! printed by the source or parsed by the destination as text. It is used
//! only where it is portable between the two databases (see
//! [`crate::format`]).

use bytes::{BufMut, BytesMut};

use crate::error::SnapshotError;

/// The signature, flags and header extension length of binary COPY data.
pub(crate) const BINARY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// How a chunk's rows travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CopyFormat {
    /// COPY text format: every value printed by its type's output function
    /// and parsed again by its input function.
    #[default]
    Text,
    /// COPY binary format: every value in its type's send/receive form.
    Binary,
}

impl CopyFormat {
    /// The `COPY` option that selects this format (with a leading space),
    /// or nothing for text.
    pub fn option(self) -> &'static str {
        match self {
            CopyFormat::Text => "",
            CopyFormat::Binary => " (FORMAT binary)",
        }
    }

    /// `text` or `binary`, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CopyFormat::Text => "text",
            CopyFormat::Binary => "binary",
        }
    }
}

/// One row of binary COPY data: its fields' byte ranges.
pub(crate) struct BinaryRow<'a> {
    row: &'a [u8],
    /// Start of each field's length word.
    fields: Vec<usize>,
}

impl<'a> BinaryRow<'a> {
    /// Parses one row (without the header); `None` for the trailer.
    pub(crate) fn parse(row: &'a [u8]) -> Result<Option<BinaryRow<'a>>, SnapshotError> {
        let bad = || SnapshotError::Protocol("malformed binary COPY row from the source".into());
        let count = i16::from_be_bytes(
            row.get(..2)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        if count == -1 {
            return Ok(None);
        }
        let count = usize::try_from(count).map_err(|_| bad())?;
        let mut fields = Vec::with_capacity(count);
        let mut at = 2;
        for _ in 0..count {
            fields.push(at);
            let word: [u8; 4] = row
                .get(at..at + 4)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?;
            let len = i32::from_be_bytes(word);
            at += 4;
            if len >= 0 {
                at += len as usize;
            }
        }
        if at != row.len() {
            return Err(bad());
        }
        Ok(Some(BinaryRow { row, fields }))
    }

    /// Field `i` (`None` for NULL).
    pub(crate) fn field(&self, i: usize) -> Option<&'a [u8]> {
        let at = *self.fields.get(i)?;
        let len = i32::from_be_bytes(self.row[at..at + 4].try_into().ok()?);
        (len >= 0).then(|| &self.row[at + 4..at + 4 + len as usize])
    }

    /// Appends the row's first `keep` fields to `out`, as a row of its own.
    pub(crate) fn write_first(&self, keep: usize, out: &mut BytesMut) {
        let end = self.fields.get(keep).copied().unwrap_or(self.row.len());
        out.put_i16(keep as i16);
        out.put_slice(&self.row[2..end]);
    }
}

/// Strips the binary COPY header from the first message of a binary COPY
/// out stream.
pub(crate) fn strip_binary_header(first: &[u8]) -> Result<&[u8], SnapshotError> {
    let bad = || SnapshotError::Protocol("malformed binary COPY header from the source".into());
    if first.get(..11) != Some(&BINARY_HEADER[..11]) {
        return Err(bad());
    }
    let ext: [u8; 4] = first
        .get(15..19)
        .ok_or_else(bad)?
        .try_into()
        .map_err(|_| bad())?;
    let ext = usize::try_from(u32::from_be_bytes(ext)).map_err(|_| bad())?;
    first.get(19 + ext..).ok_or_else(bad)
}

/// Splits one row of COPY text format into its fields (`None` for `\N`).
pub fn split_copy_line(line: &[u8]) -> Result<Vec<Option<String>>, SnapshotError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.split(|b| *b == b'\t')
        .map(|field| {
            if field == b"\\N" {
                return Ok(None);
            }
            unescape_copy_field(field).map(Some)
        })
        .collect()
}

fn unescape_copy_field(field: &[u8]) -> Result<String, SnapshotError> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b != b'\\' || i + 1 == field.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = field[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                let mut digits = 1;
                while digits < 3 && i < field.len() && (b'0'..=b'7').contains(&field[i]) {
                    value = value * 8 + u32::from(field[i] - b'0');
                    i += 1;
                    digits += 1;
                }
                out.push(value as u8);
            }
            b'x' if i < field.len() && field[i].is_ascii_hexdigit() => {
                let mut value = 0u32;
                let mut digits = 0;
                while digits < 2 && i < field.len() && field[i].is_ascii_hexdigit() {
                    value = value * 16 + (field[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    digits += 1;
                }
                out.push(value as u8);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).map_err(|_| SnapshotError::Protocol("COPY field is not UTF-8".into()))
}

/// Escapes a value for COPY text format.
pub fn escape_copy_field(value: &str, out: &mut String) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn copy_text_round_trips() {
        let values = [
            "plain",
            "tab\there",
            "new\nline",
            "back\\slash",
            "ünï",
            "\r\u{8}\u{c}\u{b}",
        ];
        let mut line = String::new();
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            escape_copy_field(v, &mut line);
        }
        line.push_str("\t\\N\n");
        let fields = split_copy_line(line.as_bytes()).unwrap();
        let expected: Vec<Option<String>> = values
            .iter()
            .map(|v| Some(v.to_string()))
            .chain([None])
            .collect();
        assert_eq!(fields, expected);
        assert_eq!(
            split_copy_line(b"\\101\\x42\\.").unwrap(),
            vec![Some("AB.".to_string())]
        );
    }

    /// One row of binary COPY data with these fields (`None`: NULL).
    pub(crate) fn binary_row(fields: &[Option<&[u8]>]) -> Vec<u8> {
        let mut row = (fields.len() as i16).to_be_bytes().to_vec();
        for f in fields {
            match f {
                Some(bytes) => {
                    row.extend((bytes.len() as i32).to_be_bytes());
                    row.extend(*bytes);
                }
                None => row.extend((-1i32).to_be_bytes()),
            }
        }
        row
    }

    #[test]
    fn binary_rows_keep_their_first_fields() {
        let bytes = binary_row(&[Some(b"\0\0\0\x07"), None, Some(b"abc"), Some(b"7")]);
        let row = BinaryRow::parse(&bytes).unwrap().unwrap();
        assert_eq!(row.field(0), Some(&b"\0\0\0\x07"[..]));
        assert_eq!(row.field(1), None);
        assert_eq!(row.field(3), Some(&b"7"[..]));
        let mut out = BytesMut::new();
        row.write_first(3, &mut out);
        assert_eq!(
            &out[..],
            &binary_row(&[Some(b"\0\0\0\x07"), None, Some(b"abc")])[..]
        );
        assert!(BinaryRow::parse(&(-1i16).to_be_bytes()).unwrap().is_none());
        // Truncated and overlong rows are refused, never read past.
        assert!(BinaryRow::parse(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(BinaryRow::parse(&long).is_err());
        assert!(BinaryRow::parse(&[0]).is_err());
    }

    #[test]
    fn the_binary_header_is_checked_and_stripped() {
        let mut first = BINARY_HEADER.to_vec();
        first.extend(binary_row(&[Some(b"x")]));
        let rest = strip_binary_header(&first).unwrap();
        assert_eq!(rest, &binary_row(&[Some(b"x")])[..]);
        let mut with_extension = BINARY_HEADER[..15].to_vec();
        with_extension.extend(2u32.to_be_bytes());
        with_extension.extend(b"ab");
        with_extension.extend(binary_row(&[None]));
        assert_eq!(
            strip_binary_header(&with_extension).unwrap(),
            &binary_row(&[None])[..]
        );
        assert!(strip_binary_header(b"PGCOPY\n\xff\r\n").is_err());
        assert!(strip_binary_header(b"not a copy header at all").is_err());
    }
}
