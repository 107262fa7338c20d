//! Is the catalog journal in place, current and complete? Each problem names
//! its fix. Reads only catalogs every role can read, so any user can check.

use tokio_postgres::Client;
use walfill_snapshot::SnapshotError;

use super::{fingerprint, EVENT_TRIGGERS};
use crate::error::Result;

/// Whether the source user may install or remove the catalog journal: event
/// triggers need a superuser.
pub async fn may_maintain(source: &Client) -> Result<bool> {
    Ok(source
        .query_one(
            "SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .await
        .map_err(|e| SnapshotError::query("reading the source user's attributes", e))?
        .get(0))
}

/// The problem that stops [`super::install`] and [`super::uninstall`] for a
/// user that is not a superuser, with the fix: running `walfill COMMAND`
/// once with a superuser's source URL.
pub async fn preflight(source: &Client, command: &str) -> Result<Vec<String>> {
    if may_maintain(source).await? {
        return Ok(Vec::new());
    }
    let row = source
        .query_one("SELECT current_user::text, current_database()::text", &[])
        .await
        .map_err(|e| SnapshotError::query("reading the source user's name", e))?;
    let (user, database): (String, String) = (row.get(0), row.get(1));
    Ok(vec![needs_superuser(&user, &database, command, None)])
}

/// Installing, updating or removing the journal needs a superuser, once;
/// `why` says what is wrong with the journal, when something is.
pub fn needs_superuser(user: &str, database: &str, command: &str, why: Option<&str>) -> String {
    let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
    format!(
        "installing, updating or removing the catalog journal (event triggers) in database \
         {database} needs a superuser, and the source user {user} is not one{why}; fix: run \
         `walfill {command}` once with a superuser's source URL, e.g. \
         WALFILL_SOURCE_URL='postgresql://postgres@HOST/{database}' walfill {command} (later \
         runs of setup, and daily operation, need no superuser)"
    )
}

/// What is wrong with the journal, without the fixes: for a user who cannot
/// carry them out.
pub fn reasons(problems: &[String]) -> String {
    problems
        .iter()
        .map(|p| p.split("; fix:").next().unwrap_or(p))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Problems with the catalog journal in the source, each with its fix: a
/// journal that is missing, outdated or disabled. Empty when all is well;
/// any user can ask.
pub async fn check(source: &Client) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let failed = |what: &'static str| move |e| SnapshotError::query(what, e);

    let installed: Option<String> = source
        .query_opt(
            "SELECT p.prosrc FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'walfill' AND p.proname = 'journal_version'",
            &[],
        )
        .await
        .map_err(failed("looking for the catalog journal"))?
        .map(|r| r.get(0));
    let Some(installed) = installed else {
        problems.push(
            "the catalog journal is not installed in the source, so WAL replay cannot follow \
             its tables' schemas; fix: run walfill setup"
                .to_string(),
        );
        return Ok(problems);
    };
    let current = fingerprint();
    if !installed.contains(&current) {
        problems.push(format!(
            "the catalog journal in the source is outdated (installed: {}, this walfill: \
             {current}); fix: run walfill setup again",
            installed.trim()
        ));
    }

    let triggers = source
        .query(
            "SELECT e.evtname::text, e.evtenabled::text, n.nspname = 'walfill'
               FROM pg_catalog.pg_event_trigger e
               JOIN pg_catalog.pg_proc p ON p.oid = e.evtfoid
               JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
              WHERE e.evtname = ANY ($1)",
            &[&EVENT_TRIGGERS.to_vec()],
        )
        .await
        .map_err(failed("reading the journal's event triggers"))?;
    for name in EVENT_TRIGGERS {
        match triggers.iter().find(|r| r.get::<_, String>(0) == name) {
            None => problems.push(format!(
                "the catalog journal's event trigger {name} is missing, so schema changes go \
                 unrecorded; fix: run walfill setup again"
            )),
            Some(row) if !row.get::<_, bool>(2) => problems.push(format!(
                "event trigger {name} does not call the catalog journal; fix: DROP EVENT \
                 TRIGGER {name}, then run walfill setup again"
            )),
            Some(row) if row.get::<_, String>(1) != "A" => problems.push(format!(
                "the catalog journal's event trigger {name} is not enabled ALWAYS (it is '{}'), \
                 so some schema changes go unrecorded; fix: ALTER EVENT TRIGGER {name} ENABLE \
                 ALWAYS, or run walfill setup again",
                row.get::<_, String>(1)
            )),
            Some(_) => {}
        }
    }

    Ok(problems)
}
