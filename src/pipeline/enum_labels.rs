//! Enum labels added on the source (`ALTER TYPE ... ADD VALUE`) that the
//! destination's type of the same name lacks.
//!
//! A version's work table has the source's column types, so a change that
//! carries a new label fails to load there ("invalid input value for enum",
//! SQLSTATE 22P02) and the version stops following. [`explain`] turns that
//! failure into [`Error::EnumLabels`], which names every missing label with
//! the `ALTER TYPE` that adds it at the source's position. A follower then
//! waits until the destination accepts them ([`accepted`]) and goes on by
//! itself; with `[[target]] sync_enum_labels = true` it adds them first
//! ([`add`]), each in its own committed transaction, since PostgreSQL
//! refuses to use a label in the transaction that added it.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;
use walfill_core::sql::{quote_ident, quote_literal};

use crate::error::{EnumLabel, Error, Result};
use crate::pipeline::version_sql::Plan;

/// The enum types a table's columns reach (directly, as array elements or
/// through domains), with their labels in the source's order.
const SOURCE_ENUMS: &str = "
    WITH RECURSIVE reached(oid) AS (
        SELECT atttypid FROM pg_attribute
         WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped
        UNION
        SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END
          FROM reached r JOIN pg_type t ON t.oid = r.oid
         WHERE t.typtype = 'd' OR t.typcategory = 'A'
    )
    SELECT n.nspname::text, t.typname::text,
           array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
      FROM reached r
      JOIN pg_type t ON t.oid = r.oid AND t.typtype = 'e'
      JOIN pg_namespace n ON n.oid = t.typnamespace
      JOIN pg_enum e ON e.enumtypid = t.oid
     GROUP BY 1, 2
     ORDER BY 1, 2";

/// The labels of the destination's enum type of this name, in its order;
/// none when it has no such type.
const DESTINATION_LABELS: &str = "
    SELECT e.enumlabel::text
      FROM pg_enum e
      JOIN pg_type t ON t.oid = e.enumtypid
      JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = $1 AND t.typname = $2
     ORDER BY e.enumsortorder";

/// `e` as [`Error::EnumLabels`] when it is a value the destination's enum
/// type refused and the source's type has labels the destination's lacks;
/// otherwise `e` itself.
pub async fn explain(source: &Client, dest: &Client, plan: &Plan, target: &str, e: Error) -> Error {
    if !refused_value(&e) {
        return e;
    }
    match missing(source, dest, plan.source.oid).await {
        Ok(labels) if !labels.is_empty() => Error::EnumLabels {
            target: target.to_string(),
            labels,
        },
        Ok(_) => e,
        Err(other) => {
            tracing::debug!(error = %other.describe(), "could not compare enum labels");
            e
        }
    }
}

/// Whether `e` (or an error it wraps) is a statement that refused a
/// value's text form.
fn refused_value(e: &Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        if let Some(pg) = cause.downcast_ref::<tokio_postgres::Error>() {
            if pg.code() == Some(&SqlState::INVALID_TEXT_REPRESENTATION) {
                return true;
            }
        }
        next = cause.source();
    }
    false
}

/// The labels of the source table's enum types (relid `relid`) that the
/// destination's types of the same names lack, in the source's order, each
/// with the statement that adds it where the source has it.
pub async fn missing(source: &Client, dest: &Client, relid: u32) -> Result<Vec<EnumLabel>> {
    let types = source
        .query(SOURCE_ENUMS, &[&relid])
        .await
        .map_err(|e| Error::source_query("reading the table's enum labels", e))?;
    let mut out = Vec::new();
    for row in types {
        let (schema, name, wanted): (String, String, Vec<String>) =
            (row.get(0), row.get(1), row.get(2));
        let mut have: Vec<String> = dest
            .query(DESTINATION_LABELS, &[&schema, &name])
            .await
            .map_err(|e| Error::destination("reading the destination's enum labels", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if have.is_empty() {
            // No such type in the destination: not a label to add.
            continue;
        }
        let type_name = format!("{}.{}", quote_ident(&schema), quote_ident(&name));
        for (i, label) in wanted.iter().enumerate() {
            if have.contains(label) {
                continue;
            }
            // Beside the nearest label before it that the destination has
            // (or will have, added in this order), else before the next.
            let place = match wanted[..i].iter().rev().find(|l| have.contains(l)) {
                Some(before) => format!(" AFTER {}", quote_literal(before)),
                None => match wanted[i + 1..].iter().find(|l| have.contains(l)) {
                    Some(after) => format!(" BEFORE {}", quote_literal(after)),
                    None => String::new(),
                },
            };
            out.push(EnumLabel {
                type_name: type_name.clone(),
                label: label.clone(),
                ddl: format!(
                    "ALTER TYPE {type_name} ADD VALUE IF NOT EXISTS {}{place};",
                    quote_literal(label)
                ),
            });
            have.push(label.clone());
        }
    }
    Ok(out)
}

/// `CREATE TYPE ... AS ENUM` for each enum type the source table (relid
/// `relid`) uses that the destination has no type of that name for.
pub async fn create_missing(source: &Client, dest: &Client, relid: u32) -> Result<Vec<String>> {
    let types = source
        .query(SOURCE_ENUMS, &[&relid])
        .await
        .map_err(|e| Error::source_query("reading the table's enum types", e))?;
    let mut out = Vec::new();
    for row in types {
        let (schema, name, labels): (String, String, Vec<String>) =
            (row.get(0), row.get(1), row.get(2));
        let exists = dest
            .query_opt(
                "SELECT FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
                  WHERE n.nspname = $1 AND t.typname = $2",
                &[&schema, &name],
            )
            .await
            .map_err(|e| Error::destination("looking for the table's types", e))?
            .is_some();
        if !exists {
            let labels: Vec<String> = labels.iter().map(|l| quote_literal(l)).collect();
            out.push(format!(
                "CREATE TYPE {}.{} AS ENUM ({});",
                quote_ident(&schema),
                quote_ident(&name),
                labels.join(", ")
            ));
        }
    }
    Ok(out)
}

/// Whether the destination has every one of `labels` now.
pub async fn accepted(dest: &Client, labels: &[EnumLabel]) -> Result<bool> {
    for label in labels {
        let found: bool = dest
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_enum
                                 WHERE enumtypid = $1::text::regtype AND enumlabel = $2)",
                &[&label.type_name, &label.label],
            )
            .await
            .map_err(|e| Error::destination("reading the destination's enum labels", e))?
            .get(0);
        if !found {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Adds `labels` to the destination's types, each statement committed on
/// its own (the client is in autocommit).
pub async fn add(dest: &Client, labels: &[EnumLabel]) -> Result<()> {
    for label in labels {
        dest.batch_execute(&label.ddl).await.map_err(|e| {
            Error::destination(
                format!(
                    "adding label {} to the destination's type {} (sync_enum_labels); the \
                     destination role must own the type, or run `{}` as its owner",
                    quote_literal(&label.label),
                    label.type_name,
                    label.ddl
                ),
                e,
            )
        })?;
        tracing::info!(
            type_name = %label.type_name,
            label = %label.label,
            statement = %label.ddl,
            "added an enum label the source has to the destination (sync_enum_labels)"
        );
    }
    Ok(())
}
