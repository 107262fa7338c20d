//! The source side of the archiver: a replication connection, what the
//! server says about itself, and the physical slot.
//!
//! The connection is opened with `replication=database`, so it accepts both
//! replication commands and plain SQL (used to read `pg_replication_slots`
//! and the segment size). Its commands are blocking round trips; the stream
//! itself is read asynchronously once started.

use pg_walstream::{PgReplicationConnection, ReplicationSlotOptions, SlotType};
use walfill_replay::{Lsn, TimelineId};

use crate::config::PgUrl;

use super::error::ArchiverError;

/// What IDENTIFY_SYSTEM says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SystemInfo {
    /// The cluster's system identifier.
    pub(crate) system_id: String,
    /// The server's current timeline.
    pub(crate) timeline: TimelineId,
    /// How far the server has flushed WAL.
    pub(crate) flushed: Lsn,
}

/// A slot as `pg_replication_slots` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotInfo {
    /// `physical` or `logical`.
    pub(crate) slot_type: String,
    /// Where the server keeps WAL from for it (none if it reserves none).
    pub(crate) restart_lsn: Option<Lsn>,
    /// The process streaming from it, if any.
    pub(crate) active_pid: Option<String>,
}

/// A replication connection to the source.
pub(crate) struct Source {
    conn: PgReplicationConnection,
    url: String,
}

impl Source {
    /// Connects (blocking round trips; no retry here).
    pub(crate) fn connect(url: &PgUrl) -> Result<Source, ArchiverError> {
        let conn = PgReplicationConnection::connect(&crate::db::replication_url(url).url).map_err(
            |e| {
                ArchiverError::replication(
                    format!("connecting to the source {url} for replication"),
                    e,
                )
            },
        )?;
        Ok(Source {
            conn,
            url: url.to_string(),
        })
    }

    /// IDENTIFY_SYSTEM.
    pub(crate) fn identify(&mut self) -> Result<SystemInfo, ArchiverError> {
        let result = self
            .conn
            .identify_system()
            .map_err(|e| ArchiverError::replication("IDENTIFY_SYSTEM", e))?;
        let field = |col: i32, what: &str| {
            result.get_value(0, col).ok_or_else(|| {
                ArchiverError::Protocol(format!("IDENTIFY_SYSTEM returned no {what}"))
            })
        };
        let system_id = field(0, "system identifier")?;
        let timeline = field(1, "timeline")?;
        let timeline = timeline.parse().map(TimelineId).map_err(|_| {
            ArchiverError::Protocol(format!("IDENTIFY_SYSTEM returned timeline {timeline:?}"))
        })?;
        let flushed = parse_lsn(&field(2, "WAL position")?, "IDENTIFY_SYSTEM")?;
        Ok(SystemInfo {
            system_id,
            timeline,
            flushed,
        })
    }

    /// The server's WAL segment size in bytes.
    pub(crate) fn segment_size(&mut self) -> Result<u32, ArchiverError> {
        let text = self.value(
            "SELECT pg_size_bytes(current_setting('wal_segment_size'))::text",
            "reading wal_segment_size",
        )?;
        text.and_then(|t| t.parse().ok()).ok_or_else(|| {
            ArchiverError::Protocol("wal_segment_size is not a number of bytes".to_string())
        })
    }

    /// The slot, if it exists.
    pub(crate) fn slot(&mut self, slot: &str) -> Result<Option<SlotInfo>, ArchiverError> {
        let sql = format!(
            "SELECT slot_type, restart_lsn::text, active_pid::text FROM pg_replication_slots \
             WHERE slot_name = {}",
            quote_literal(slot)
        );
        let result = self.conn.exec(&sql).map_err(|e| {
            ArchiverError::replication(format!("reading replication slot {slot}"), e)
        })?;
        if result.ntuples() == 0 {
            return Ok(None);
        }
        let restart_lsn = match result.get_value(0, 1) {
            Some(text) => Some(parse_lsn(&text, "pg_replication_slots.restart_lsn")?),
            None => None,
        };
        Ok(Some(SlotInfo {
            slot_type: result.get_value(0, 0).unwrap_or_default(),
            restart_lsn,
            active_pid: result.get_value(0, 2),
        }))
    }

    /// Creates a physical slot that reserves WAL at once (from the last
    /// checkpoint's redo point).
    pub(crate) fn create_slot(&mut self, slot: &str) -> Result<(), ArchiverError> {
        let options = ReplicationSlotOptions {
            reserve_wal: true,
            ..Default::default()
        };
        self.conn
            .create_replication_slot_with_options(slot, SlotType::Physical, None, &options)
            .map_err(|e| {
                ArchiverError::replication(format!("creating physical replication slot {slot}"), e)
            })?;
        Ok(())
    }

    /// Starts streaming WAL of `timeline` from `start` through `slot`; the
    /// connection is then only good for reading the stream and sending
    /// status updates.
    pub(crate) fn start(
        mut self,
        slot: &str,
        start: Lsn,
        timeline: TimelineId,
    ) -> Result<PgReplicationConnection, ArchiverError> {
        self.conn
            .start_physical_replication(Some(slot), start.0, Some(timeline.0))
            .map_err(|e| {
                ArchiverError::replication(
                    format!(
                        "starting physical replication from {} at {start} on timeline {timeline} through slot {slot}",
                        self.url
                    ),
                    e,
                )
            })?;
        Ok(self.conn)
    }

    /// The single value of a query (NULL as `None`).
    fn value(&mut self, sql: &str, what: &str) -> Result<Option<String>, ArchiverError> {
        let result = self
            .conn
            .exec(sql)
            .map_err(|e| ArchiverError::replication(what.to_string(), e))?;
        Ok(result.get_value(0, 0))
    }
}

fn parse_lsn(text: &str, what: &str) -> Result<Lsn, ArchiverError> {
    text.parse()
        .map_err(|_| ArchiverError::Protocol(format!("{what} returned {text:?}, not an LSN")))
}

/// A SQL string literal.
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Whether `name` is a valid replication slot name: 1 to 63 lower-case
/// letters, digits and underscores (PostgreSQL's rule).
pub(crate) fn is_valid_slot_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names() {
        assert!(is_valid_slot_name("walfill_archive_0a1b2c3d"));
        assert!(is_valid_slot_name(&"a".repeat(63)));
        assert!(!is_valid_slot_name(&"a".repeat(64)));
        assert!(!is_valid_slot_name(""));
        assert!(!is_valid_slot_name("Upper"));
        assert!(!is_valid_slot_name("with-dash"));
        assert!(!is_valid_slot_name("quote'"));
        assert_eq!(quote_literal("a'b"), "'a''b'");
    }
}
