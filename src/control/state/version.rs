//! One version of a target: its definition, phase and progress, as a row of
//! `walfill.versions`.

use std::fmt;
use std::str::FromStr;

use tokio_postgres::{GenericClient, Row};
use walfill_core::{Lsn, Version};
use walfill_snapshot::SourceTable;

use crate::config::QualifiedName;
use crate::error::{Error, Result};
use crate::pipeline::apply::StreamDesc;

/// How a version is filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// From a snapshot of the source table, copied in keyset chunks.
    Snapshot,
    /// From archived WAL, decoded outside the server.
    Replay,
}

impl Path {
    /// The text stored in the state table.
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Snapshot => "snapshot",
            Path::Replay => "replay",
        }
    }

    /// The phase in which a version is filled by this path.
    pub fn filling(self) -> Phase {
        match self {
            Path::Snapshot => Phase::Copying,
            Path::Replay => Phase::Replaying,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Path {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "snapshot" => Ok(Path::Snapshot),
            "replay" => Ok(Path::Replay),
            other => Err(format!("unknown path {other:?}")),
        }
    }
}

/// Where a version is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Recorded; its path is chosen (again) when the backfill runs.
    Planned,
    /// Being filled by copying a snapshot (path snapshot).
    Copying,
    /// Being filled by replaying archived WAL (path replay).
    Replaying,
    /// Filled up to its boundary; applying the live stream until caught up.
    CatchingUp,
    /// Caught up, not yet swapped in.
    Ready,
    /// Readers see it through the target's view.
    Active,
    /// Was active; kept up to date for rollback until retired.
    Previous,
    /// Its slot and table are gone.
    Retired,
}

impl Phase {
    /// The texts of `phases`, bound as a `text[]` parameter (`phase =
    /// ANY($n)`): SQL outside `state/` names no phase itself.
    pub fn names(phases: &[Phase]) -> Vec<&'static str> {
        phases.iter().map(|p| p.as_str()).collect()
    }

    /// The text stored in the state table.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planned => "planned",
            Phase::Copying => "copying",
            Phase::Replaying => "replaying",
            Phase::CatchingUp => "catching_up",
            Phase::Ready => "ready",
            Phase::Active => "active",
            Phase::Previous => "previous",
            Phase::Retired => "retired",
        }
    }

    /// The phases of a version being built: planned, filled or catching
    /// up, not complete yet.
    pub const BUILDING: [Phase; 4] = [
        Phase::Planned,
        Phase::Copying,
        Phase::Replaying,
        Phase::CatchingUp,
    ];

    /// Being built: planned, filled or caught up, not complete yet.
    pub fn is_building(self) -> bool {
        Phase::BUILDING.contains(&self)
    }

    /// Whether the version is complete and follows the live stream.
    pub fn is_live(self) -> bool {
        matches!(self, Phase::Ready | Phase::Active | Phase::Previous)
    }

    /// The path a filling phase implies.
    pub fn filling_path(self) -> Option<Path> {
        match self {
            Phase::Copying => Some(Path::Snapshot),
            Phase::Replaying => Some(Path::Replay),
            _ => None,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A version's phase as reports show it: a recorded phase, or `unbuilt` for
/// a configured version no backfill has started (which has no row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Configured; no backfill has started it.
    Unbuilt,
    /// Recorded in the state table.
    Recorded(Phase),
}

impl Stage {
    /// The recorded phase, if any.
    pub fn phase(self) -> Option<Phase> {
        match self {
            Stage::Unbuilt => None,
            Stage::Recorded(phase) => Some(phase),
        }
    }

    /// As reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Unbuilt => "unbuilt",
            Stage::Recorded(phase) => phase.as_str(),
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl serde::Serialize for Stage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "planned" => Phase::Planned,
            "copying" => Phase::Copying,
            "replaying" => Phase::Replaying,
            "catching_up" => Phase::CatchingUp,
            "ready" => Phase::Ready,
            "active" => Phase::Active,
            "previous" => Phase::Previous,
            "retired" => Phase::Retired,
            other => return Err(format!("unknown phase {other:?}")),
        })
    }
}

/// A row of `walfill.versions`.
#[derive(Clone, Debug)]
pub struct VersionState {
    /// Target name.
    pub target: String,
    /// Version name.
    pub version: String,
    /// Destination schema.
    pub dest_schema: String,
    /// Staging table name (in `dest_schema`).
    pub table_name: String,
    /// The source table's OID: its identity (`None` only for a version an
    /// older walfill recorded by name).
    pub source_relid: Option<u32>,
    /// The source table's name when the version was created (for people).
    pub source_name: QualifiedName,
    /// The source table as the version was planned.
    pub source_desc: Option<SourceTable>,
    /// The columns the live stream sends, as of `applied_lsn`.
    pub stream_desc: Option<StreamDesc>,
    /// The transform's select list, as recorded when the version was created.
    pub select_sql: String,
    /// The transform's filter, as recorded.
    pub filter_sql: Option<String>,
    /// Key columns.
    pub key_columns: Vec<String>,
    /// Phase.
    pub phase: Phase,
    /// How the version is (being) built.
    pub path: Path,
    /// Why that path (the planner's reason).
    pub path_reason: Option<String>,
    /// Where the replay starts (JSON), for a replayed version.
    pub replay_base: Option<serde_json::Value>,
    /// Where decoding starts: the replay's start, or (for a snapshot
    /// version) the slot's restart LSN, kept in the base snapshot.
    pub restart_lsn: Option<Lsn>,
    /// Commit LSN of the last replayed transaction stored.
    pub replayed_lsn: Option<Lsn>,
    /// How far the replay has read the archived WAL.
    pub replay_read_lsn: Option<Lsn>,
    /// The last key a replay's load of its merged rows has stored.
    pub load_cursor: Option<Vec<String>>,
    /// The version's logical slot.
    pub slot_name: String,
    /// The slot's consistent point.
    pub boundary_lsn: Option<Lsn>,
    /// The snapshot the copy currently reads.
    pub copy_boundary_lsn: Option<Lsn>,
    /// Key of the last row copied.
    pub copy_cursor: Option<Vec<String>>,
    /// Rows copied so far.
    pub rows_copied: i64,
    /// The planner's estimate of the table's rows.
    pub rows_estimated: i64,
    /// Recent copy rate, rows per second.
    pub copy_rate: f64,
    /// End of the last applied source transaction.
    pub applied_lsn: Option<Lsn>,
    /// Changes applied so far.
    pub changes_applied: i64,
    /// Version of the last TRUNCATE applied.
    pub truncated: Option<Version>,
    /// Last error, if the last run failed.
    pub last_error: Option<String>,
    /// Why the version lost changes for good, if it did.
    pub lost: Option<String>,
    /// The meaning of its transform it was built under (`crate::pipeline::version_sql::MEANING`).
    pub meaning: i16,
    /// The archived segments a replay read to fill it.
    pub segments_read: Option<i64>,
    /// The bytes of WAL it decoded.
    pub wal_read_bytes: Option<i64>,
    /// The version's earlier table, which readers still see while it is
    /// rebuilt beside it.
    pub replaced_table: Option<String>,
    /// The fencing token this process holds (after [`VersionState::take_lease`]).
    pub lease: i64,
    /// When the version was created, as text.
    pub created_at: String,
    /// When it was last swapped in, as text.
    pub swapped_at: Option<String>,
    /// When its state last changed, as text.
    pub updated_at: String,
}

const COLUMNS: &str = "target, version, dest_schema, table_name, source_table, select_sql,
    filter_sql, key_columns, phase, slot_name, boundary_lsn, copy_boundary_lsn,
    copy_cursor, rows_copied, rows_estimated, copy_rate, applied_lsn, changes_applied,
    truncated_lsn, truncated_seq, last_error, created_at::text, swapped_at::text,
    updated_at::text, path, path_reason, replay_base, restart_lsn, replayed_lsn,
    source_relid, source_schema, source_name, source_desc, stream_desc, lease, lost,
    replaced_table, replay_read_lsn, load_cursor, coalesce(meaning, 1)::smallint,
    segments_read, wal_read_bytes";

impl VersionState {
    fn from_row(row: &Row) -> Result<VersionState> {
        let bad = |what: &str, e: String| {
            Error::Internal(format!("walfill.versions holds an unreadable {what}: {e}"))
        };
        let phase: Phase = row
            .get::<_, String>(8)
            .parse()
            .map_err(|e| bad("phase", e))?;
        // The phase of a version being filled says its path; the column
        // only matters for the others.
        let path = match phase.filling_path() {
            Some(path) => path,
            None => row
                .get::<_, String>(24)
                .parse()
                .map_err(|e| bad("path", e))?,
        };
        let truncated = row.get::<_, Option<Lsn>>(18).map(|commit_lsn| Version {
            commit_lsn,
            seq: row.get::<_, Option<i32>>(19).unwrap_or(0) as u32,
        });
        let recorded: String = row.get(4);
        let source_name = match (row.get(30), row.get(31)) {
            (Some(schema), Some(name)) => QualifiedName { schema, name },
            // Recorded by an older walfill as "schema.name".
            _ => crate::config::parse_qualified(&recorded).unwrap_or(QualifiedName {
                schema: "public".into(),
                name: recorded.clone(),
            }),
        };
        let json = |i: usize| row.get::<_, Option<serde_json::Value>>(i);
        Ok(VersionState {
            target: row.get(0),
            version: row.get(1),
            dest_schema: row.get(2),
            table_name: row.get(3),
            source_relid: row.get(29),
            source_name,
            source_desc: json(32)
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| bad("source description", e.to_string()))?,
            stream_desc: json(33)
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| bad("stream description", e.to_string()))?,
            select_sql: row.get(5),
            filter_sql: row.get(6),
            key_columns: row.get(7),
            phase,
            path,
            slot_name: row.get(9),
            boundary_lsn: row.get(10),
            copy_boundary_lsn: row.get(11),
            copy_cursor: row.get(12),
            rows_copied: row.get(13),
            rows_estimated: row.get(14),
            copy_rate: row.get(15),
            applied_lsn: row.get(16),
            changes_applied: row.get(17),
            truncated,
            last_error: row.get(20),
            created_at: row.get(21),
            swapped_at: row.get(22),
            updated_at: row.get(23),
            path_reason: row.get(25),
            replay_base: row.get(26),
            restart_lsn: row.get(27),
            replayed_lsn: row.get(28),
            lease: row.get(34),
            lost: row.get(35),
            replaced_table: row.get(36),
            replay_read_lsn: row.get(37),
            load_cursor: row.get(38),
            meaning: row.get(39),
            segments_read: row.get(40),
            wal_read_bytes: row.get(41),
        })
    }

    /// Reads one version, which must exist.
    pub async fn load_existing(
        client: &impl GenericClient,
        target: &str,
        version: &str,
    ) -> Result<VersionState> {
        VersionState::load(client, target, version)
            .await?
            .ok_or_else(|| {
                Error::refused_no_fix(format!("target {target} has no version {version}"))
            })
    }

    /// The version's plan, from its recorded definition and source
    /// description (this also prepares `dest`'s work table).
    pub async fn plan(
        &self,
        dest: &tokio_postgres::Client,
    ) -> Result<crate::pipeline::version_sql::Plan> {
        let table = self
            .source_desc
            .clone()
            .ok_or_else(|| Error::Internal("the version has no source description".into()))?;
        crate::pipeline::version_sql::build(dest, &self.definition(), table).await
    }

    /// Reads one version.
    pub async fn load(
        client: &impl GenericClient,
        target: &str,
        version: &str,
    ) -> Result<Option<VersionState>> {
        let sql =
            format!("SELECT {COLUMNS} FROM walfill.versions WHERE target = $1 AND version = $2");
        client
            .query_opt(&sql, &[&target, &version])
            .await
            .map_err(|e| Error::destination("reading the version's state", e))?
            .map(|r| VersionState::from_row(&r))
            .transpose()
    }

    /// Reads every version, oldest first.
    pub async fn list(client: &impl GenericClient) -> Result<Vec<VersionState>> {
        let sql = format!("SELECT {COLUMNS} FROM walfill.versions ORDER BY target, created_at");
        client
            .query(&sql, &[])
            .await
            .map_err(|e| Error::destination("reading versions", e))?
            .iter()
            .map(VersionState::from_row)
            .collect()
    }

    /// `"schema"."table"` of the version's table.
    pub fn staging_table(&self) -> String {
        walfill_core::sql::quote_qualified(&self.dest_schema, &self.table_name)
    }

    /// The definition the version was created with.
    pub fn definition(&self) -> crate::pipeline::version_sql::Definition {
        crate::pipeline::version_sql::Definition {
            target: self.target.clone(),
            version: self.version.clone(),
            dest_schema: self.dest_schema.clone(),
            source: self.source_name.clone(),
            key: Some(self.key_columns.clone()),
            select: self.select_sql.clone(),
            filter: self.filter_sql.clone(),
            table: self.table_name.clone(),
        }
    }

    /// `target/version`, for messages.
    pub fn label(&self) -> String {
        format!("{}/{}", self.target, self.version)
    }

    /// Waits until `target`'s `version` has applied its stream up to `lsn`
    /// (followed by `walfill serve` or `walfill sync`, maybe in another
    /// process), for at most `wait`; `needed_for` names the command that
    /// waits, for the error.
    pub async fn wait_applied(
        dest: &impl GenericClient,
        target: &str,
        version: &str,
        lsn: Lsn,
        wait: std::time::Duration,
        needed_for: &str,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        loop {
            let applied = VersionState::load(dest, target, version)
                .await?
                .and_then(|v| v.applied_lsn);
            if applied.is_some_and(|a| a >= lsn) {
                return Ok(());
            }
            if started.elapsed() > wait {
                return Err(Error::refused(
                    format!(
                        "version {version} of {target} has applied the stream up to {} and \
                         {needed_for} needs {lsn}",
                        applied
                            .map(|a| a.to_string())
                            .unwrap_or_else(|| "nothing".into())
                    ),
                    format!(
                        "keep it followed (`walfill serve` or `walfill sync`) while {needed_for} \
                         runs"
                    ),
                ));
            }
            tokio::select! {
                _ = cancel.cancelled() => return Err(Error::Interrupted),
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
            }
        }
    }
}

/// What [`VersionState::create`] records.
pub struct NewVersion<'a> {
    /// Target name.
    pub target: &'a str,
    /// Version name.
    pub version: &'a str,
    /// Destination schema.
    pub dest_schema: &'a str,
    /// Staging table name.
    pub table_name: &'a str,
    /// The source table as planned.
    pub source: &'a SourceTable,
    /// Select list.
    pub select_sql: &'a str,
    /// Filter.
    pub filter_sql: Option<&'a str>,
    /// Key columns.
    pub key_columns: &'a [String],
    /// Slot name.
    pub slot_name: &'a str,
}

/// The TRUNCATE watermark of a version that its stream writes while
/// another job (a scoped refresh, a dead-letter retry) writes it too: read
/// again in the transaction of each of the job's batches, so a TRUNCATE
/// the stream applied meanwhile removes the batch's older rows at once.
/// It is the stream's to record, never the job's.
#[derive(Debug)]
pub(super) struct SharedWatermark {
    target: String,
    version: String,
    /// As of the batch being stored.
    pub(super) truncated: Option<walfill_core::Version>,
}

impl SharedWatermark {
    /// The watermark of `version` of `target`, not read yet.
    pub(super) fn new(target: &str, version: &str) -> SharedWatermark {
        SharedWatermark {
            target: target.into(),
            version: version.into(),
            truncated: None,
        }
    }

    /// Reads it in `tx`, the transaction a batch is about to be stored in.
    pub(super) async fn reread(&mut self, tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
        self.truncated = VersionState::load(tx, &self.target, &self.version)
            .await?
            .and_then(|now| now.truncated);
        Ok(())
    }
}
