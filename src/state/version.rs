//! One version of a target: its definition, phase and progress.

use std::fmt;
use std::str::FromStr;

use tokio_postgres::{GenericClient, Row};
use walfill_replay::{Lsn, Version};

use crate::error::{Error, Result};

/// Where a version is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Recorded; no slot or snapshot yet.
    Planned,
    /// Copying the snapshot into the staging table.
    Copying,
    /// Replaying archived WAL into the staging table.
    Replaying,
    /// Applying the live stream until caught up.
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

    /// Whether the version has a complete copy and follows the live stream.
    pub fn is_live(self) -> bool {
        matches!(self, Phase::Ready | Phase::Active | Phase::Previous)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    /// `schema.table` of the source.
    pub source_table: String,
    /// The transform's select list, as recorded when the version was created.
    pub select_sql: String,
    /// The transform's filter, as recorded.
    pub filter_sql: Option<String>,
    /// Key columns.
    pub key_columns: Vec<String>,
    /// Phase.
    pub phase: Phase,
    /// How the version is built: `snapshot` or `replay`.
    pub path: String,
    /// Why that path (the planner's reason).
    pub path_reason: Option<String>,
    /// Where the replay starts (JSON), for a replayed version.
    pub replay_base: Option<serde_json::Value>,
    /// Where decoding starts: the replay's start, or (for a snapshot
    /// version) the slot's restart LSN, kept in the base snapshot.
    pub restart_lsn: Option<Lsn>,
    /// Commit LSN of the last replayed transaction stored.
    pub replayed_lsn: Option<Lsn>,
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
    /// Changes applied from the stream.
    pub changes_applied: i64,
    /// Version of the last TRUNCATE applied.
    pub truncated: Option<Version>,
    /// Last error, if the last run failed.
    pub last_error: Option<String>,
    /// When the version was created, as text.
    pub created_at: String,
    /// When it was last swapped in, as text.
    pub swapped_at: Option<String>,
    /// When its state last changed, as text.
    pub updated_at: String,
}

const COLUMNS: &str = "target, version, dest_schema, table_name, source_table, select_sql,
    filter_sql, key_columns, phase, slot_name, boundary_lsn::text, copy_boundary_lsn::text,
    copy_cursor, rows_copied, rows_estimated, copy_rate, applied_lsn::text, changes_applied,
    truncated_lsn::text, truncated_seq, last_error, created_at::text, swapped_at::text,
    updated_at::text, path, path_reason, replay_base, restart_lsn::text, replayed_lsn::text";

fn lsn(row: &Row, i: usize) -> Option<Lsn> {
    row.get::<_, Option<String>>(i).and_then(|t| t.parse().ok())
}

impl VersionState {
    fn from_row(row: &Row) -> Result<VersionState> {
        let phase: String = row.get(8);
        let truncated = lsn(row, 18).map(|commit_lsn| Version {
            commit_lsn,
            seq: row.get::<_, Option<i32>>(19).unwrap_or(0) as u32,
        });
        Ok(VersionState {
            target: row.get(0),
            version: row.get(1),
            dest_schema: row.get(2),
            table_name: row.get(3),
            source_table: row.get(4),
            select_sql: row.get(5),
            filter_sql: row.get(6),
            key_columns: row.get(7),
            phase: phase.parse().map_err(Error::State)?,
            slot_name: row.get(9),
            boundary_lsn: lsn(row, 10),
            copy_boundary_lsn: lsn(row, 11),
            copy_cursor: row.get(12),
            rows_copied: row.get(13),
            rows_estimated: row.get(14),
            copy_rate: row.get(15),
            applied_lsn: lsn(row, 16),
            changes_applied: row.get(17),
            truncated,
            last_error: row.get(20),
            created_at: row.get(21),
            swapped_at: row.get(22),
            updated_at: row.get(23),
            path: row.get(24),
            path_reason: row.get(25),
            replay_base: row.get(26),
            restart_lsn: lsn(row, 27),
            replayed_lsn: lsn(row, 28),
        })
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

    /// Records a new version in phase `planned`.
    pub async fn create(client: &impl GenericClient, v: &NewVersion<'_>) -> Result<()> {
        client
            .execute(
                "INSERT INTO walfill.versions (target, version, dest_schema, table_name,
                    source_table, select_sql, filter_sql, key_columns, phase, slot_name,
                    rows_estimated)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'planned', $9, $10)",
                &[
                    &v.target,
                    &v.version,
                    &v.dest_schema,
                    &v.table_name,
                    &v.source_table,
                    &v.select_sql,
                    &v.filter_sql,
                    &v.key_columns,
                    &v.slot_name,
                    &v.rows_estimated,
                ],
            )
            .await
            .map_err(|e| Error::destination("recording the new version", e))?;
        Ok(())
    }

    /// Moves the version to `phase`.
    pub async fn set_phase(&mut self, client: &impl GenericClient, phase: Phase) -> Result<()> {
        let stamp = match phase {
            Phase::CatchingUp => ", copy_finished_at = now()",
            Phase::Ready => ", caught_up_at = now()",
            _ => "",
        };
        let sql = format!(
            "UPDATE walfill.versions SET phase = $3, updated_at = now(){stamp}
              WHERE target = $1 AND version = $2"
        );
        self.execute(client, &sql, phase.as_str(), "changing the version's phase")
            .await?;
        self.phase = phase;
        Ok(())
    }

    /// Records in the event log that `slot` was created with its consistent
    /// point at `boundary`.
    pub async fn record_boundary_event(
        &self,
        client: &impl GenericClient,
        slot: &str,
        boundary: Lsn,
    ) -> Result<()> {
        super::record_event(
            client,
            &self.target,
            Some(&self.version),
            "boundary",
            serde_json::json!({ "slot": slot, "lsn": boundary.to_string() }),
        )
        .await
    }

    /// Records the slot's consistent point as the boundary and as the
    /// snapshot the copy reads; the copy (re)starts from the beginning.
    pub async fn set_boundary(&mut self, client: &impl GenericClient, boundary: Lsn) -> Result<()> {
        client
            .execute(
                "UPDATE walfill.versions
                    SET phase = 'copying', boundary_lsn = $3::text::pg_lsn,
                        copy_boundary_lsn = $3::text::pg_lsn, applied_lsn = $3::text::pg_lsn,
                        copy_cursor = NULL, rows_copied = 0, copy_started_at = now(),
                        updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&self.target, &self.version, &boundary.to_string()],
            )
            .await
            .map_err(|e| Error::destination("recording the boundary", e))?;
        self.phase = Phase::Copying;
        self.boundary_lsn = Some(boundary);
        self.copy_boundary_lsn = Some(boundary);
        self.applied_lsn = Some(boundary);
        self.copy_cursor = None;
        self.rows_copied = 0;
        Ok(())
    }

    /// Records a new snapshot for the rest of the copy (after a resume).
    pub async fn set_copy_boundary(
        &mut self,
        client: &impl GenericClient,
        copy_boundary: Lsn,
    ) -> Result<()> {
        self.execute(
            client,
            "UPDATE walfill.versions SET copy_boundary_lsn = $3::text::pg_lsn, updated_at = now()
              WHERE target = $1 AND version = $2",
            &copy_boundary.to_string(),
            "recording the resumed copy's snapshot",
        )
        .await?;
        self.copy_boundary_lsn = Some(copy_boundary);
        Ok(())
    }

    /// Records a copied chunk: call inside the chunk's transaction.
    pub async fn record_chunk(
        &mut self,
        client: &impl GenericClient,
        cursor: &[String],
        rows: i64,
        rate: f64,
    ) -> Result<()> {
        client
            .execute(
                "UPDATE walfill.versions
                    SET copy_cursor = $3, rows_copied = rows_copied + $4, copy_rate = $5,
                        updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&self.target, &self.version, &cursor, &rows, &rate],
            )
            .await
            .map_err(|e| Error::destination("recording the copy cursor", e))?;
        self.copy_cursor = Some(cursor.to_vec());
        self.rows_copied += rows;
        self.copy_rate = rate;
        Ok(())
    }

    /// Records applied stream changes: call inside the batch's transaction.
    pub async fn record_applied(
        &mut self,
        client: &impl GenericClient,
        applied: Lsn,
        changes: i64,
        truncated: Option<Version>,
    ) -> Result<()> {
        self.record_position(client, "applied_lsn", Some(applied), changes, truncated)
            .await
            .map_err(|e| Error::destination("recording the applied position", e))?;
        self.applied_lsn = Some(applied);
        Ok(())
    }

    /// Stores `position` in `column` (`applied_lsn` or `replayed_lsn`), adds
    /// `changes` and moves the TRUNCATE watermark to `truncated` if given.
    pub(super) async fn record_position(
        &mut self,
        client: &impl GenericClient,
        column: &str,
        position: Option<Lsn>,
        changes: i64,
        truncated: Option<Version>,
    ) -> std::result::Result<(), tokio_postgres::Error> {
        let truncated = truncated.or(self.truncated);
        client
            .execute(
                &format!(
                    "UPDATE walfill.versions
                        SET {column} = $3::text::pg_lsn, changes_applied = changes_applied + $4,
                            truncated_lsn = $5::text::pg_lsn, truncated_seq = $6,
                            last_error = NULL, updated_at = now()
                      WHERE target = $1 AND version = $2"
                ),
                &[
                    &self.target,
                    &self.version,
                    &position.map(|l| l.to_string()),
                    &changes,
                    &truncated.map(|t| t.commit_lsn.to_string()),
                    &truncated.map(|t| t.seq as i32),
                ],
            )
            .await?;
        self.changes_applied += changes;
        self.truncated = truncated;
        Ok(())
    }

    /// Records the error that stopped the last run (best effort).
    pub async fn record_error(
        client: &impl GenericClient,
        target: &str,
        version: &str,
        error: &str,
    ) {
        let result = client
            .execute(
                "UPDATE walfill.versions SET last_error = $3, updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&target, &version, &error],
            )
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not record the error in walfill.versions");
        }
    }

    pub(super) async fn execute(
        &self,
        client: &impl GenericClient,
        sql: &str,
        value: &str,
        context: &str,
    ) -> Result<()> {
        client
            .execute(sql, &[&self.target, &self.version, &value])
            .await
            .map_err(|e| Error::destination(context, e))?;
        Ok(())
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
    /// Source `schema.table`.
    pub source_table: &'a str,
    /// Select list.
    pub select_sql: &'a str,
    /// Filter.
    pub filter_sql: Option<&'a str>,
    /// Key columns.
    pub key_columns: &'a [String],
    /// Slot name.
    pub slot_name: &'a str,
    /// Row estimate.
    pub rows_estimated: i64,
}
