//! The key index of a version's table during a snapshot copy.
//!
//! While a fresh version is copied, nothing else writes its table (the
//! stream is applied after the copy) and the chunks' key ranges are
//! disjoint, so plain inserts are right and no conflict can arise. The
//! copy then loads the table without its primary key and builds the key
//! at the end, in one sort, which is cheaper than keeping a B-tree up to
//! date row by row. Everything that needs the key (the versioned upsert of
//! the catch-up and the live stream, a scoped refresh) comes after.

use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::pipeline::version_sql::Plan;

/// The name of the version table's primary key constraint, if it has one.
pub(super) async fn primary_key(dest: &Client, plan: &Plan) -> Result<Option<String>> {
    Ok(dest
        .query_opt(
            "SELECT conname::text FROM pg_constraint
              WHERE conrelid = $1::text::regclass AND contype = 'p'",
            &[&plan.staging_table()],
        )
        .await
        .map_err(|e| Error::destination("looking up the version table's key", e))?
        .map(|r| r.get(0)))
}

/// Whether the version's table holds no row.
pub(super) async fn is_empty(dest: &Client, plan: &Plan) -> Result<bool> {
    Ok(dest
        .query_one(
            &format!("SELECT NOT EXISTS (SELECT FROM {})", plan.staging_table()),
            &[],
        )
        .await
        .map_err(|e| Error::destination("looking into the version's table", e))?
        .get(0))
}

/// Drops the primary key of a version table being loaded, rows or not:
/// nothing but the load writes the table until the key is built again.
pub(super) async fn drop(dest: &Client, plan: &Plan) -> Result<()> {
    let Some(name) = primary_key(dest, plan).await? else {
        return Ok(());
    };
    dest.batch_execute(&format!(
        "ALTER TABLE {} DROP CONSTRAINT {}",
        plan.staging_table(),
        walfill_core::sql::quote_ident(&name)
    ))
    .await
    .map_err(|e| Error::destination("dropping the version table's key for the load", e))
}

/// Drops the primary key of a version table that holds no row yet; returns
/// whether the table is now without it (false: it has rows, and keeps it).
pub(super) async fn drop_for_load(dest: &Client, plan: &Plan) -> Result<bool> {
    if primary_key(dest, plan).await?.is_none() {
        return Ok(true);
    }
    if !is_empty(dest, plan).await? {
        return Ok(false);
    }
    drop(dest, plan).await?;
    Ok(true)
}

/// Builds the primary key of a loaded version table, if it lacks it.
pub(super) async fn build(dest: &Client, plan: &Plan) -> Result<()> {
    if primary_key(dest, plan).await?.is_some() {
        return Ok(());
    }
    tracing::info!(table = %plan.staging_table(), "building the key index of the copied rows");
    dest.batch_execute(&format!(
        "ALTER TABLE {} ADD PRIMARY KEY ({})",
        plan.staging_table(),
        walfill_core::sql::ident_list(plan.key.iter().map(String::as_str))
    ))
    .await
    .map_err(|e| {
        Error::destination(
            format!(
                "building the key index of {} (the key columns must be unique in the source)",
                plan.staging_table()
            ),
            e,
        )
    })
}
