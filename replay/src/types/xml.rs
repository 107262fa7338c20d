//! xml, printed the way `xml_out` prints it: the stored text, except for
//! its XML declaration.
//!
//! A value that starts with a well-formed declaration (`<?xml`, blank,
//! `version=`, optional `encoding=` and `standalone=`, `?>`, all ASCII)
//! prints `<?xml version="V" standalone="S"?>` in its place when the
//! version is not 1.0 or it says standalone (the encoding is never
//! printed), and nothing otherwise, eating one newline after it. A value
//! without a declaration is printed as stored, except that a newline it
//! starts with is eaten too. A declaration that does not parse (the server
//! warns) leaves the value as stored.

use super::error::{malformed, TypeError};

/// What a declaration says, and where it ends.
struct Declaration<'a> {
    len: usize,
    version: Option<&'a str>,
    standalone: Option<bool>,
}

/// `xml_out`.
pub(super) fn xml_out(oid: u32, datum: &[u8], out: &mut String) -> Result<(), TypeError> {
    let text = std::str::from_utf8(datum)
        .map_err(|e| malformed(oid, e.valid_up_to(), "xml is not valid UTF-8"))?;
    // The server reads the value as a C string.
    let text = text.split('\0').next().unwrap_or_default();
    let Some(decl) = declaration(text.as_bytes()) else {
        out.push_str(text);
        return Ok(());
    };
    let rest = text.get(decl.len..).unwrap_or_default();
    let printed = decl.version.is_some_and(|v| v != "1.0") || decl.standalone.is_some();
    if printed {
        out.push_str("<?xml version=\"");
        out.push_str(decl.version.unwrap_or("1.0"));
        out.push('"');
        match decl.standalone {
            Some(true) => out.push_str(" standalone=\"yes\""),
            Some(false) => out.push_str(" standalone=\"no\""),
            None => {}
        }
        out.push_str("?>");
        out.push_str(rest);
    } else {
        out.push_str(rest.strip_prefix('\n').unwrap_or(rest));
    }
    Ok(())
}

/// `xmlIsBlank_ch`.
fn blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// `parse_xml_decl`: the declaration at the start of `s` (of length 0 when
/// there is none), or `None` when one starts but does not parse.
fn declaration(s: &[u8]) -> Option<Declaration<'_>> {
    let none = Declaration {
        len: 0,
        version: None,
        standalone: None,
    };
    if !s.starts_with(b"<?xml") {
        return Some(none);
    }
    let after = s.get(5).copied().unwrap_or(0);
    // `<?xml-stylesheet ...?>` and the like are processing instructions,
    // not declarations. A name character after `<?xml` means one; any
    // other character but a blank fails to parse. Either way the value
    // prints as stored, so telling them apart is not needed.
    if !blank(after) {
        return if after.is_ascii_alphanumeric() || matches!(after, b'.' | b'-' | b'_' | b':') {
            Some(none)
        } else {
            None
        };
    }
    let skip = |mut p: usize| {
        while s.get(p).copied().is_some_and(blank) {
            p += 1;
        }
        p
    };
    let mut p = skip(5);
    let (version, next) = attribute(s, p, b"version")?;
    p = next;
    let mut standalone = None;
    // encoding: parsed, never printed.
    let q = skip(p);
    if s[q..].starts_with(b"encoding") {
        if !s.get(p).copied().is_some_and(blank) {
            return None;
        }
        p = attribute(s, q, b"encoding")?.1;
    }
    let q = skip(p);
    if s[q..].starts_with(b"standalone") {
        if !s.get(p).copied().is_some_and(blank) {
            return None;
        }
        let v = skip(q + 10);
        if s.get(v) != Some(&b'=') {
            return None;
        }
        let v = skip(v + 1);
        let value = s.get(v..).unwrap_or_default();
        if value.starts_with(b"'yes'") || value.starts_with(b"\"yes\"") {
            standalone = Some(true);
            p = v + 5;
        } else if value.starts_with(b"'no'") || value.starts_with(b"\"no\"") {
            standalone = Some(false);
            p = v + 4;
        } else {
            return None;
        }
    }
    let p = skip(p);
    if !s[p..].starts_with(b"?>") {
        return None;
    }
    let len = p + 2;
    if !s[..len].is_ascii() {
        return None;
    }
    Some(Declaration {
        len,
        version: Some(version),
        standalone,
    })
}

/// `name = 'value'` or `name = "value"` at `p` (already past blanks):
/// the value and the offset after its closing quote.
fn attribute<'a>(s: &'a [u8], p: usize, name: &[u8]) -> Option<(&'a str, usize)> {
    if !s.get(p..)?.starts_with(name) {
        return None;
    }
    let mut p = p + name.len();
    while s.get(p).copied().is_some_and(blank) {
        p += 1;
    }
    if s.get(p) != Some(&b'=') {
        return None;
    }
    p += 1;
    while s.get(p).copied().is_some_and(blank) {
        p += 1;
    }
    let quote = *s.get(p).filter(|&&q| q == b'\'' || q == b'"')?;
    let end = p + 1 + s.get(p + 1..)?.iter().position(|&b| b == quote)?;
    let value = std::str::from_utf8(s.get(p + 1..end)?).ok()?;
    Some((value, end + 1))
}
