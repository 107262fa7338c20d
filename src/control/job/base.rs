//! The base snapshot a snapshot backfill leaves in walfill's store of bases
//! (the archive of walfill's own layout, or `[archive] bases_url`).

use tokio_postgres::Client;
use walfill_core::Lsn;
use walfill_replay::archive::{Archive, ArchiveError};

use crate::config::Config;
use crate::error::Result;
use crate::pipeline::base::BaseWriter;
use crate::pipeline::version_sql::Plan;

/// A writer for the base at `boundary` of slot `slot` (a snapshot copy's,
/// or a replay's), when a store of bases is configured and base snapshots
/// are on. A problem preparing it is logged, not fatal: the fill goes on
/// without.
pub(super) async fn writer(
    config: &Config,
    source: &Client,
    plan: &Plan,
    slot: &str,
    boundary: Lsn,
) -> Option<BaseWriter> {
    let opened = config.open_bases()?;
    if !config.archive_settings.base_snapshots {
        return None;
    }
    let archive = match opened {
        Ok(archive) => archive,
        Err(e) => {
            tracing::warn!(error = %e, "not writing a base snapshot");
            return None;
        }
    };
    match archive.check_writable().await {
        Ok(()) => {}
        Err(ArchiveError::ReadOnly { layout, .. }) => {
            tracing::info!(
                archive = %archive.url(),
                %layout,
                "not writing a base snapshot: the archive has the {layout} \
                 layout, which walfill only reads; set [archive] bases_url to a location \
                 beside it for walfill to keep this table's bases (until then, later versions \
                 replay from its creation or copy again)"
            );
            return None;
        }
        Err(e) => {
            tracing::warn!(error = %e, "not writing a base snapshot");
            return None;
        }
    }
    let keep = config.archive_settings.keep_bases;
    match prepare((archive, keep), source, plan, slot, boundary).await {
        // The cluster's identity goes into the manifest, so that compaction
        // need not ask the source for it.
        Ok(writer) => match crate::control::route::source_identity(config).await {
            Ok(identity) => Some(writer.of_system(Some(identity.system_id))),
            Err(e) => {
                tracing::debug!(error = %e.describe(), "the base records no system identifier");
                Some(writer)
            }
        },
        Err(e) => {
            tracing::warn!(error = %e.describe(), "not writing a base snapshot");
            None
        }
    }
}

async fn prepare(
    (archive, keep): (Archive, u32),
    source: &Client,
    plan: &Plan,
    slot: &str,
    boundary: Lsn,
) -> Result<BaseWriter> {
    let row = source
        .query_one(
            "SELECT (SELECT oid FROM pg_database WHERE datname = current_database()),
                    (SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1)",
            &[&slot],
        )
        .await
        .map_err(|e| crate::error::Error::source_query("reading the slot's restart LSN", e))?;
    let database: u32 = row.get(0);
    let restart: Lsn = row
        .get::<_, Option<String>>(1)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| crate::error::Error::Internal(format!("slot {slot} has no restart LSN")))?;
    let catalog = crate::upstream::catalog::load(source).await?;
    let relation = catalog.by_oid(plan.source.oid).ok_or_else(|| {
        crate::error::Error::Internal(format!("{} is not in the source's catalog", plan.source))
    })?;
    if let Some(why) = crate::pipeline::base::undecodable(&relation.spec) {
        return Err(crate::error::Error::history(format!(
            "no base snapshot can be kept of {}: {why}",
            plan.source
        )));
    }
    let columns = plan
        .source
        .replicated_columns()
        .map(|c| c.name.clone())
        .collect();
    Ok(BaseWriter::new(
        archive,
        database,
        relation.spec.clone(),
        columns,
        (boundary, restart),
    )
    .keeping(keep))
}
