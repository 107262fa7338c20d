//! `walfill setup`: check the source and destination, then install the
//! publication and the state schema.
//!
//! Every check runs before anything is written, and every problem is reported
//! with its fix; a failed setup changes nothing.

use tokio_postgres::Client;
use walfill_core::sql::quote_ident;
use walfill_snapshot::SnapshotError;

use crate::config::Config;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::journal;
use crate::plan::{self, Definition};
use crate::state;

/// Checks everything, then installs what walfill needs.
pub async fn setup(config: &Config) -> Result<()> {
    let source = db::connect(&config.source, Role::Source).await?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    let mut problems = Vec::new();
    check_server(&source, &mut problems).await?;

    let publication = &config.backfill.publication;
    let published: Vec<(String, String)> = query(
        &source,
        "reading the publication",
        "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1",
        &[publication],
    )
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    let publication_exists = !query(
        &source,
        "reading the publication",
        "SELECT 1 FROM pg_publication WHERE pubname = $1",
        &[publication],
    )
    .await?
    .is_empty();
    let mut to_publish = Vec::new();
    let mut warnings = Vec::new();
    for target in &config.targets {
        let def = Definition::from_config(target);
        let table = match plan::describe(&source, &def).await {
            Ok(t) => t,
            Err(Error::Source(e @ SnapshotError::Unusable { .. })) => {
                problems.push(format!("target {}: {e}", target.name));
                continue;
            }
            Err(Error::Problems(p)) => {
                problems.extend(p);
                continue;
            }
            Err(e) => return Err(e),
        };
        let quoted = table.quoted();
        let row = source
            .query_one(
                "SELECT has_table_privilege($1::oid, 'SELECT'),
                        pg_has_role(c.relowner, 'USAGE')
                   FROM pg_class c WHERE c.oid = $1::oid",
                &[&table.oid],
            )
            .await
            .map_err(|e| SnapshotError::query("checking privileges on the source table", e))?;
        if !row.get::<_, bool>(0) {
            problems.push(format!(
                "target {}: the source user cannot read {table}; fix: GRANT SELECT ON {quoted} TO {}",
                target.name,
                quote_ident(&config.source.user())
            ));
        }
        let is_published = published
            .iter()
            .any(|(s, n)| *s == table.schema && *n == table.name);
        if publication_exists {
            // Everything but a missing table, which setup adds itself.
            problems.extend(
                crate::job::publication_problems(&source, publication, table.oid)
                    .await?
                    .into_iter()
                    .filter(|p| !p.contains("does not include"))
                    .map(|p| format!("target {}: {p}", target.name)),
            );
        }
        if !is_published {
            if !row.get::<_, bool>(1) {
                problems.push(format!(
                    "target {}: adding {table} to publication {publication} needs its owner \
                     (or a superuser); fix: run `walfill setup` as the owner, or ALTER \
                     PUBLICATION {publication} ADD TABLE {quoted} as the owner",
                    target.name
                ));
            }
            if !to_publish.contains(&quoted) {
                to_publish.push(quoted);
            }
        }
        match plan::build(&dest, &def, table).await {
            Ok(plan) => warnings.extend(plan.warnings),
            Err(Error::Problems(p)) => problems.extend(p),
            Err(e) => return Err(e),
        }
    }
    if !publication_exists || !to_publish.is_empty() {
        let can_create: bool = source
            .query_one(
                "SELECT has_database_privilege(current_database(), 'CREATE')",
                &[],
            )
            .await
            .map_err(|e| SnapshotError::query("checking privileges on the source database", e))?
            .get(0);
        if !publication_exists && !can_create {
            problems.push(format!(
                "the source user cannot create publication {publication}; fix: GRANT CREATE ON \
                 DATABASE {} TO {}",
                quote_ident(&config.source.database()),
                quote_ident(&config.source.user())
            ));
        }
    }
    let dest_can_create: bool = dest
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE')
                 OR EXISTS (SELECT 1 FROM pg_namespace
                             WHERE nspname = 'walfill' AND has_schema_privilege(oid, 'CREATE'))",
            &[],
        )
        .await
        .map_err(|e| Error::destination("checking privileges on the destination", e))?
        .get(0);
    if !dest_can_create {
        problems.push(format!(
            "the destination user cannot create schemas; fix: GRANT CREATE ON DATABASE {} TO {}",
            quote_ident(&config.destination.database()),
            quote_ident(&config.destination.user())
        ));
    }
    // Replay needs the catalog journal; it is (re)installed when missing,
    // outdated or damaged.
    let install_journal = config.archive.is_some() && !journal::check(&source).await?.is_empty();
    if install_journal {
        problems.extend(journal::preflight(&source).await?);
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    if !problems.is_empty() {
        return Err(Error::Problems(problems));
    }

    state::install(&dest).await?;
    if install_journal {
        let report = journal::install(&source).await?;
        crate::say!(
            "catalog journal installed in the source: {} table(s) described",
            report.tables
        )?;
    }
    if !publication_exists {
        let sql = if to_publish.is_empty() {
            format!("CREATE PUBLICATION {}", quote_ident(publication))
        } else {
            format!(
                "CREATE PUBLICATION {} FOR TABLE {}",
                quote_ident(publication),
                to_publish.join(", ")
            )
        };
        source
            .batch_execute(&sql)
            .await
            .map_err(|e| SnapshotError::query("creating the publication", e))?;
    } else if !to_publish.is_empty() {
        let sql = format!(
            "ALTER PUBLICATION {} ADD TABLE {}",
            quote_ident(publication),
            to_publish.join(", ")
        );
        source
            .batch_execute(&sql)
            .await
            .map_err(|e| SnapshotError::query("adding tables to the publication", e))?;
    }
    for target in &config.targets {
        state::record_event(
            &dest,
            &target.name,
            None,
            "setup",
            serde_json::json!({ "publication": publication }),
        )
        .await?;
    }
    crate::say!(
        "setup complete: publication {publication} covers {} table(s); state schema walfill ready in {}",
        config.targets.iter().map(|t| t.source.to_string()).collect::<std::collections::BTreeSet<_>>().len(),
        config.destination
    )?;
    Ok(())
}

async fn query(
    client: &Client,
    context: &str,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>> {
    client
        .query(sql, params)
        .await
        .map_err(|e| Error::source_query(context.to_string(), e))
}

/// Server-wide requirements: logical WAL, slots and senders, the REPLICATION
/// attribute.
async fn check_server(source: &Client, problems: &mut Vec<String>) -> Result<()> {
    let row = source
        .query_one(
            "SELECT current_setting('wal_level'),
                    current_setting('max_replication_slots')::int,
                    current_setting('max_wal_senders')::int,
                    r.rolsuper OR r.rolreplication,
                    current_user::text,
                    current_setting('server_version_num')::int
               FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await
        .map_err(|e| SnapshotError::query("reading the source's settings", e))?;
    let wal_level: String = row.get(0);
    if wal_level != "logical" {
        problems.push(format!(
            "the source has wal_level = {wal_level}; walfill needs logical. fix: ALTER SYSTEM SET \
             wal_level = logical; then restart PostgreSQL"
        ));
    }
    if row.get::<_, i32>(1) < 1 {
        problems.push(
            "the source has max_replication_slots = 0. fix: ALTER SYSTEM SET \
             max_replication_slots = 10; then restart PostgreSQL"
                .into(),
        );
    }
    if row.get::<_, i32>(2) < 1 {
        problems.push(
            "the source has max_wal_senders = 0. fix: ALTER SYSTEM SET max_wal_senders = 10; \
             then restart PostgreSQL"
                .into(),
        );
    }
    if !row.get::<_, bool>(3) {
        let user: String = row.get(4);
        problems.push(format!(
            "the source user {user} may not use replication. fix: ALTER ROLE {} REPLICATION",
            quote_ident(&user)
        ));
    }
    if row.get::<_, i32>(5) < 150000 {
        problems.push("the source runs PostgreSQL older than 15; walfill needs 15 or later".into());
    }
    Ok(())
}
