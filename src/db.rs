//! Connections to the source and destination databases.
//!
//! Every session walfill opens — source, destination and replication —
//! pins the settings that change how values print or parse, so a database
//! or role configured otherwise (another DateStyle, fewer float digits, a
//! money locale...) cannot turn a value into another one on its way:
//! text moves between databases in one fixed form.

use tokio_postgres::{Client, NoTls};

use tokio_postgres::error::SqlState;

use crate::config::PgUrl;
use crate::error::{Error, Result};

/// Which database a connection is for; errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The database with the source tables.
    Source,
    /// The database receiving versions, views and state.
    Destination,
}

impl Role {
    /// `source` or `destination`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Destination => "destination",
        }
    }
}

/// The settings every walfill session runs with, as `name=value` pairs:
/// every setting a session may change that changes what a transform's SQL
/// text means or what value it gives (so a transform means the same in
/// every session, on the source and in the destination, whatever a
/// database or role sets), and how values travel as text.
///
/// - parsing: `transform_null_equals` (`x = NULL` is not `x IS NULL`),
///   `array_nulls` (`NULL` in an array literal is a null),
///   `standard_conforming_strings`, `backslash_quote`;
/// - text I/O: `DateStyle`, `IntervalStyle`, `extra_float_digits`,
///   `bytea_output`, `TimeZone`, `timezone_abbreviations`,
///   `client_encoding`, `xmloption`, `xmlbinary`;
/// - functions that read a setting: `lc_monetary`, `lc_numeric` and
///   `lc_time` (`to_char`, `money`), `default_text_search_config`
///   (`to_tsvector(text)`: a transform that wants a language names it),
///   `quote_all_identifiers` (`quote_ident`);
/// - name resolution: `search_path` at PostgreSQL's default, `"$user",
///   public`;
/// - a dead client's statement is cut short within a second
///   (`client_connection_check_interval`), so it releases what it holds;
/// - `jit` off: walfill's statements run once per chunk or batch over a few
///   thousand rows, and compiling them costs more than it saves.
///
/// The test `transform::every_setting_that_changes_a_value_is_pinned` lists
/// the server's settings and fails on one that is neither here nor shown
/// harmless.
pub fn session_settings() -> Vec<(&'static str, &'static str)> {
    let mut settings = vec![
        ("transform_null_equals", "off"),
        ("array_nulls", "on"),
        ("standard_conforming_strings", "on"),
        ("backslash_quote", "safe_encoding"),
        ("DateStyle", "ISO,MDY"),
        ("IntervalStyle", "postgres"),
        ("extra_float_digits", "1"),
        ("bytea_output", "hex"),
        ("TimeZone", "UTC"),
        ("timezone_abbreviations", "Default"),
        ("client_encoding", "UTF8"),
        ("xmloption", "content"),
        ("xmlbinary", "base64"),
        ("lc_monetary", "C"),
        ("lc_numeric", "C"),
        ("lc_time", "C"),
        ("default_text_search_config", "pg_catalog.simple"),
        ("quote_all_identifiers", "off"),
        ("client_connection_check_interval", "1000"),
        ("jit", "off"),
    ];
    // PostgreSQL's default, whatever the role or database says: transforms
    // resolve the same names in every run, and types print as logical
    // decoding prints them.
    settings.push(("search_path", "\"$user\",public"));
    settings
}

/// The settings as a libpq `options` value: `-c name=value ...`.
pub fn options() -> String {
    session_settings()
        .iter()
        .map(|(name, value)| format!("-c {name}={value}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where logical replication connections to the source go, with the
/// session's settings to pin.
pub fn replication_url(url: &PgUrl) -> walfill_snapshot::ReplicationUrl {
    walfill_snapshot::ReplicationUrl {
        url: url.replication_url(&options()),
        settings: session_settings()
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
    }
}

/// Connects and spawns the connection's driver task. Errors say what to fix.
pub async fn connect(url: &PgUrl, role: Role) -> Result<Client> {
    let mut config = url.client_config();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    let given = config.get_options().unwrap_or_default().to_string();
    config.options(format!("{given} {}", options()).trim());
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| connect_error(url, role, &e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %walfill_core::sql::describe_pg_error(&e), "database connection closed");
        }
    });
    Ok(client)
}

/// Explains a connection failure: the server's words plus the likely fix.
pub fn connect_error(url: &PgUrl, role: Role, err: &tokio_postgres::Error) -> Error {
    let key = url.origin();
    let message = if let Some(db) = err.as_db_error() {
        let code = db.code();
        let fix = if *code == SqlState::INVALID_PASSWORD {
            format!("check the password in {key}")
        } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
            format!("check the user in {key} and the server's pg_hba.conf")
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            format!("check the database name in {key}")
        } else if *code == SqlState::TOO_MANY_CONNECTIONS {
            "the server has no free connection slots; retry later".to_string()
        } else {
            "see the server's message".to_string()
        };
        format!("{} [SQLSTATE {}]; {fix}", db.message(), db.code().code())
    } else {
        format!(
            "{}; check host and port in {key} and that the server is running",
            walfill_core::sql::error_chain(err)
        )
    };
    Error::Connect {
        role: role.name(),
        url: url.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_pin_text_io() {
        let source = options();
        assert!(source.contains("-c DateStyle=ISO,MDY"), "{source}");
        assert!(
            source.contains("-c search_path=\"$user\",public"),
            "{source}"
        );
        assert!(
            !source.contains(", "),
            "{source}: libpq splits options at spaces"
        );
    }
}
