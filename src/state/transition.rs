//! Every change of a version's phase, each one destination transaction
//! (with its event record), so a crash leaves the version either before or
//! after it, and every state it can be left in has a way forward.

use tokio_postgres::{Client, GenericClient, Transaction};
use walfill_core::{Lsn, Version};

use super::version::{NewVersion, Path, Phase, VersionState};
use crate::apply::{Cursor, StreamDesc};
use crate::error::{Error, Result};

/// How a version's fill starts.
#[derive(Clone, Debug)]
pub enum FillStart {
    /// A snapshot copy of the table consistent at the slot's boundary.
    Copy {
        /// The slot's consistent point.
        boundary: Lsn,
        /// The columns the stream sends from the boundary on.
        stream: StreamDesc,
    },
    /// A replay of archived WAL from `restart` up to the slot's boundary.
    Replay {
        /// The slot's consistent point.
        boundary: Lsn,
        /// Where decoding starts.
        restart: Lsn,
    },
}

async fn begin<'a>(client: &'a mut Client, what: &str) -> Result<Transaction<'a>> {
    client
        .transaction()
        .await
        .map_err(|e| Error::destination(format!("starting to record {what}"), e))
}

async fn commit(tx: Transaction<'_>, what: &str) -> Result<()> {
    tx.commit()
        .await
        .map_err(|e| Error::destination(format!("recording {what}"), e))
}

impl VersionState {
    /// Records a new version in phase `planned` and returns it.
    pub async fn create(client: &mut Client, v: &NewVersion<'_>) -> Result<VersionState> {
        let desc = serde_json::to_value(v.source)
            .map_err(|e| Error::Internal(format!("describing the source table: {e}")))?;
        let tx = begin(client, "the new version").await?;
        tx.execute(
            "INSERT INTO walfill.versions (target, version, dest_schema, table_name,
                source_table, select_sql, filter_sql, key_columns, phase, slot_name,
                rows_estimated, source_relid, source_schema, source_name, source_desc)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'planned', $9, $10, $11, $12, $13, $14)",
            &[
                &v.target,
                &v.version,
                &v.dest_schema,
                &v.table_name,
                &format!("{}.{}", v.source.schema, v.source.name),
                &v.select_sql,
                &v.filter_sql,
                &v.key_columns,
                &v.slot_name,
                &v.source.estimated_rows.max(0),
                &v.source.oid,
                &v.source.schema,
                &v.source.name,
                &desc,
            ],
        )
        .await
        .map_err(|e| Error::destination("recording the new version", e))?;
        super::record_event(
            &tx,
            v.target,
            Some(v.version),
            "created",
            serde_json::json!({}),
        )
        .await?;
        commit(tx, "the new version").await?;
        VersionState::load(&*client, v.target, v.version)
            .await?
            .ok_or_else(|| Error::Internal("the new version vanished from walfill.versions".into()))
    }

    /// Records the description of the source table an older walfill did not
    /// record (its OID and columns, looked up by name once).
    pub async fn adopt_description(
        &mut self,
        client: &impl GenericClient,
        source: &walfill_snapshot::SourceTable,
    ) -> Result<()> {
        let desc = serde_json::to_value(source)
            .map_err(|e| Error::Internal(format!("describing the source table: {e}")))?;
        self.update(
            client,
            "source_relid = $3, source_schema = $4, source_name = $5, source_desc = $6",
            &[&source.oid, &source.schema, &source.name, &desc],
            "recording the source table's description",
        )
        .await?;
        self.source_relid = Some(source.oid);
        self.source_desc = Some(source.clone());
        Ok(())
    }

    /// Takes the version over: raises its fencing token. Every later store
    /// into the version checks the token, so the writes of a process that
    /// held the version before (and may still run) fail.
    pub async fn take_lease(&mut self, client: &impl GenericClient) -> Result<()> {
        let row = client
            .query_one(
                "UPDATE walfill.versions SET lease = lease + 1
                  WHERE target = $1 AND version = $2 RETURNING lease",
                &[&self.target, &self.version],
            )
            .await
            .map_err(|e| Error::destination("taking the version's lease", e))?;
        self.lease = row.get(0);
        Ok(())
    }

    /// Records the path chosen for a planned version, and why.
    pub async fn choose_path(
        &mut self,
        client: &mut Client,
        path: Path,
        reason: &str,
        replay_base: Option<serde_json::Value>,
    ) -> Result<()> {
        let tx = begin(client, "the version's path").await?;
        self.update(
            &tx,
            "path = $3, path_reason = $4, replay_base = $5, phase = 'planned'",
            &[&path.as_str(), &reason, &replay_base],
            "recording the version's path",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "path",
            serde_json::json!({ "path": path.as_str(), "reason": reason }),
        )
        .await?;
        commit(tx, "the version's path").await?;
        self.phase = Phase::Planned;
        self.path = path;
        self.path_reason = Some(reason.to_string());
        self.replay_base = replay_base;
        Ok(())
    }

    /// Starts filling: empties the version's table and records the slot's
    /// boundary (where the stream will take over), in one transaction.
    pub async fn start_fill(&mut self, client: &mut Client, start: FillStart) -> Result<()> {
        let (path, boundary, restart, stream) = match start {
            FillStart::Copy { boundary, stream } => (Path::Snapshot, boundary, None, Some(stream)),
            FillStart::Replay { boundary, restart } => {
                (Path::Replay, boundary, Some(restart), None)
            }
        };
        let stream_json = stream
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Error::Internal(format!("describing the stream: {e}")))?;
        let phase = path.filling();
        let tx = begin(client, "the version's boundary").await?;
        tx.batch_execute(&format!("TRUNCATE {}", self.staging_table()))
            .await
            .map_err(|e| Error::destination("emptying the version's table", e))?;
        self.update(
            &tx,
            "phase = $3, path = $4, boundary_lsn = $5, copy_boundary_lsn = $5, applied_lsn = $5,
             restart_lsn = coalesce($6, restart_lsn), copy_cursor = NULL, rows_copied = 0,
             replayed_lsn = NULL, changes_applied = 0, truncated_lsn = NULL,
             truncated_seq = NULL, stream_desc = $7, lost = NULL, copy_started_at = now()",
            &[
                &phase.as_str(),
                &path.as_str(),
                &boundary,
                &restart,
                &stream_json,
            ],
            "recording the version's boundary",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "boundary",
            serde_json::json!({ "slot": self.slot_name, "lsn": boundary.to_string(), "path": path.as_str() }),
        )
        .await?;
        commit(tx, "the version's boundary").await?;
        self.phase = phase;
        self.path = path;
        self.boundary_lsn = Some(boundary);
        self.copy_boundary_lsn = Some(boundary);
        self.applied_lsn = Some(boundary);
        self.restart_lsn = restart.or(self.restart_lsn);
        self.copy_cursor = None;
        self.rows_copied = 0;
        self.replayed_lsn = None;
        self.changes_applied = 0;
        self.truncated = None;
        self.stream_desc = stream;
        self.lost = None;
        Ok(())
    }

    /// Records a new snapshot for the rest of an interrupted copy.
    pub async fn resume_copy(&mut self, client: &mut Client, copy_boundary: Lsn) -> Result<()> {
        let tx = begin(client, "the resumed copy").await?;
        self.update(
            &tx,
            "copy_boundary_lsn = $3",
            &[&copy_boundary],
            "recording the resumed copy's snapshot",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "copy_resumed",
            serde_json::json!({ "after": self.copy_cursor, "snapshot_lsn": copy_boundary.to_string() }),
        )
        .await?;
        commit(tx, "the resumed copy").await?;
        self.copy_boundary_lsn = Some(copy_boundary);
        Ok(())
    }

    /// Gives up replaying: the version goes back to planned, to be built
    /// from a snapshot, for `reason`. One transaction.
    pub async fn fall_back(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        let why = format!("replay abandoned: {reason}");
        let tx = begin(client, "the fallback to a snapshot").await?;
        self.update(
            &tx,
            "phase = 'planned', path = 'snapshot', path_reason = $3, replay_base = NULL,
             copy_cursor = NULL, rows_copied = 0, replayed_lsn = NULL, changes_applied = 0,
             truncated_lsn = NULL, truncated_seq = NULL",
            &[&why],
            "recording the fallback to a snapshot",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "replay_abandoned",
            serde_json::json!({ "reason": reason }),
        )
        .await?;
        commit(tx, "the fallback to a snapshot").await?;
        self.phase = Phase::Planned;
        self.path = Path::Snapshot;
        self.path_reason = Some(why);
        self.replay_base = None;
        self.copy_cursor = None;
        self.rows_copied = 0;
        self.replayed_lsn = None;
        self.changes_applied = 0;
        self.truncated = None;
        Ok(())
    }

    /// The version is filled up to its boundary: it catches up with the
    /// stream from there, whose columns `stream` describes (when the fill
    /// did not record them when it started).
    pub async fn finish_fill(
        &mut self,
        client: &mut Client,
        stream: Option<&StreamDesc>,
    ) -> Result<()> {
        let desc = stream
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Error::Internal(format!("describing the stream: {e}")))?;
        let tx = begin(client, "the end of the fill").await?;
        self.update(
            &tx,
            "phase = 'catching_up', stream_desc = coalesce($3, stream_desc),
             copy_finished_at = now()",
            &[&desc],
            "recording the end of the fill",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "filled",
            serde_json::json!({ "path": self.path.as_str(), "rows": self.rows_copied, "changes": self.changes_applied }),
        )
        .await?;
        commit(tx, "the end of the fill").await?;
        self.phase = Phase::CatchingUp;
        if let Some(stream) = stream {
            self.stream_desc = Some(stream.clone());
        }
        Ok(())
    }

    /// The version has caught up with the source.
    pub async fn caught_up(&mut self, client: &impl GenericClient) -> Result<()> {
        self.update(
            client,
            "phase = 'ready', caught_up_at = now()",
            &[],
            "recording that the version caught up",
        )
        .await?;
        self.phase = Phase::Ready;
        Ok(())
    }

    /// Starts the version over (its slot was lost): back to planned, its
    /// table emptied, in one transaction.
    pub async fn rebuild(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        let tx = begin(client, "the rebuild").await?;
        tx.batch_execute(&format!("TRUNCATE {}", self.staging_table()))
            .await
            .map_err(|e| Error::destination("emptying the version's table", e))?;
        self.update(
            &tx,
            "phase = 'planned', lost = NULL, boundary_lsn = NULL, copy_boundary_lsn = NULL,
             applied_lsn = NULL, copy_cursor = NULL, rows_copied = 0, replayed_lsn = NULL,
             changes_applied = 0, truncated_lsn = NULL, truncated_seq = NULL,
             stream_desc = NULL",
            &[],
            "recording the rebuild",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "rebuild",
            serde_json::json!({ "reason": reason }),
        )
        .await?;
        commit(tx, "the rebuild").await?;
        self.phase = Phase::Planned;
        self.lost = None;
        self.boundary_lsn = None;
        self.copy_boundary_lsn = None;
        self.applied_lsn = None;
        self.copy_cursor = None;
        self.rows_copied = 0;
        self.replayed_lsn = None;
        self.changes_applied = 0;
        self.truncated = None;
        self.stream_desc = None;
        Ok(())
    }

    /// Starts an active version over beside the table readers see (it lost
    /// changes): a new table, back to planned, in one transaction. The swap
    /// that publishes the new table drops the old one.
    pub async fn rebuild_aside(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        let base = format!("{}__{}", self.target, self.version);
        let mut table = format!("{base}__r{}", self.lease);
        if table.len() > 63 {
            table = format!(
                "walfill_{:016x}_r{}",
                crate::plan::fnv1a(base.as_bytes()),
                self.lease
            );
        }
        let old = self.table_name.clone();
        let tx = begin(client, "the rebuild").await?;
        self.update(
            &tx,
            "phase = 'planned', lost = NULL, table_name = $3,
             replaced_table = coalesce(replaced_table, $4), boundary_lsn = NULL,
             copy_boundary_lsn = NULL, applied_lsn = NULL, copy_cursor = NULL, rows_copied = 0,
             replayed_lsn = NULL, changes_applied = 0, truncated_lsn = NULL,
             truncated_seq = NULL, stream_desc = NULL, path_reason = NULL",
            &[&table, &old],
            "recording the rebuild",
        )
        .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "rebuild",
            serde_json::json!({ "reason": reason, "table": table, "readers_keep": old }),
        )
        .await?;
        commit(tx, "the rebuild").await?;
        self.replaced_table = self.replaced_table.clone().or(Some(old));
        self.table_name = table;
        self.phase = Phase::Planned;
        self.lost = None;
        self.boundary_lsn = None;
        self.copy_boundary_lsn = None;
        self.applied_lsn = None;
        self.copy_cursor = None;
        self.rows_copied = 0;
        self.replayed_lsn = None;
        self.changes_applied = 0;
        self.truncated = None;
        self.stream_desc = None;
        self.path_reason = None;
        Ok(())
    }

    /// Records that the version lost changes for good (its slot is gone):
    /// it cannot be published until rebuilt.
    pub async fn mark_lost(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        let tx = begin(client, "the lost version").await?;
        self.update(&tx, "lost = $3", &[&reason], "recording the lost version")
            .await?;
        super::record_event(
            &tx,
            &self.target,
            Some(&self.version),
            "lost",
            serde_json::json!({ "reason": reason }),
        )
        .await?;
        commit(tx, "the lost version").await?;
        self.lost = Some(reason.to_string());
        Ok(())
    }

    /// Records a stored batch's cursor inside the batch's transaction, with
    /// the changes it carried and the newest TRUNCATE stored. Fails when
    /// another process took the version over since this one did.
    pub async fn record_batch(
        &mut self,
        tx: &Transaction<'_>,
        cursor: &Cursor,
        changes: i64,
        truncated: Option<Version>,
    ) -> Result<()> {
        let truncated = truncated.max(self.truncated);
        let truncated_lsn = truncated.map(|t| t.commit_lsn);
        let truncated_seq = truncated.map(|t| t.seq as i32);
        let common = "changes_applied = changes_applied + $4, truncated_lsn = $5, \
                      truncated_seq = $6, last_error = NULL, updated_at = now()";
        let sql = |set: &str| {
            format!(
                "UPDATE walfill.versions SET {set}, {common}
                  WHERE target = $1 AND version = $2 AND lease = $3"
            )
        };
        let key = (&self.target, &self.version, self.lease);
        let updated = match cursor {
            Cursor::Copied {
                last_key,
                rows,
                rate,
            } => {
                tx.execute(
                    &sql("copy_cursor = $7, rows_copied = rows_copied + $8, copy_rate = $9"),
                    &[
                        key.0,
                        key.1,
                        &key.2,
                        &changes,
                        &truncated_lsn,
                        &truncated_seq,
                        last_key,
                        rows,
                        rate,
                    ],
                )
                .await
            }
            Cursor::BasePart { file, rows } => {
                tx.execute(
                    &sql("copy_cursor = ARRAY[$7::text], rows_copied = rows_copied + $8"),
                    &[
                        key.0,
                        key.1,
                        &key.2,
                        &changes,
                        &truncated_lsn,
                        &truncated_seq,
                        file,
                        rows,
                    ],
                )
                .await
            }
            Cursor::Replayed { committed } => {
                tx.execute(
                    &sql("replayed_lsn = coalesce($7, replayed_lsn)"),
                    &[
                        key.0,
                        key.1,
                        &key.2,
                        &changes,
                        &truncated_lsn,
                        &truncated_seq,
                        committed,
                    ],
                )
                .await
            }
            Cursor::Streamed { end, description } => {
                let desc = description
                    .as_ref()
                    .map(serde_json::to_value)
                    .transpose()
                    .map_err(|e| Error::Internal(format!("describing the stream: {e}")))?;
                tx.execute(
                    &sql("applied_lsn = $7, stream_desc = coalesce($8, stream_desc)"),
                    &[
                        key.0,
                        key.1,
                        &key.2,
                        &changes,
                        &truncated_lsn,
                        &truncated_seq,
                        end,
                        &desc,
                    ],
                )
                .await
            }
        }
        .map_err(|e| Error::destination("recording the version's progress", e))?;
        if updated == 0 {
            return Err(Error::Fenced(format!(
                "another walfill process took version {} of {} over (its lease moved past {}); \
                 this one stops without storing more",
                self.version, self.target, self.lease
            )));
        }
        self.changes_applied += changes;
        self.truncated = truncated;
        match cursor {
            Cursor::Copied {
                last_key,
                rows,
                rate,
            } => {
                self.copy_cursor = Some(last_key.clone());
                self.rows_copied += rows;
                self.copy_rate = *rate;
            }
            Cursor::BasePart { file, rows } => {
                self.copy_cursor = Some(vec![file.clone()]);
                self.rows_copied += rows;
            }
            Cursor::Replayed { committed } => {
                self.replayed_lsn = committed.or(self.replayed_lsn);
            }
            Cursor::Streamed { end, description } => {
                self.applied_lsn = Some(*end);
                if description.is_some() {
                    self.stream_desc = description.clone();
                }
            }
        }
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

    /// `UPDATE walfill.versions SET {set}, updated_at = now()` for this
    /// version; `params` are `$3...`.
    async fn update(
        &self,
        client: &impl GenericClient,
        set: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        context: &str,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE walfill.versions SET {set}, updated_at = now()
              WHERE target = $1 AND version = $2"
        );
        let mut all: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&self.target, &self.version];
        all.extend_from_slice(params);
        client
            .execute(&sql, &all)
            .await
            .map_err(|e| Error::destination(context, e))?;
        Ok(())
    }
}
