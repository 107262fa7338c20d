//! The objects readers build on a target's view: views, materialized
//! views (and views on those), and SQL-standard functions (`BEGIN ATOMIC`)
//! that read it. A version whose columns differ from the view's in a way
//! `CREATE OR REPLACE VIEW` cannot express (a column dropped, renamed,
//! retyped or moved) must drop and recreate the view, which they block.
//!
//! `plan` and the backfill find that out before building, name them and
//! give the choices. With `[[target]] dependent_views = "recreate"`, the
//! swap saves their definitions, owners and grants, and recreates them in
//! its own transaction after the view; one that no longer parses against
//! the new columns fails the swap, which changes nothing.

use tokio_postgres::GenericClient;
use walfill_core::sql::quote_qualified;

use crate::config::Target;
use crate::error::{Error, Result};
use crate::pipeline::version_sql::Plan;

/// One object that depends on the view, as it can be created again.
#[derive(Clone, Debug)]
pub struct Dependent {
    /// Its name, qualified and quoted (a function: with its arguments).
    pub name: String,
    /// `view`, `materialized view` or `function`.
    pub kind: &'static str,
    /// The statements that create it again: definition, owner, grants.
    pub create: Vec<String>,
}

/// The objects that depend on `view` (qualified, quoted), directly or
/// through each other, in an order they can be created in.
pub async fn find(client: &impl GenericClient, view: &str) -> Result<Vec<Dependent>> {
    let failed = |e| Error::destination("looking for the objects that depend on the view", e);
    let rows = client
        .query(
            "WITH RECURSIVE deps(oid, depth) AS (
                 SELECT to_regclass($1)::oid, 0
                 UNION
                 SELECT r.ev_class, deps.depth + 1
                   FROM deps
                   JOIN pg_depend d ON d.refobjid = deps.oid
                                   AND d.refclassid = 'pg_class'::regclass
                                   AND d.classid = 'pg_rewrite'::regclass
                   JOIN pg_rewrite r ON r.oid = d.objid
                  WHERE r.ev_class <> deps.oid AND deps.depth < 32),
             rels AS (
                 SELECT c.oid, max(deps.depth) AS depth FROM deps
                   JOIN pg_class c ON c.oid = deps.oid
                  WHERE deps.depth > 0 GROUP BY c.oid)
             SELECT format('%I.%I', n.nspname, c.relname), c.relkind::text, rels.depth,
                    pg_get_viewdef(c.oid), pg_get_userbyid(c.relowner),
                    coalesce((SELECT array_agg(format('%s %s', a.privilege_type,
                                 CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                      ELSE quote_ident(pg_get_userbyid(a.grantee)) END))
                                FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner),
                             '{}')
               FROM rels JOIN pg_class c ON c.oid = rels.oid
               JOIN pg_namespace n ON n.oid = c.relnamespace
             UNION ALL
             SELECT p.oid::regprocedure::text, 'f', 1000, pg_get_functiondef(p.oid),
                    pg_get_userbyid(p.proowner), '{}'
               FROM pg_proc p
              WHERE p.oid IN (SELECT d.objid FROM pg_depend d
                               WHERE d.classid = 'pg_proc'::regclass
                                 AND d.refclassid = 'pg_class'::regclass
                                 AND d.refobjid IN (SELECT oid FROM rels
                                                    UNION SELECT to_regclass($1)::oid))
             ORDER BY 3, 1",
            &[&view],
        )
        .await
        .map_err(failed)?;
    Ok(rows
        .iter()
        .map(|r| {
            let (name, kind, definition, owner, grants): (
                String,
                String,
                String,
                String,
                Vec<String>,
            ) = (r.get(0), r.get(1), r.get(3), r.get(4), r.get(5));
            let (kind, create, alter) = match &kind[..] {
                "m" => (
                    "materialized view",
                    format!("CREATE MATERIALIZED VIEW {name} AS {definition}"),
                    "MATERIALIZED VIEW",
                ),
                "f" => ("function", definition.clone(), "FUNCTION"),
                _ => (
                    "view",
                    format!("CREATE VIEW {name} AS {definition}"),
                    "VIEW",
                ),
            };
            let mut statements = vec![
                create,
                format!(
                    "ALTER {alter} {name} OWNER TO {}",
                    walfill_core::sql::quote_ident(&owner)
                ),
            ];
            for grant in grants {
                if let Some((privilege, grantee)) = grant.split_once(' ') {
                    statements.push(format!("GRANT {privilege} ON {name} TO {grantee}"));
                }
            }
            Dependent {
                name,
                kind,
                create: statements,
            }
        })
        .collect())
}

/// Refuses to build a version of `target` whose columns the view cannot
/// take by `CREATE OR REPLACE VIEW` while objects depend on the view,
/// unless the target recreates them; names them and the choices.
pub async fn check(client: &impl GenericClient, target: &Target, plan: &Plan) -> Result<()> {
    if target.recreate_dependents {
        return Ok(());
    }
    let view = quote_qualified(&target.schema, &target.name);
    let failed = |e| Error::destination("reading the target's view", e);
    let current: Vec<(String, String)> = client
        .query(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
              WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
              ORDER BY attnum",
            &[&view],
        )
        .await
        .map_err(failed)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let new: Vec<(String, String)> = plan
        .outputs
        .iter()
        .map(|o| (o.name.clone(), o.sql_type.clone()))
        .collect();
    if current.is_empty() || new.starts_with(&current) {
        return Ok(());
    }
    let dependents = find(client, &view).await?;
    if dependents.is_empty() {
        return Ok(());
    }
    Err(Error::refused(
        format!(
            "version {} of {} changes the view's columns (from {} to {}), so publishing it must \
             drop and recreate {view}, and these objects depend on it: {}",
            plan.def.version,
            target.name,
            describe(&current),
            describe(&new),
            dependents
                .iter()
                .map(|d| format!("{} ({})", d.name, d.kind))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "choose one: set `dependent_views = \"recreate\"` on the target (the swap saves their \
         definitions, owners and grants and recreates them in its transaction, and fails if one \
         no longer fits); or drop them now and recreate them after the swap; or keep the view's \
         columns as they are, adding new ones at the end only",
    ))
}

fn describe(columns: &[(String, String)]) -> String {
    columns
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}
