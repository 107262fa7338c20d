//! `walfill setup`: check the source and destination, then install the
//! publication and the state schema.
//!
//! Every check runs before anything is written, and every problem is reported
//! with its fix; a failed setup changes nothing.

mod checks;
mod problems;

use walfill_core::sql::quote_ident;
use walfill_snapshot::SnapshotError;

use crate::config::Config;
use crate::control::state;
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::version_sql::{self, Definition};
use crate::upstream::journal;
use problems::{Problems, Step};

/// Checks everything, then installs what walfill needs.
///
/// Problems are listed in the order their fixes can be carried out. A rerun
/// that finds everything in place needs only the privileges of daily
/// operation; the catalog journal alone needs a superuser, to install or
/// update it.
pub async fn setup(config: &Config) -> Result<()> {
    // An archive URL that points at the wrong place (a pgBackRest
    // repository's root, a layout that cannot be told) is a configuration
    // error: said before anything is written.
    if let Some(url) = &config.archive {
        if let Err(e) = config.open_archive(url)?.layout().await {
            if e.is_misconfigured() {
                return Err(e.into());
            }
        }
    }
    let source = db::connect(&config.source, Role::Source).await?;
    let dest = db::connect(&config.destination, Role::Destination).await?;
    let mut problems = Problems::default();
    checks::server(&source, &mut problems).await?;

    let mut tables = Vec::new();
    let mut warnings = Vec::new();
    for target in &config.targets {
        let def = Definition::from_config(target);
        let table = match version_sql::describe(&source, &def).await {
            Ok(t) => t,
            Err(Error::Source(e @ SnapshotError::Unusable { .. })) => {
                problems.add(Step::Config, format!("target {}: {e}", target.name));
                continue;
            }
            Err(Error::Problems(p)) => {
                problems.extend(Step::Config, p);
                continue;
            }
            Err(e) => return Err(e),
        };
        checks::readable(&source, &target.name, &table, &mut problems).await?;
        match version_sql::build(&dest, &def, table.clone()).await {
            Ok(plan) => warnings.extend(plan.warnings),
            Err(Error::Problems(mut p)) => {
                let create =
                    crate::pipeline::enum_labels::create_missing(&source, &dest, table.oid).await?;
                if let (false, Some(last)) = (create.is_empty(), p.last_mut()) {
                    last.push_str(&format!(
                        "; create its enum types there first:\n      {}",
                        create.join("\n      ")
                    ));
                }
                problems.extend(Step::Config, p)
            }
            Err(e) => return Err(e),
        }
        tables.push((target.name.clone(), table));
    }
    let publication = &config.backfill.publication;
    let work = checks::publication(&source, publication, &tables, &mut problems).await?;
    let views: Vec<(String, String)> = config
        .targets
        .iter()
        .map(|t| (t.schema.clone(), t.name.clone()))
        .collect();
    checks::destination(&dest, &views, &mut problems).await?;

    // Replay needs the catalog journal, installed (or updated, or repaired)
    // by a superuser; and a source that switches WAL segments when asked.
    let mut install_journal = false;
    if config.archive.is_some() {
        checks::switch_wal(&source, &mut problems).await?;
        let journal_problems = journal::check(&source).await?;
        install_journal = !journal_problems.is_empty();
        if install_journal && !journal::may_maintain(&source).await? {
            let row = source
                .query_one("SELECT current_user::text, current_database()::text", &[])
                .await
                .map_err(|e| SnapshotError::query("reading the source user's name", e))?;
            let why = journal::reasons(&journal_problems);
            problems.add(
                Step::Superuser,
                journal::needs_superuser(row.get(0), row.get(1), "setup", Some(&why)),
            );
        }
    }
    if let Some(unlimited) = crate::control::status::unlimited_keep_warning(&source).await? {
        warnings.push(unlimited);
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    if let Some(error) = problems.into_error() {
        return Err(error);
    }

    state::install(&dest).await?;
    if install_journal {
        let report = journal::install(&source).await?;
        crate::say!(
            "catalog journal installed in the source: {} table(s) described",
            report.tables
        )?;
        if report.old_triggers_removed > 0 {
            crate::say!(
                "removed the truncate trigger an earlier walfill attached to {} table(s): \
                 TRUNCATE is now followed from the WAL",
                report.old_triggers_removed
            )?;
        }
    } else if config.archive.is_some() {
        journal::record_moved_files(&source).await;
    }
    if work.create {
        let sql = if work.add.is_empty() {
            format!("CREATE PUBLICATION {}", quote_ident(publication))
        } else {
            format!(
                "CREATE PUBLICATION {} FOR TABLE {}",
                quote_ident(publication),
                work.add.join(", ")
            )
        };
        source
            .batch_execute(&sql)
            .await
            .map_err(|e| SnapshotError::query("creating the publication", e))?;
    } else if !work.add.is_empty() {
        let sql = format!(
            "ALTER PUBLICATION {} ADD TABLE {}",
            quote_ident(publication),
            work.add.join(", ")
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

/// `walfill teardown`: removes the catalog journal from the source and
/// drops the archiver's physical slot, when there is one.
pub async fn teardown(config: &Config) -> Result<()> {
    let source = db::connect(&config.source, Role::Source).await?;
    journal::uninstall(&source).await?;
    crate::say!("catalog journal removed from {}", config.source)?;
    let (name, dropped) = crate::archiver::drop_slot(config, None).await?;
    if dropped != crate::archiver::Dropped::Missing {
        crate::say!(
            "{}",
            crate::archiver::describe_dropped_slot(&name, &dropped)
        )?;
    }
    Ok(())
}
