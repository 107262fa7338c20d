//! The boundary: a logical slot created with an exported snapshot.
//!
//! `CREATE_REPLICATION_SLOT ... LOGICAL pgoutput EXPORT_SNAPSHOT` returns the
//! slot's *consistent point* and the name of a snapshot that sees exactly the
//! transactions that committed before it. Rows read in that snapshot are the
//! table as of the boundary; the slot streams every transaction that commits
//! from the boundary on. The snapshot stays importable only while the
//! replication connection that exported it stays idle, so [`Boundary`] owns
//! that connection until the copy is done and the stream starts on it.

use pg_walstream::{PgReplicationConnection, ReplicationSlotOptions, SlotType};
use walfill_core::Lsn;

use crate::error::{SlotProblem, SnapshotError};

/// Where replication connections go, and the settings each one's session
/// runs with (the values pgoutput prints depend on them). The settings are
/// set with `SET` once connected: a URL's `options` are not honoured by
/// every client library.
#[derive(Clone)]
pub struct ReplicationUrl {
    /// A `postgresql://` URL with `replication=database`.
    pub url: String,
    /// `(name, value)` pairs to `SET`.
    pub settings: Vec<(String, String)>,
}

impl std::fmt::Debug for ReplicationUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL holds the password.
        f.debug_struct("ReplicationUrl")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A replication connection to the source (`replication=database`).
pub struct ReplicationConnection {
    pub(crate) inner: PgReplicationConnection,
}

impl ReplicationConnection {
    /// Connects without retrying (a wrong password or address fails at
    /// once) and pins the session's settings.
    pub fn connect(target: &ReplicationUrl) -> Result<ReplicationConnection, SnapshotError> {
        let mut inner = PgReplicationConnection::connect(&target.url).map_err(|e| {
            SnapshotError::replication("connecting to the source for replication", e)
        })?;
        for (name, value) in &target.settings {
            inner
                .exec(&format!(
                    "SET {name} = {}",
                    crate::sql::quote_literal(value)
                ))
                .map_err(|e| {
                    SnapshotError::replication(
                        format!("setting {name} on the replication session"),
                        e,
                    )
                })?;
        }
        Ok(ReplicationConnection { inner })
    }

    /// `IDENTIFY_SYSTEM`: the cluster's system identifier and the server's
    /// current timeline.
    pub fn identify(&mut self) -> Result<(u64, u32), SnapshotError> {
        let result = self
            .inner
            .identify_system()
            .map_err(|e| SnapshotError::replication("identifying the source cluster", e))?;
        let field = |col: i32| result.get_value(0, col).unwrap_or_default();
        let system_id = field(0).parse().map_err(|_| {
            SnapshotError::Protocol(format!("IDENTIFY_SYSTEM returned system id {:?}", field(0)))
        })?;
        let timeline = field(1).parse().map_err(|_| {
            SnapshotError::Protocol(format!("IDENTIFY_SYSTEM returned timeline {:?}", field(1)))
        })?;
        Ok((system_id, timeline))
    }

    /// `TIMELINE_HISTORY timeline`: the content of that timeline's history
    /// file (the timelines before it and where each ended).
    pub fn timeline_history(&mut self, timeline: u32) -> Result<String, SnapshotError> {
        let result = self
            .inner
            .exec(&format!("TIMELINE_HISTORY {timeline}"))
            .map_err(|e| {
                SnapshotError::replication(format!("reading the history of timeline {timeline}"), e)
            })?;
        Ok(result.get_value(0, 1).unwrap_or_default())
    }

    /// Drops a replication slot; a missing slot is not an error.
    pub fn drop_slot(&mut self, slot: &str) -> Result<(), SnapshotError> {
        match self.inner.drop_replication_slot(slot, false) {
            Ok(()) => Ok(()),
            Err(e) if SlotProblem::of(&e) == Some(SlotProblem::Missing) => Ok(()),
            Err(e) => Err(SnapshotError::replication(
                format!("dropping replication slot {slot}"),
                e,
            )),
        }
    }
}

/// A freshly created slot with its exported snapshot.
pub struct Boundary {
    /// The slot's name.
    pub slot: String,
    /// The consistent point: rows in the snapshot are versioned at this LSN and
    /// the slot streams transactions committing from here on.
    pub lsn: Lsn,
    /// The exported snapshot, for `SET TRANSACTION SNAPSHOT` (empty when
    /// none was exported).
    pub snapshot: String,
    /// The connection that exported it; keep it idle while the snapshot is used.
    pub connection: ReplicationConnection,
}

impl Boundary {
    /// Creates slot `slot` (pgoutput) with an exported snapshot.
    ///
    /// A `temporary` slot is dropped by the server when the connection closes;
    /// walfill uses one to get a fresh snapshot when resuming a copy whose
    /// original snapshot is gone. This waits for transactions running on the
    /// source to finish, as PostgreSQL must before a slot is consistent.
    pub fn create(
        replication_url: &ReplicationUrl,
        slot: &str,
        temporary: bool,
    ) -> Result<Boundary, SnapshotError> {
        Boundary::create_with(replication_url, slot, temporary, true)
    }

    /// Creates slot `slot` (pgoutput) without exporting a snapshot, for a
    /// version whose rows come from elsewhere (archived WAL): no snapshot
    /// holds back the source's vacuum while the version is filled.
    pub fn create_without_snapshot(
        replication_url: &ReplicationUrl,
        slot: &str,
    ) -> Result<Boundary, SnapshotError> {
        Boundary::create_with(replication_url, slot, false, false)
    }

    fn create_with(
        replication_url: &ReplicationUrl,
        slot: &str,
        temporary: bool,
        export: bool,
    ) -> Result<Boundary, SnapshotError> {
        let mut connection = ReplicationConnection::connect(replication_url)?;
        let options = ReplicationSlotOptions {
            temporary,
            snapshot: Some(if export { "export" } else { "nothing" }.into()),
            ..Default::default()
        };
        let result = connection
            .inner
            .create_replication_slot_with_options(
                slot,
                SlotType::Logical,
                Some("pgoutput"),
                &options,
            )
            .map_err(|e| {
                SnapshotError::replication(format!("creating replication slot {slot}"), e)
            })?;
        let lsn_text = result.get_value(0, 1).unwrap_or_default();
        let lsn = lsn_text.parse().map_err(|_| {
            SnapshotError::Protocol(format!(
                "CREATE_REPLICATION_SLOT returned {lsn_text:?} as consistent point"
            ))
        })?;
        let snapshot = match result.get_value(0, 2) {
            Some(name) => name,
            None if !export => String::new(),
            None => {
                return Err(SnapshotError::Protocol(
                    "CREATE_REPLICATION_SLOT exported no snapshot".into(),
                ))
            }
        };
        Ok(Boundary {
            slot: slot.to_string(),
            lsn,
            snapshot,
            connection,
        })
    }
}
