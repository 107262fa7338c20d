//! `walfill archive`: keep the configured archive filled with the source's
//! WAL, or (`--drop-slot`) drop the physical slot it streams from.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use walfill_replay::Lsn;

use crate::archiver::{self, Dropped};
use crate::config::Config;
use crate::db::{self, Role};
use crate::error::Result;
use crate::upstream::journal;

/// Streams WAL into the archive until cancelled (or, with `until`, until
/// the archive holds all WAL before it).
pub async fn archive(
    config: &Config,
    slot: Option<String>,
    flush_interval: u64,
    until: Option<Lsn>,
    cancel: &CancellationToken,
) -> Result<()> {
    // Best effort: the archiver itself streams over replication.
    if let Ok(source) = db::connect(&config.source, Role::Source).await {
        journal::record_moved_files(&source).await;
    }
    let options = archiver::ArchiveOptions {
        slot,
        flush_interval: Duration::from_secs(flush_interval),
        until,
    };
    archiver::archive(config, &options, cancel).await?;
    Ok(())
}

/// Drops the archiver's physical slot; a slot still streamed from is
/// reported and left, as a failure.
pub async fn drop_slot(config: &Config, slot: Option<&str>) -> Result<()> {
    let (name, dropped) = archiver::drop_slot(config, slot).await?;
    let said = archiver::describe_dropped_slot(&name, &dropped);
    crate::say!("{said}")?;
    match dropped {
        Dropped::InUse => Err(archiver::slot_in_use(&name)),
        _ => Ok(()),
    }
}
