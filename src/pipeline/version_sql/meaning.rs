//! The meaning a version was built under. A transform means what the same
//! `SELECT` means on the source table (its columns' own collations, walfill's
//! pinned settings, parse-time ones included); versions built before that
//! was so ([`MEANING`] 1) evaluated it in the destination under the
//! destination's default collation and under whatever parse settings the
//! databases and roles set. Such a version keeps its own meaning (its
//! recorded description has no collations, so its work table stays as it
//! was), and is flagged where today's meaning would give other rows.

use tokio_postgres::Client;
use walfill_snapshot::SourceTable;

use super::collation::{self, Mapping};
use crate::db::Role;
use crate::error::{Error, Result};

/// The meaning versions are built under now.
pub const MEANING: i16 = 2;

/// Settings walfill's sessions pin since meaning 2, which an earlier
/// version's sessions took from the database or role.
const PINNED_SINCE_2: &[&str] = &[
    "transform_null_equals",
    "array_nulls",
    "backslash_quote",
    "timezone_abbreviations",
    "xmlbinary",
    "lc_numeric",
    "lc_time",
    "default_text_search_config",
    "quote_all_identifiers",
];

/// The columns of `table` whose names the transform's text mentions: the
/// columns it may read, without building its plan.
pub fn mentioned(table: &SourceTable, select: &str, filter: Option<&str>) -> Vec<String> {
    let text = format!("{select} {}", filter.unwrap_or_default()).to_lowercase();
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    table
        .columns
        .iter()
        .filter(|c| words.contains(&c.name.to_lowercase().as_str()) || text.contains(&c.name))
        .map(|c| c.name.clone())
        .collect()
}

/// Why a version built under `meaning` from `recorded` (its source as
/// described then), reading `referenced` columns, would hold other rows
/// under today's meaning, if it might: a column it reads has a collation
/// other than the destination's default, or the database, or the role
/// walfill connects as, sets a setting walfill pins now.
pub async fn earlier(
    source: &Client,
    dest: &Client,
    meaning: i16,
    recorded: &SourceTable,
    referenced: &[String],
) -> Result<Option<String>> {
    if meaning >= MEANING {
        return Ok(None);
    }
    let mut why = Vec::new();
    let now = match SourceTable::describe_oid(source, recorded.oid).await {
        Ok(table) => Some(table),
        Err(e) => {
            tracing::debug!(error = %e, "the source table cannot be described");
            None
        }
    };
    if let Some(table) = now {
        let collations = collation::resolve(dest, &table).await?;
        for (column, collation, mapping) in &collations.columns {
            if referenced.contains(column) && *mapping != Mapping::Default {
                why.push(format!(
                    "it reads column {column}, whose {collation} its work table did not carry"
                ));
            }
        }
    }
    for (client, side) in [(source, Role::Source), (dest, Role::Destination)] {
        let set: Vec<String> = client
            .query(
                "SELECT DISTINCT split_part(s, '=', 1) FROM pg_db_role_setting r,
                        unnest(r.setconfig) AS s
                  WHERE r.setdatabase IN (0, (SELECT oid FROM pg_database
                                               WHERE datname = current_database()))
                    AND r.setrole IN (0, (SELECT oid FROM pg_roles
                                           WHERE rolname = session_user))
                    AND lower(split_part(s, '=', 1)) = ANY($1)
                  ORDER BY 1",
                &[&PINNED_SINCE_2],
            )
            .await
            .map_err(|e| {
                let doing = "reading database and role settings";
                match side {
                    Role::Source => Error::source_query(doing, e),
                    Role::Destination => Error::destination(doing, e),
                }
            })?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !set.is_empty() {
            why.push(format!(
                "the {} database or a role sets {}, which its sessions read",
                side.name(),
                set.join(", ")
            ));
        }
    }
    Ok((!why.is_empty()).then(|| {
        format!(
            "built under an earlier meaning of its transform; rebuild it (configure a new \
             version): {}",
            why.join("; ")
        )
    }))
}
