//! Quoting and small SQL helpers shared by walfill's SQL builders.

/// Quotes an identifier, always (so case and keywords survive).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal (standard_conforming_strings on, as since 9.1).
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `"a", "b", "c"`.
pub fn ident_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Describes a database error with everything the server said: message,
/// detail, hint and SQLSTATE. Other errors print their chain.
pub fn describe_pg_error(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        let mut text = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            text.push_str(&format!(" (detail: {detail})"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!(" (hint: {hint})"));
        }
        if let Some(tokio_postgres::error::ErrorPosition::Original(p)) = db.position() {
            text.push_str(&format!(" at character {p}"));
        }
        text.push_str(&format!(" [SQLSTATE {}]", db.code().code()));
        return text;
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes() {
        assert_eq!(quote_ident("Order\"s"), "\"Order\"\"s\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(ident_list(["a", "B"]), "\"a\", \"B\"");
    }
}
