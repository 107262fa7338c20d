//! `walfill catalog`: the table descriptions `walfill decode` reads from
//! the source's catalog, printed as JSON (saved for `decode --catalog`).

use crate::config::Config;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::upstream::catalog;

/// Prints the catalog of `--source`, or of the configuration's source.
pub async fn catalog(source: Option<&str>, config: Option<&Config>) -> Result<u8> {
    let url = crate::cli::source_url(source, config)?;
    let client = db::connect(&url, Role::Source).await?;
    let snapshot = catalog::load(&client).await?.snapshot();
    let text = serde_json::to_string_pretty(&snapshot)
        .map_err(|e| Error::Internal(format!("cannot print the catalog: {e}")))?;
    crate::say!("{text}")?;
    Ok(0)
}
