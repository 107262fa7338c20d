//! Where a snapshot copy evaluates the transform: on the source, when it
//! gives the same values there as in the destination, so that finished
//! rows are COPYed straight into the version (as a plain `COPY (SELECT
//! transform ...) | COPY` pipe does); in the destination otherwise, over
//! the source's rows in a work table.
//!
//! The same values, because the transform is portable (see
//! `crate::pipeline::version_sql`'s `portable`: built-in immutable functions over built-in
//! types, nothing that reads a setting walfill does not pin) and because
//! the two servers are alike where such functions can differ:
//!
//! - the same server version (`server_version_num`), so the same code;
//! - the same encoding, collation and character classification (provider,
//!   locale, rules) for both databases, at the same actual collation
//!   version (the library's), so comparisons and `upper()` agree;
//! - each source column's collation has its match in the destination (the
//!   work table carries it, see `crate::pipeline::version_sql`'s `collation`);
//! - the select list prepared on both sides gives the same output types,
//!   and resolves to the same expressions (`EXPLAIN VERBOSE`: the same
//!   functions, operators and folded constants).
//!
//! The live stream and replays still evaluate the transform in the
//! destination, the definition of what a version holds.

use tokio_postgres::Client;
use walfill_core::sql::quote_ident;
use walfill_snapshot::{CopyFormat, Projection, SnapshotError};

use crate::config::TransformOn;
use crate::db::Role;
use crate::error::{Error, Result};
use crate::pipeline::version_sql::{Mapping, Plan};

/// Run in a chunk's transaction on the source before a projected chunk:
/// names resolve to `pg_catalog` alone. The destination resolved the
/// transform's functions to built-in ones (see `portable`); among built-in
/// ones alone the same are the best match, where a function of the same
/// name in the source's `public` might otherwise match better.
pub const PIN_FUNCTIONS: &str = "SET LOCAL search_path = pg_catalog";

/// The projection a copy of `plan`'s table asks the source to evaluate,
/// or `None` when the transform runs in the destination (the reason is
/// logged either way). `format` is how the copy's rows travel.
pub async fn projection(
    setting: TransformOn,
    format: CopyFormat,
    source: &Client,
    dest: &Client,
    plan: &Plan,
) -> Result<Option<Projection>> {
    let reason = match why_not(setting, format, source, dest, plan).await? {
        None => {
            tracing::info!(
                transform_on = "source",
                "the transform is evaluated on the source and its rows are copied straight in \
                 (built-in immutable functions, the same server version and collations on both \
                 sides)"
            );
            return Ok(Some(plan.source_projection()));
        }
        Some(reason) => reason,
    };
    tracing::info!(transform_on = "destination", why = %reason, "where the transform runs");
    Ok(None)
}

/// Why the transform must run in the destination, if it must.
async fn why_not(
    setting: TransformOn,
    format: CopyFormat,
    source: &Client,
    dest: &Client,
    plan: &Plan,
) -> Result<Option<String>> {
    if setting == TransformOn::Destination {
        return Ok(Some("backfill.transform_on = \"destination\"".into()));
    }
    if let Some(why) = &plan.not_portable {
        return Ok(Some(format!(
            "the transform may not give the same values on the source: {why}"
        )));
    }
    if format != CopyFormat::Binary {
        return Ok(Some("the copy travels in text".into()));
    }
    if let Some(column) = plan.source.columns.iter().find(|c| c.type_oid >= 16384) {
        return Ok(Some(format!(
            "source column {} has a type that is not built in",
            column.name
        )));
    }
    let (theirs, ours) = (
        server(source, Role::Source).await?,
        server(dest, Role::Destination).await?,
    );
    if theirs != ours {
        return Ok(Some(format!(
            "the servers differ: the source has {}, the destination {}",
            theirs.join(" "),
            ours.join(" ")
        )));
    }
    let unmatched = plan
        .collations
        .columns
        .iter()
        .find(|(c, _, m)| *m == Mapping::Unmatched && plan.reads(c));
    if let Some((column, collation, _)) = unmatched {
        return Ok(Some(format!(
            "source column {column} uses {collation}, which the destination has no collation \
             to match"
        )));
    }
    let sql = typed_select(plan);
    let (on_source, source_plan) = pinned_to_catalog(source, Role::Source, &sql).await?;
    let (on_dest, dest_plan) = pinned_to_catalog(dest, Role::Destination, &sql).await?;
    let (theirs, ours) = match (on_source, on_dest) {
        (Ok(theirs), Ok(ours)) => (theirs, ours),
        (Err(e), _) => {
            return Ok(Some(format!(
                "the select list does not prepare on the source: {}",
                walfill_core::sql::describe_pg_error(&e)
            )))
        }
        (_, Err(e)) => return Err(Error::destination("preparing the transform", e)),
    };
    let types = |s: &tokio_postgres::Statement| -> Vec<u32> {
        s.columns().iter().map(|c| c.type_().oid()).collect()
    };
    if types(&theirs) != types(&ours) {
        return Ok(Some(
            "the select list gives other types on the source than in the destination".into(),
        ));
    }
    // What each side resolved the text to: the plan shows every function,
    // operator and folded constant (a setting that changes how the text
    // parses shows as another expression).
    if source_plan != dest_plan {
        tracing::debug!(source = %source_plan, destination = %dest_plan, "the plans differ");
        return Ok(Some(
            "the select list resolves to other expressions on the source than in the \
             destination (another function, operator or constant)"
                .into(),
        ));
    }
    Ok(None)
}

/// `sql` prepared and explained (verbose) in `client`'s session with names
/// resolving to `pg_catalog` alone, as a projected chunk's are (see
/// [`PIN_FUNCTIONS`]); the plan's text is empty when it does not prepare.
async fn pinned_to_catalog(
    client: &Client,
    role: Role,
    sql: &str,
) -> Result<(
    std::result::Result<tokio_postgres::Statement, tokio_postgres::Error>,
    String,
)> {
    let failed = |e| {
        let doing = "resolving the transform";
        match role {
            Role::Source => Error::source_query(doing, e),
            Role::Destination => Error::destination(doing, e),
        }
    };
    client
        .batch_execute("SET search_path = pg_catalog")
        .await
        .map_err(failed)?;
    let prepared = client.prepare(sql).await;
    let explained = match &prepared {
        Ok(_) => client
            .query(&format!("EXPLAIN (VERBOSE, COSTS OFF) {sql}"), &[])
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
                    .join("\n")
            }),
        Err(_) => Ok(String::new()),
    };
    client
        .batch_execute("RESET search_path")
        .await
        .map_err(failed)?;
    Ok((prepared, explained.map_err(failed)?))
}

/// The server's version and the database's encoding, collation and
/// character classification, as words to compare and print.
async fn server(client: &Client, role: Role) -> Result<Vec<String>> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num'),
                    (SELECT string_agg(key || '=' || value, ' ' ORDER BY key)
                       FROM jsonb_each_text(to_jsonb(d))
                      WHERE key IN ('encoding', 'datcollate', 'datctype', 'datlocprovider',
                                    'daticulocale', 'datlocale', 'daticurules')),
                    coalesce(pg_database_collation_actual_version(d.oid), '')
               FROM pg_database d WHERE d.datname = current_database()",
            &[],
        )
        .await
        .map_err(|e| {
            let doing = "reading the server's version and collation";
            match role {
                Role::Source => Error::source_query(doing, e),
                Role::Destination => Error::destination(doing, e),
            }
        })?;
    Ok(vec![
        format!("version={}", row.get::<_, String>(0)),
        row.get::<_, Option<String>>(1).unwrap_or_default(),
        format!("collation_version={}", row.get::<_, String>(2)),
    ])
}

/// The chunk's select list over one row of NULLs typed as the source's
/// columns, under the names the select list knows them by (in a subquery
/// the planner keeps, so the select list is not folded to constants).
fn typed_select(plan: &Plan) -> String {
    let projection = plan.source_projection();
    let columns = plan
        .source
        .columns
        .iter()
        .map(|c| format!("NULL::{} AS {}", c.sql_type, quote_ident(&c.name)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {} FROM (SELECT {columns} OFFSET 0) AS {}{}",
        projection.select,
        quote_ident(&projection.alias),
        projection.join
    )
}

/// Reads the rest of the copy as the table's rows, for the destination to
/// transform: the source could not evaluate the transform over a chunk (a
/// row it fails on becomes a dead letter there).
pub(super) fn give_up_projection(projection: &mut Option<Projection>, e: &SnapshotError) {
    tracing::warn!(
        error = %e,
        "the transform failed on the source; the rest of the copy evaluates it in the \
         destination, where a row it fails on becomes a dead letter"
    );
    *projection = None;
}
