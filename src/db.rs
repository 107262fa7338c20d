//! Connections to the source and destination databases.

use tokio_postgres::{Client, NoTls};

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

/// Connects and spawns the connection's driver task. Errors say what to fix.
pub async fn connect(url: &PgUrl, role: Role) -> Result<Client> {
    let mut config = url.client_config();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| connect_error(url, role, &e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "database connection closed");
        }
    });
    // walfill's statements run once per chunk or batch over a few thousand
    // rows: compiling them with JIT costs more than it saves.
    client
        .batch_execute("SET application_name = 'walfill'; SET TimeZone = 'UTC'; SET jit = off")
        .await
        .map_err(|e| Error::destination("configuring the session", e))?;
    Ok(client)
}

/// Explains a connection failure: the server's words plus the likely fix.
pub fn connect_error(url: &PgUrl, role: Role, err: &tokio_postgres::Error) -> Error {
    let key = url.origin();
    let message = if let Some(db) = err.as_db_error() {
        let fix = match db.code().code() {
            "28P01" => format!("check the password in {key}"),
            "28000" => format!("check the user in {key} and the server's pg_hba.conf"),
            "3D000" => format!("check the database name in {key}"),
            "53300" => "the server has no free connection slots; retry later".to_string(),
            _ => "see the server's message".to_string(),
        };
        format!("{} [SQLSTATE {}]; {fix}", db.message(), db.code().code())
    } else {
        let mut text = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        format!("{text}; check host and port in {key} and that the server is running")
    };
    Error::Connect {
        role: role.name(),
        url: url.to_string(),
        message,
    }
}
