//! Small questions asked of the source database.

use tokio_postgres::Client;
use walfill_replay::Lsn;

use crate::config::QualifiedName;
use crate::error::{Error, Result};
use walfill_snapshot::SnapshotError;

/// The source's current WAL write position.
pub async fn current_wal_lsn(source: &Client) -> Result<Lsn> {
    let text: String = source
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .map_err(|e| SnapshotError::query("reading the source's WAL position", e))?
        .get(0);
    text.parse()
        .map_err(|_| Error::State(format!("the source reported WAL position {text:?}")))
}

/// Whether the source has a replication slot of this name.
pub async fn slot_exists(source: &Client, slot: &str) -> Result<bool> {
    Ok(source
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| SnapshotError::query("looking up the replication slot", e))?
        .is_some())
}

/// Fails with the fix unless the publication exists and includes `table`.
pub async fn require_publication(
    source: &Client,
    publication: &str,
    table: &QualifiedName,
) -> Result<()> {
    let published = source
        .query_opt(
            "SELECT 1 FROM pg_publication_tables
              WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
            &[&publication, &table.schema, &table.name],
        )
        .await
        .map_err(|e| SnapshotError::query("reading the publication", e))?
        .is_some();
    if published {
        Ok(())
    } else {
        Err(Error::State(format!(
            "publication {publication} does not include {table}; run `walfill setup` after \
             adding the target to the configuration"
        )))
    }
}
