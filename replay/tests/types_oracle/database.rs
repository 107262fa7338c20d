//! The oracle test's database: a private database with the session settings
//! the output module reproduces, and raw binary query parameters.

use std::error::Error;
use std::time::{SystemTime, UNIX_EPOCH};

use postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use postgres::{Client, Config, NoTls};

/// A query parameter given as raw bytes in the binary format of whatever
/// type the query declares for it.
#[derive(Debug)]
pub(crate) struct Raw<'a>(pub(crate) &'a [u8]);

impl ToSql for Raw<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(self.0);
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// The database the test works in; dropped (forcibly) when this is dropped.
pub(crate) struct TempDb {
    admin: Config,
    name: String,
}

impl Drop for TempDb {
    fn drop(&mut self) {
        if let Ok(mut c) = self.admin.connect(NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

pub(crate) fn connect() -> (TempDb, Client) {
    let url = std::env::var("WALFILL_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "WALFILL_TEST_PG_URL is not set: this test needs a superuser URL of a PostgreSQL 15 \
             server with pageinspect (start one with scripts/pg-up.sh, which prints the URL)"
        )
    });
    let admin: Config = url
        .parse()
        .expect("WALFILL_TEST_PG_URL is not a valid PostgreSQL URL");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("walfill_types_oracle_{}_{nanos}", std::process::id());
    admin
        .connect(NoTls)
        .expect("connect to WALFILL_TEST_PG_URL")
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
        ))
        .expect("create the test database");
    let db = TempDb {
        admin: admin.clone(),
        name: name.clone(),
    };
    let mut cfg = admin;
    cfg.dbname(&name);
    let mut client = cfg.connect(NoTls).expect("connect to the test database");
    client
        .batch_execute(
            "CREATE EXTENSION pageinspect;
             SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres';
             SET extra_float_digits = 1; SET bytea_output = 'hex'; SET lc_monetary = 'C';
             SET client_min_messages = warning;
             CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'NULL', 'with space', 'quo\"te',
                                       'back\\slash', 'ünï', '{brace}', 'a,b', '');
             ALTER TYPE mood ADD VALUE 'early' BEFORE 'sad';
             ALTER TYPE mood ADD VALUE 'late';
             CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
             CREATE DOMAIN ltext AS text;
             CREATE TYPE textrange AS RANGE (subtype = text);
             CREATE TYPE inner_c AS (a text, b int8);
             CREATE TYPE comp AS (i int4, gone text, t text, f float8, m mood,
                                  r int4range, c inner_c, ts timestamptz);
             ALTER TYPE comp DROP ATTRIBUTE gone;",
        )
        .expect("set up the test database");
    (db, client)
}

/// Type OID of a SQL type name.
pub(crate) fn type_oid(client: &mut Client, name: &str) -> u32 {
    client
        .query_one("SELECT $1::text::regtype::oid", &[&name])
        .expect("regtype")
        .get(0)
}

/// The server's message for a failed statement.
pub(crate) fn db_message(e: &postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}
