//! Publishing a version: the view swap, rollback, and retiring old versions.
//!
//! A swap replaces the target's view in one destination transaction, so a
//! reader's query runs entirely against one version or entirely against the
//! other. `CREATE OR REPLACE VIEW` is used when the new columns extend the old
//! ones (grants and dependent objects stay); otherwise the view is dropped and
//! recreated in the same transaction and its grants are restored.

use std::time::Duration;

use tokio_postgres::{Client, Transaction};
use tokio_util::sync::CancellationToken;
use walfill_core::sql::{describe_pg_error, ident_list, quote_ident, quote_literal};

use super::{catch_up, Context, Follower};
use crate::config::{Config, Grant, Target};
use crate::control::state::{self, lock, Phase, VersionState};
use crate::db::{self, Role};
use crate::error::{Directive, Error, Loss, LostVersion, Result};
use crate::failpoint;
use crate::retry::Backoff;
use crate::upstream::{current_wal_lsn, slot_health, SlotHealth};

/// Attempts before a swap blocked by long-running readers gives up.
const LOCK_ATTEMPTS: u32 = 12;
/// Pauses between them: 200 ms, doubling up to 2 s. Only a lock timeout
/// is retried here (the readers may finish); anything else is the caller's.
const LOCK_RETRY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));

/// How long a swap waits for another process (a running `sync`) to bring a
/// version it applies close enough to the source.
const LAG_WAIT: Duration = Duration::from_secs(60);

/// Makes `version` of `target` the one its view shows, once it follows its
/// source, is caught up with it (within `swap_max_lag_bytes`, and at least
/// as far as the active version) and has lost nothing. With `force`, a
/// version that cannot be followed or caught up is published all the same,
/// and the view is marked stale. `dest` may be a session that already
/// holds the version (a backfill's).
pub async fn swap(
    config: &Config,
    dest: &mut Client,
    target: &str,
    version: &str,
    force: bool,
    cancel: &CancellationToken,
) -> Result<()> {
    let stale = ready_to_publish(config, dest, (target, version), force, cancel).await?;
    publish(
        dest,
        (target, config.target(target).ok()),
        version,
        config.backfill.swap_lock_timeout_ms,
        "swap",
        stale.as_deref(),
    )
    .await
}

/// Goes back to the previous version of `target` (followed and caught up
/// first, like a swap, and published anyway with `force`); returns its
/// name.
pub async fn rollback(
    config: &Config,
    dest: &mut Client,
    target: &str,
    force: bool,
    cancel: &CancellationToken,
) -> Result<String> {
    let current = state::target_state(&*dest, target).await?;
    let Some(previous) = current.previous else {
        // Built versions that were never published (a rebuild's) are not
        // "previous", but may be what the operator wants.
        let ready: Vec<String> = dest
            .query(
                "SELECT version FROM walfill.versions
                  WHERE target = $1 AND phase = $2 AND lost IS NULL
                  ORDER BY caught_up_at DESC NULLS LAST, version",
                &[&target, &Phase::Ready.as_str()],
            )
            .await
            .map_err(|e| Error::destination("reading the target's versions", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        return Err(match ready.first() {
            Some(newest) => Error::refused(
                format!(
                    "target {target} has no previous version to roll back to (none was \
                     published before the active one)"
                ),
                format!(
                    "built and ready: {}. `walfill swap {target} {newest}` publishes one",
                    ready.join(", ")
                ),
            ),
            None => Error::refused_no_fix(format!(
                "target {target} has no previous version to roll back to"
            )),
        });
    };
    let stale = ready_to_publish(config, dest, (target, &previous), force, cancel).await?;
    publish(
        dest,
        (target, config.target(target).ok()),
        &previous,
        config.backfill.swap_lock_timeout_ms,
        "rollback",
        stale.as_deref(),
    )
    .await?;
    Ok(previous)
}

/// Checks that `version` can be published, catching it up first when it is
/// too far behind the source or behind the active version, or when its last
/// run failed: a version that cannot follow its source would show readers
/// a view that never catches up. Returns why the view will be stale when
/// `force` publishes such a version anyway.
async fn ready_to_publish(
    config: &Config,
    dest: &mut Client,
    (target, version): (&str, &str),
    force: bool,
    cancel: &CancellationToken,
) -> Result<Option<String>> {
    let mut v = VersionState::load(&*dest, target, version)
        .await?
        .ok_or_else(|| not_built(config, target, version))?;
    if !v.phase.is_live() {
        return Err(Error::refused(
            format!("version {version} of {target} is {}", v.phase),
            format!(
                "only a caught-up version can be swapped in (run `walfill backfill {target}` to \
                 finish it)"
            ),
        ));
    }
    let dead: i64 = dest
        .query_one(
            "SELECT count(*) FROM walfill.dead_letters WHERE target = $1 AND version = $2",
            &[&target, &version],
        )
        .await
        .map_err(|e| Error::destination("counting the version's dead letters", e))?
        .get(0);
    if dead > 0 && !config.backfill.allow_dead_letters {
        return Err(Error::refused(
            format!(
                "version {version} of {target} has {dead} dead letter(s): rows whose transform \
                 failed, absent from the version"
            ),
            format!(
                "see `walfill dead-letters {target} --version {version}`, fix the cause and \
                 retry them (`--retry`), or set [backfill] allow_dead_letters = true to publish \
                 it without them"
            ),
        ));
    }
    let source = db::connect(&config.source, Role::Source).await?;
    let lost = match slot_health(&source, &v.slot_name).await? {
        SlotHealth::Kept => v.lost.clone(),
        SlotHealth::Missing => Some(format!("its replication slot {} is gone", v.slot_name)),
        SlotHealth::Invalidated => Some(format!(
            "the source removed WAL its replication slot {} still needed",
            v.slot_name
        )),
    };
    if let Some(reason) = lost {
        if v.lost.is_none() {
            v.mark_lost(dest, &reason).await?;
        }
        if force {
            return Ok(Some(forced(target, version, &reason)));
        }
        return Err(LostVersion {
            target: target.into(),
            version: version.into(),
            loss: Loss::Publication,
            reason: format!("{reason}, so it misses changes made since"),
            fix: Some(format!(
                "rebuild it with `walfill backfill {target}` (with version = \"{version}\" \
                 configured), or configure a new version; `--force` publishes it anyway, with \
                 the view marked stale"
            )),
        }
        .into());
    }
    // How far the version must get: within the swap lag of the source, and
    // no older than what readers see now.
    let floor = match state::target_state(&*dest, target).await?.active {
        Some(active) if active != version => VersionState::load(&*dest, target, &active)
            .await?
            .and_then(|a| a.applied_lsn),
        _ => None,
    };
    let max_lag = config.backfill.swap_max_lag_bytes;
    let lag = |applied: Option<walfill_core::Lsn>, now: walfill_core::Lsn| {
        now.checked_sub(applied.unwrap_or_default()).unwrap_or(0)
    };
    let far_enough = |applied: Option<walfill_core::Lsn>, now| {
        lag(applied, now) <= max_lag && floor.is_none_or(|f| applied.is_some_and(|a| a >= f))
    };
    let now = current_wal_lsn(&source).await?;
    if far_enough(v.applied_lsn, now) && v.last_error.is_none() {
        return Ok(None);
    }
    tracing::info!(
        target,
        version,
        behind_bytes = lag(v.applied_lsn, now),
        last_error = v.last_error.as_deref().unwrap_or(""),
        "following the version up to the source before publishing it"
    );
    let name = format!("version:{target}:{version}");
    let what = format!("version {version} of {target}");
    match lock::acquire(dest, &name, &what, Duration::from_secs(5)).await {
        Ok(()) => {
            let caught = catch_up_version(config, &source, dest, &mut v, cancel).await;
            lock::release(dest, &name).await?;
            match caught {
                Ok(()) => Ok(None),
                Err(e) if matches!(e.directive(), Directive::Manual) => {
                    let reason = format!("it cannot follow its source: {}", e.describe());
                    if force {
                        return Ok(Some(forced(target, version, &reason)));
                    }
                    Err(LostVersion {
                        target: target.into(),
                        version: version.into(),
                        loss: Loss::Publication,
                        reason,
                        fix: Some(
                            "readers would see a view that never catches up. Rebuild it, or \
                             configure a new version; `--force` publishes it anyway, with the \
                             view marked stale"
                                .into(),
                        ),
                    }
                    .into())
                }
                Err(e) => Err(e),
            }
        }
        Err(Error::Busy { .. }) => {
            // Another process (a running sync) applies it: wait for it.
            let started = std::time::Instant::now();
            loop {
                let v = VersionState::load(&*dest, target, version)
                    .await?
                    .ok_or_else(|| Error::refused_no_fix(format!("version {version} vanished")))?;
                let now = current_wal_lsn(&source).await?;
                if far_enough(v.applied_lsn, now) {
                    return Ok(None);
                }
                if started.elapsed() > LAG_WAIT {
                    return Err(Error::Busy {
                        work: what,
                        holder: format!(
                            "another walfill process, which is applying it{}",
                            v.last_error
                                .map(|e| format!(" (its last error: {e})"))
                                .unwrap_or_default()
                        ),
                        fix: format!(
                            "try again when it has caught up (it is {} bytes behind the source: \
                             more than swap_max_lag_bytes = {max_lag}, or behind the active \
                             version)",
                            lag(v.applied_lsn, now)
                        ),
                    });
                }
                tokio::select! {
                    _ = cancel.cancelled() => return Err(Error::Interrupted),
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
        Err(e) => Err(e),
    }
}

/// Why a forced publication leaves the view stale, logged.
fn forced(target: &str, version: &str, reason: &str) -> String {
    tracing::warn!(
        target,
        version,
        reason,
        "publishing the version anyway (--force): the view is marked stale until a version \
         that follows its source is published"
    );
    format!("version {version} was published with --force: {reason}")
}

/// Applies the stream to a version until it is within the swap lag.
async fn catch_up_version(
    config: &Config,
    source: &Client,
    dest: &mut Client,
    v: &mut VersionState,
    cancel: &CancellationToken,
) -> Result<()> {
    v.take_lease(&*dest).await?;
    let plan = v.plan(dest).await?;
    let catalog = db::connect(&config.source, Role::Source).await?;
    let cx = Context {
        config,
        source,
        cancel,
    };
    let mut follower = Follower::open(&cx, catalog, v, &plan, None, None).await?;
    catch_up(&cx, dest, v, &mut follower, "swap.catchup").await
}

/// Replaces the view, retrying while long-running readers hold it; the
/// target's declared indexes (`declared`, its configuration) are built on
/// the version's table first, and its declared grants applied with the
/// swap.
async fn publish(
    dest: &mut Client,
    (target, declared): (&str, Option<&Target>),
    version: &str,
    lock_timeout_ms: u64,
    kind: &str,
    stale: Option<&str>,
) -> Result<()> {
    if let Some(declared) = declared {
        build_indexes(dest, declared, target, version).await?;
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        match try_swap(
            dest,
            target,
            version,
            lock_timeout_ms,
            kind,
            stale,
            declared,
        )
        .await
        {
            Err(Error::Destination { source, .. })
                if attempt < LOCK_ATTEMPTS
                    && source.code()
                        == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
            {
                tracing::warn!(
                    target,
                    attempt,
                    "long-running readers hold the view; retrying the swap"
                );
                tokio::time::sleep(LOCK_RETRY.after(attempt)).await;
            }
            other => return other,
        }
    }
}

/// Builds `declared`'s indexes on the table of `version` (those it lacks),
/// outside the swap's transaction.
async fn build_indexes(
    dest: &Client,
    declared: &Target,
    target: &str,
    version: &str,
) -> Result<()> {
    if declared.indexes.is_empty() {
        return Ok(());
    }
    let v = VersionState::load_existing(dest, target, version).await?;
    for spec in &declared.indexes {
        let name = index_name(&v.table_name, spec);
        let sql = format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} {spec}",
            quote_ident(&name),
            v.staging_table()
        );
        tracing::info!(target, version, index = %name, %spec, "building a declared index");
        dest.batch_execute(&sql).await.map_err(|e| {
            Error::destination(
                format!("building the declared index {spec} of target {target}"),
                e,
            )
        })?;
    }
    Ok(())
}

/// A declared index's name on `table`: the table's name and a hash of the
/// declaration, so a changed declaration gives a new index.
fn index_name(table: &str, spec: &str) -> String {
    let hash = format!("{:08x}", walfill_core::name::fnv1a(spec.as_bytes()) as u32);
    let stem: String = table.chars().take(63 - 1 - hash.len()).collect();
    format!("{stem}_{hash}")
}

/// One attempt at the swap, in one transaction (under `lock_timeout_ms`).
async fn try_swap(
    dest: &mut Client,
    target: &str,
    version: &str,
    lock_timeout_ms: u64,
    kind: &str,
    stale: Option<&str>,
    declared: Option<&Target>,
) -> Result<()> {
    let tx = dest
        .transaction()
        .await
        .map_err(|e| Error::destination("starting the swap", e))?;
    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{lock_timeout_ms}ms'"))
        .await
        .map_err(|e| Error::destination("setting the swap's lock timeout", e))?;
    let v = VersionState::load_existing(&tx, target, version).await?;
    match v.phase {
        Phase::Ready | Phase::Active | Phase::Previous if v.lost.is_none() => {}
        phase => {
            let lost = if v.lost.is_some() {
                " and lost changes"
            } else {
                ""
            };
            return Err(Error::refused(
                format!("version {version} of {target} is {phase}{lost}"),
                format!(
                    "only a caught-up version can be swapped in (run `walfill backfill {target}` \
                     to finish it)"
                ),
            ));
        }
    }
    let current = lock_target(&tx, target, &v.dest_schema).await?;
    // The active version rebuilt beside the table readers see is published
    // again; otherwise an active version is done.
    let republish = current.as_deref() == Some(version);
    if republish && v.replaced_table.is_none() {
        tracing::info!(target, version, "already active");
        return Ok(());
    }
    let schema = quote_ident(&v.dest_schema);
    let view = View {
        target,
        version,
        name: format!("{schema}.{}", quote_ident(target)),
        table: format!("{schema}.{}", quote_ident(&v.table_name)),
    };
    let recreate = declared.is_some_and(|d| d.recreate_dependents);
    replace_view(&tx, &view, &v.dest_schema, recreate).await?;
    let grants = declared.map(|d| d.grants.as_slice()).unwrap_or_default();
    grant_declared(&tx, &view, grants).await?;
    if let Some(replaced) = &v.replaced_table {
        drop_replaced(&tx, &view, &format!("{schema}.{}", quote_ident(replaced))).await?;
    }
    let old = current.as_deref().filter(|_| !republish);
    record_swap(&tx, &view, old, current.as_deref(), kind, stale).await?;
    failpoint::hit("swap.before_commit");
    tx.commit()
        .await
        .map_err(|e| Error::destination("committing the swap", e))?;
    failpoint::hit("swap.end");
    tracing::info!(
        target,
        version,
        from = current.as_deref().unwrap_or("none"),
        "view now shows version"
    );
    Ok(())
}

/// The view a swap points at a version's table.
struct View<'a> {
    target: &'a str,
    version: &'a str,
    /// The view, quoted and qualified.
    name: String,
    /// The version's table, quoted and qualified.
    table: String,
}

/// Locks the target's row (serializing concurrent swaps of the same
/// target); returns its active version.
async fn lock_target(tx: &Transaction<'_>, target: &str, schema: &str) -> Result<Option<String>> {
    let failed = |what: &'static str| move |e| Error::destination(what, e);
    tx.execute(
        "INSERT INTO walfill.targets (target, dest_schema) VALUES ($1, $2)
         ON CONFLICT (target) DO NOTHING",
        &[&target, &schema],
    )
    .await
    .map_err(failed("recording the target"))?;
    let current = tx
        .query_one(
            "SELECT active_version FROM walfill.targets WHERE target = $1 FOR UPDATE",
            &[&target],
        )
        .await
        .map_err(failed("locking the target's state"))?
        .get(0);
    Ok(current)
}

/// Points the view at the version's table: `CREATE OR REPLACE VIEW`, or,
/// when the columns changed in a way that cannot express, the view dropped
/// and created again with its grants (and, with `recreate`, the objects
/// that depend on it).
async fn replace_view(
    tx: &Transaction<'_>,
    view: &View<'_>,
    schema: &str,
    recreate: bool,
) -> Result<()> {
    let failed = |what: &'static str| move |e| Error::destination(what, e);
    let columns: Vec<String> = tx
        .query(
            "SELECT attname::text FROM pg_attribute
              WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped
                AND attname NOT LIKE '\\_walfill\\_%'
              ORDER BY attnum",
            &[&view.table],
        )
        .await
        .map_err(failed("reading the version's columns"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let grants = existing_grants(tx, view, schema).await?;
    let create = format!(
        "VIEW {} AS SELECT {} FROM {} WHERE NOT _walfill_deleted",
        view.name,
        ident_list(columns.iter().map(String::as_str)),
        view.table
    );
    tx.batch_execute("SAVEPOINT walfill_replace")
        .await
        .map_err(failed("swapping the view"))?;
    let Err(e) = tx
        .batch_execute(&format!("CREATE OR REPLACE {create}"))
        .await
    else {
        return Ok(());
    };
    if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
        return Err(Error::destination("swapping the view", e));
    }
    // The columns differ in a way CREATE OR REPLACE cannot express.
    tracing::debug!(error = %describe_pg_error(&e), "recreating the view");
    tx.batch_execute("ROLLBACK TO SAVEPOINT walfill_replace")
        .await
        .map_err(failed("swapping the view"))?;
    let dependents = match recreate {
        true => crate::control::dependents::find(tx, &view.name).await?,
        false => Vec::new(),
    };
    let cascade = if dependents.is_empty() {
        ""
    } else {
        " CASCADE"
    };
    tx.batch_execute(&format!(
        "DROP VIEW IF EXISTS {}{cascade}; CREATE {create}",
        view.name
    ))
    .await
    .map_err(|e| cannot_recreate(view, e))?;
    for grant in grants {
        tx.batch_execute(&grant)
            .await
            .map_err(failed("restoring the view's grants"))?;
    }
    for dependent in &dependents {
        for statement in &dependent.create {
            tx.batch_execute(statement).await.map_err(|e| {
                Error::refused(
                    format!(
                        "the {} {} depends on the view and no longer fits its new columns: {}",
                        dependent.kind,
                        dependent.name,
                        describe_pg_error(&e)
                    ),
                    "the swap changed nothing: change or drop it, then swap again",
                )
            })?;
        }
        tracing::info!(
            target = view.target,
            version = view.version,
            object = %dependent.name,
            kind = dependent.kind,
            "recreated an object that depends on the view"
        );
    }
    Ok(())
}

/// The grants on the view now (to restore when it is created again); fails
/// when the view's name is taken by something that is not a view.
async fn existing_grants(
    tx: &Transaction<'_>,
    view: &View<'_>,
    schema: &str,
) -> Result<Vec<String>> {
    let existing: Option<(String, Vec<String>)> = tx
        .query_opt(
            "SELECT c.relkind::text, coalesce((SELECT array_agg(format('GRANT %s ON %s TO %s%s',
                        a.privilege_type, $2::text,
                        CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END,
                        CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END))
                    FROM aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
                    WHERE a.grantee <> c.relowner), '{}')
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relname = $3",
            &[&schema, &view.name, &view.target],
        )
        .await
        .map_err(|e| Error::destination("looking at the current view", e))?
        .map(|r| (r.get(0), r.get(1)));
    match existing {
        Some((kind, _)) if kind != "v" => Err(Error::refused(
            format!("{schema}.{} exists and is not a view", view.target),
            "walfill publishes versions through a view of that name: rename or drop it",
        )),
        Some((_, grants)) => Ok(grants),
        None => Ok(Vec::new()),
    }
}

/// The error of a view that could not be dropped and created again.
fn cannot_recreate(view: &View<'_>, e: tokio_postgres::Error) -> Error {
    if e.code() != Some(&tokio_postgres::error::SqlState::DEPENDENT_OBJECTS_STILL_EXIST) {
        return Error::destination(format!("recreating view {}", view.name), e);
    }
    let detail = e
        .as_db_error()
        .and_then(|d| d.detail())
        .unwrap_or("see the view's dependents")
        .replace('\n', "; ");
    Error::refused(
        format!(
            "publishing version {} of {} changes the view's columns, so {} must be dropped and \
             created again, and objects depend on it ({detail})",
            view.version, view.target, view.name
        ),
        "set `dependent_views = \"recreate\"` on the target (the swap recreates them), or drop \
         them and recreate them after the swap",
    )
}

/// The declared grants, on the view and the version's table: restored with
/// every swap, even after the schema was lost.
async fn grant_declared(tx: &Transaction<'_>, view: &View<'_>, grants: &[Grant]) -> Result<()> {
    for grant in grants {
        for object in [&view.name, &view.table] {
            tx.batch_execute(&format!(
                "GRANT {} ON {object} TO {}",
                grant.privileges, grant.roles
            ))
            .await
            .map_err(|e| {
                let what = format!(
                    "applying the declared grant {} TO {} of target {}",
                    grant.privileges, grant.roles, view.target
                );
                Error::destination(what, e)
            })?;
        }
    }
    tx.execute(
        &format!(
            "COMMENT ON VIEW {} IS {}",
            view.name,
            quote_literal(&format!(
                "walfill: target {}, version {}",
                view.target, view.version
            ))
        ),
        &[],
    )
    .await
    .map_err(|e| Error::destination("commenting the view", e))?;
    Ok(())
}

/// Drops the table a rebuilt active version replaced.
async fn drop_replaced(tx: &Transaction<'_>, view: &View<'_>, replaced: &str) -> Result<()> {
    let failed = |what: &'static str| move |e| Error::destination(what, e);
    tx.batch_execute(&format!("DROP TABLE IF EXISTS {replaced}"))
        .await
        .map_err(failed("dropping the version's earlier table"))?;
    tx.execute(
        "UPDATE walfill.versions SET replaced_table = NULL WHERE target = $1 AND version = $2",
        &[&view.target, &view.version],
    )
    .await
    .map_err(failed("recording the swap"))?;
    Ok(())
}

/// Records the swap: the phases (the version that was active, `old`, stays
/// current for rollback; an older previous one becomes merely ready, still
/// followed until retired), the target's active and previous versions
/// (unless republished), whether the view is stale, and the event.
async fn record_swap(
    tx: &Transaction<'_>,
    view: &View<'_>,
    old: Option<&str>,
    current: Option<&str>,
    kind: &str,
    stale: Option<&str>,
) -> Result<()> {
    let failed = |what: &'static str| move |e| Error::destination(what, e);
    let (target, version) = (view.target, view.version);
    state::swap_phases(tx, target, version, old).await?;
    if current != Some(version) {
        tx.execute(
            "UPDATE walfill.targets SET active_version = $2, previous_version = $3,
                    swapped_at = now()
              WHERE target = $1",
            &[&target, &version, &current],
        )
        .await
        .map_err(failed("recording the swap"))?;
    }
    tx.execute(
        "UPDATE walfill.targets SET stale = $2 WHERE target = $1",
        &[&target, &stale],
    )
    .await
    .map_err(failed("recording whether the view is stale"))?;
    let detail = serde_json::json!({ "from": current, "to": version, "stale": stale });
    state::record_event(tx, target, Some(version), kind, detail).await
}

/// The error for a version that was never built: how to build it without
/// publishing it, then publish it.
fn not_built(config: &Config, target: &str, version: &str) -> Error {
    let configured = config
        .target(target)
        .map(|t| t.version == version)
        .unwrap_or(false);
    let first = if configured {
        String::new()
    } else {
        format!("set version = \"{version}\" in target {target}'s configuration, then ")
    };
    Error::refused(
        format!("version {version} of {target} is not built yet"),
        format!(
            "{first}build it without publishing it with `walfill backfill {target} --no-swap`, \
             then run `walfill swap {target} {version}`"
        ),
    )
}
