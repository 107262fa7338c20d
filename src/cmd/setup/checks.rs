//! What setup checks, each with the fix for the user who runs it.
//!
//! Only catalogs every role can read are consulted, so any user gets the
//! full list of what it lacks.

use tokio_postgres::Client;
use walfill_core::sql::quote_ident;
use walfill_snapshot::SnapshotError;

use super::problems::{fix, Problems, Step};
use crate::error::{Error, Result};
use walfill_snapshot::SourceTable;

/// Server-wide requirements: logical WAL, slots and senders, the REPLICATION
/// attribute, the version.
pub(super) async fn server(source: &Client, problems: &mut Problems) -> Result<()> {
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
        problems.add(
            Step::Server,
            format!(
                "the source has wal_level = {wal_level}; walfill needs logical; fix (as a \
                 superuser): ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"
            ),
        );
    }
    if row.get::<_, i32>(1) < 1 {
        problems.add(
            Step::Server,
            "the source has max_replication_slots = 0; fix (as a superuser): ALTER SYSTEM SET \
             max_replication_slots = 10; then restart PostgreSQL",
        );
    }
    if row.get::<_, i32>(2) < 1 {
        problems.add(
            Step::Server,
            "the source has max_wal_senders = 0; fix (as a superuser): ALTER SYSTEM SET \
             max_wal_senders = 10; then restart PostgreSQL",
        );
    }
    if !row.get::<_, bool>(3) {
        let user: String = row.get(4);
        problems.add(
            Step::Role,
            format!(
                "the source user {user} may not use replication; {}",
                fix(
                    "a superuser",
                    None,
                    &format!("ALTER ROLE {} REPLICATION", quote_ident(&user))
                )
            ),
        );
    }
    if row.get::<_, i32>(5) < 150000 {
        problems.add(
            Step::Server,
            "the source runs PostgreSQL older than 15; walfill needs 15 or later",
        );
    }
    Ok(())
}

/// The source user can read the table (a snapshot copies it).
pub(super) async fn readable(
    source: &Client,
    target: &str,
    table: &SourceTable,
    problems: &mut Problems,
) -> Result<()> {
    let row = source
        .query_one(
            "SELECT has_table_privilege($1::oid, 'SELECT'), current_user::text,
                    current_database()::text",
            &[&table.oid],
        )
        .await
        .map_err(|e| SnapshotError::query("checking privileges on the source table", e))?;
    if !row.get::<_, bool>(0) {
        problems.add(
            Step::Grant,
            format!(
                "target {target}: the source user cannot read {table}; {}",
                fix(
                    "the table's owner",
                    Some(row.get(2)),
                    &format!(
                        "GRANT SELECT ON {} TO {}",
                        table.quoted(),
                        quote_ident(row.get(1))
                    )
                )
            ),
        );
    }
    Ok(())
}

/// With an archive, a backfill asks the source to switch WAL segments so
/// the WAL it needs is archived at once; without the privilege it waits for
/// the segment to fill or for `archive_timeout`.
pub(super) async fn switch_wal(source: &Client, problems: &mut Problems) -> Result<()> {
    let row = source
        .query_one(
            "SELECT has_function_privilege('pg_catalog.pg_switch_wal()', 'EXECUTE'),
                    current_user::text, current_database()::text",
            &[],
        )
        .await
        .map_err(|e| SnapshotError::query("checking the privilege to switch WAL segments", e))?;
    if !row.get::<_, bool>(0) {
        problems.add(
            Step::Grant,
            format!(
                "the source user may not run pg_switch_wal(), so every replay would wait for \
                 the archiver to store the segment being written (until it fills or \
                 archive_timeout passes); {}",
                fix(
                    "a superuser",
                    Some(row.get(2)),
                    &format!(
                        "GRANT EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() TO {}",
                        quote_ident(row.get(1))
                    )
                )
            ),
        );
    }
    Ok(())
}

/// What setup will do to the publication: create it, or add tables to it.
#[derive(Debug, Default)]
pub(super) struct PublicationWork {
    /// The publication does not exist yet.
    pub(super) create: bool,
    /// Tables to publish (quoted), in the order the targets name them.
    pub(super) add: Vec<String>,
}

/// Whether the source user can create or extend the publication for
/// `tables` (CREATE on the database; ownership of the publication and of
/// every table added), and what setup will do. Also checks an existing
/// publication's settings against what walfill needs.
pub(super) async fn publication(
    source: &Client,
    publication: &str,
    tables: &[(String, SourceTable)],
    problems: &mut Problems,
) -> Result<PublicationWork> {
    let failed = |e| Error::source_query("reading the publication", e);
    let owned: Option<bool> = source
        .query_opt(
            "SELECT pg_has_role(pubowner, 'USAGE') FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(failed)?
        .map(|r| r.get(0));
    let mut work = PublicationWork {
        create: owned.is_none(),
        add: Vec::new(),
    };
    let mut not_owned = Vec::new();
    for (target, table) in tables {
        if owned.is_some() {
            // Everything but a missing table, which setup adds itself.
            problems.extend(
                Step::Publication,
                crate::upstream::publication_problems(source, publication, table.oid)
                    .await?
                    .into_iter()
                    .filter(|p| !p.contains("does not include"))
                    .map(|p| format!("target {target}: {p}")),
            );
        }
        let row = source
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_publication p,
                                       pg_get_publication_tables(p.pubname::text) t
                                 WHERE p.pubname = $2 AND t.relid = $1::oid),
                        pg_has_role(c.relowner, 'USAGE')
                   FROM pg_class c WHERE c.oid = $1::oid",
                &[&table.oid, &publication],
            )
            .await
            .map_err(failed)?;
        let quoted = table.quoted();
        if row.get::<_, bool>(0) || work.add.contains(&quoted) {
            continue;
        }
        if !row.get::<_, bool>(1) {
            not_owned.push(table.to_string());
        }
        work.add.push(quoted);
    }
    if work.add.is_empty() {
        return Ok(work);
    }
    let row = source
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE'), current_user::text,
                    current_database()::text",
            &[],
        )
        .await
        .map_err(|e| SnapshotError::query("checking privileges on the source database", e))?;
    let (can_create, user, database): (bool, String, String) = (row.get(0), row.get(1), row.get(2));
    let pubname = quote_ident(publication);
    let list = work.add.join(", ");
    match owned {
        None if not_owned.is_empty() && !can_create => problems.add(
            Step::Grant,
            format!(
                "the source user cannot create publication {publication}; {}",
                fix(
                    "the database's owner",
                    None,
                    &format!(
                        "GRANT CREATE ON DATABASE {} TO {}",
                        quote_ident(&database),
                        quote_ident(&user)
                    )
                )
            ),
        ),
        None if !not_owned.is_empty() => problems.add(
            Step::Publication,
            format!(
                "publication {publication} does not exist, and a publication of {} can be \
                 created only by their owner (or a superuser), which {user} is not; {}",
                not_owned.join(", "),
                fix(
                    "the tables' owner",
                    Some(&database),
                    &format!("CREATE PUBLICATION {pubname} FOR TABLE {list}")
                )
            ),
        ),
        Some(false) => problems.add(
            Step::Publication,
            format!(
                "publication {publication} does not include {list}, and only the owner of the \
                 publication (and of the tables) may add them, which {user} is not; {}",
                fix(
                    "that owner",
                    Some(&database),
                    &format!("ALTER PUBLICATION {pubname} ADD TABLE {list}")
                )
            ),
        ),
        Some(true) if !not_owned.is_empty() => problems.add(
            Step::Publication,
            format!(
                "publication {publication} does not include {list}, and adding a table needs \
                 its owner (or a superuser), which {user} is not for {}; {}",
                not_owned.join(", "),
                fix(
                    "that owner",
                    Some(&database),
                    &format!("ALTER PUBLICATION {pubname} ADD TABLE {list}")
                )
            ),
        ),
        _ => {}
    }
    Ok(work)
}

/// The destination user can create walfill's state schema, each target's
/// version tables in its schema, and replace its view at the swap.
pub(super) async fn destination(
    dest: &Client,
    schemas: &[(String, String)],
    problems: &mut Problems,
) -> Result<()> {
    let failed = |e| Error::destination("checking privileges on the destination", e);
    let row = dest
        .query_one(
            "SELECT has_database_privilege(current_database(), 'CREATE'), current_user::text,
                    current_database()::text",
            &[],
        )
        .await
        .map_err(failed)?;
    let (create_db, user, database): (bool, String, String) = (row.get(0), row.get(1), row.get(2));
    let grant_db = format!(
        "GRANT CREATE ON DATABASE {} TO {}",
        quote_ident(&database),
        quote_ident(&user)
    );
    let mut wanted = vec![("walfill".to_string(), None)];
    wanted.extend(schemas.iter().map(|(s, v)| (s.clone(), Some(v.clone()))));
    for (schema, view) in wanted {
        let row = dest
            .query_opt(
                "SELECT has_schema_privilege(n.oid, 'CREATE') AND has_schema_privilege(n.oid, 'USAGE'),
                        (SELECT c.relowner::regrole::text FROM pg_class c
                          WHERE c.relnamespace = n.oid AND c.relname = $2
                            AND NOT pg_has_role(c.relowner, 'USAGE'))
                   FROM pg_namespace n WHERE n.nspname = $1",
                &[&schema, &view.as_deref().unwrap_or("")],
            )
            .await
            .map_err(failed)?;
        let Some(row) = row else {
            if !create_db {
                problems.add(
                    Step::Grant,
                    format!(
                        "the destination user cannot create schema {schema} (for {}); {}",
                        view.as_deref()
                            .map_or("walfill's state".into(), |v| format!(
                                "the versions of {schema}.{v}"
                            )),
                        fix("the database's owner", None, &grant_db)
                    ),
                );
            }
            continue;
        };
        if !row.get::<_, bool>(0) {
            problems.add(
                Step::Grant,
                format!(
                    "the destination user cannot create tables in schema {schema}; {}",
                    fix(
                        "the schema's owner",
                        Some(&database),
                        &format!(
                            "GRANT USAGE, CREATE ON SCHEMA {} TO {}",
                            quote_ident(&schema),
                            quote_ident(&user)
                        )
                    )
                ),
            );
        }
        if let (Some(view), Some(owner)) = (view, row.get::<_, Option<String>>(1)) {
            problems.add(
                Step::Grant,
                format!(
                    "{schema}.{view} belongs to {owner}, and a swap replaces it, which needs its \
                     owner; {}",
                    fix(
                        "a superuser",
                        Some(&database),
                        &format!(
                            "ALTER VIEW {}.{} OWNER TO {}",
                            quote_ident(&schema),
                            quote_ident(&view),
                            quote_ident(&user)
                        )
                    )
                ),
            );
        }
    }
    Ok(())
}
