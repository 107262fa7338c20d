//! Removing the archiver's physical slot once archiving is over: the slot
//! makes the source keep every byte of WAL the archive may lack, so a slot
//! nobody streams from keeps WAL without end.

use std::time::Duration;

use crate::config::Config;
use crate::control::status::human_bytes;
use crate::db::{self, Role};
use crate::error::{Error, Result};

/// What [`drop_slot`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The slot was dropped; it kept this many bytes of WAL.
    Yes(i64),
    /// There was no such slot.
    Missing,
    /// A process streams from it: it was left alone.
    InUse,
}

/// Drops the archiver's slot (`slot`, or the default name) unless a
/// `walfill archive` streams from it.
pub async fn drop_slot(config: &Config, slot: Option<&str>) -> Result<(String, Dropped)> {
    let name = slot
        .map(str::to_string)
        .unwrap_or_else(|| super::default_slot_name(config));
    let source = db::connect(&config.source, Role::Source).await?;
    let row = source
        .query_opt(
            "SELECT active, coalesce((pg_current_wal_lsn() - restart_lsn)::bigint, 0)
               FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'physical'",
            &[&name],
        )
        .await
        .map_err(|e| crate::error::Error::source_query("looking up the archiver's slot", e))?;
    let outcome = match row {
        None => Dropped::Missing,
        Some(r) if r.get::<_, bool>(0) => Dropped::InUse,
        Some(r) => {
            crate::upstream::drop_slot_when_free(&source, &name, Duration::from_secs(5)).await?;
            Dropped::Yes(r.get(1))
        }
    };
    Ok((name, outcome))
}

/// What to tell the operator about [`drop_slot`]'s outcome.
pub fn describe(name: &str, dropped: &Dropped) -> String {
    match dropped {
        Dropped::Yes(kept) => format!(
            "dropped the archiver's physical slot {name}, which kept {} of WAL; a later `walfill \
             archive` creates it again from the current position",
            human_bytes(*kept)
        ),
        Dropped::Missing => format!("the source has no archiver slot {name}"),
        Dropped::InUse => in_use(name).to_string(),
    }
}

/// The error for the archiver's slot `name` left in place because a
/// `walfill archive` streams from it ([`Dropped::InUse`]).
pub fn in_use(name: &str) -> Error {
    Error::Busy {
        work: format!("the archiver's slot {name}"),
        holder: "a running `walfill archive`".into(),
        fix: "stop it, then run `walfill archive --drop-slot`".into(),
    }
}
