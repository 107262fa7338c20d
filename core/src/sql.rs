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
pub use pg::{describe_pg_error, sql_class, SqlClass};

#[cfg(feature = "postgres")]
mod pg {
    use tokio_postgres::error::SqlState;

    /// The SQLSTATE classes walfill tells apart (the first two characters
    /// of a code); the one place a code is read by its text.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum SqlClass {
        /// 08: the connection failed or broke.
        ConnectionException,
        /// 40: a serialization failure or deadlock; the transaction may be
        /// run again.
        TransactionRollback,
        /// 53: the server ran short of memory, disk or connections.
        InsufficientResources,
        /// 57: an operator or the server stopped the statement (shutdown,
        /// termination, cancel).
        OperatorIntervention,
        /// 22, 2F, 38, 39, P0: the data of the row at hand made an
        /// expression, function or procedure fail (division by zero, a bad
        /// cast, an exception raised).
        DataOrRoutine,
        /// Any other class.
        Other,
    }

    /// The class of `code`.
    pub fn sql_class(code: &SqlState) -> SqlClass {
        match code.code().get(..2) {
            Some("08") => SqlClass::ConnectionException,
            Some("40") => SqlClass::TransactionRollback,
            Some("53") => SqlClass::InsufficientResources,
            Some("57") => SqlClass::OperatorIntervention,
            Some("22" | "2F" | "38" | "39" | "P0") => SqlClass::DataOrRoutine,
            _ => SqlClass::Other,
        }
    }

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

    #[cfg(feature = "postgres")]
    #[test]
    fn sqlstate_classes() {
        use tokio_postgres::error::SqlState;
        let class = |c: SqlState| sql_class(&c);
        assert_eq!(
            class(SqlState::CONNECTION_FAILURE),
            SqlClass::ConnectionException
        );
        assert_eq!(
            class(SqlState::T_R_DEADLOCK_DETECTED),
            SqlClass::TransactionRollback
        );
        assert_eq!(class(SqlState::DISK_FULL), SqlClass::InsufficientResources);
        assert_eq!(
            class(SqlState::ADMIN_SHUTDOWN),
            SqlClass::OperatorIntervention
        );
        assert_eq!(class(SqlState::DIVISION_BY_ZERO), SqlClass::DataOrRoutine);
        assert_eq!(class(SqlState::RAISE_EXCEPTION), SqlClass::DataOrRoutine);
        assert_eq!(class(SqlState::UNIQUE_VIOLATION), SqlClass::Other);
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
