//! Quoting for the SQL walfill builds, and descriptions of PostgreSQL errors.

/// Quotes an identifier, always (so case and keywords survive).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal (walfill's sessions pin
/// `standard_conforming_strings = on`).
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

/// `"schema"."name"`.
pub fn quote_qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// Describes an error and every cause under it, `outer: inner: ...`.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        // A client error says only "db error"; what the server said is in
        // its description, and nothing under it adds to that.
        #[cfg(feature = "postgres")]
        if let Some(pg) = s.downcast_ref::<tokio_postgres::Error>() {
            let next = describe_pg_error(pg);
            if !text.contains(&next) {
                text.push_str(": ");
                text.push_str(&next);
            }
            break;
        }
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(feature = "postgres")]
pub use pg::describe_pg_error;

#[cfg(feature = "postgres")]
mod pg {
    /// Describes a database error with everything the server said: message,
    /// detail, hint and SQLSTATE. Other errors print their cause chain.
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
        super::error_chain(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes() {
        assert_eq!(quote_ident("Order\"s"), "\"Order\"\"s\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(ident_list(["a", "B"]), "\"a\", \"B\"");
        assert_eq!(quote_qualified("my.s", "t"), "\"my.s\".\"t\"");
    }

    #[test]
    fn chains_name_every_cause() {
        let inner = std::io::Error::other("connection refused");
        let outer = std::io::Error::other(Wrapper(inner));
        assert_eq!(error_chain(&outer), "outer: connection refused");
    }

    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("outer")
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
