//! The state of a replayed version: its path, its start and how far the
//! replay got.

use tokio_postgres::GenericClient;
use walfill_replay::{Lsn, Version};

use super::version::{Phase, VersionState};
use crate::error::{Error, Result};

impl VersionState {
    /// Records how the version is built and why, and where a replay starts.
    pub async fn set_path(
        &mut self,
        client: &impl GenericClient,
        path: &str,
        reason: &str,
        replay_base: Option<serde_json::Value>,
    ) -> Result<()> {
        client
            .execute(
                "UPDATE walfill.versions SET path = $3, path_reason = $4, replay_base = $5,
                        updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&self.target, &self.version, &path, &reason, &replay_base],
            )
            .await
            .map_err(|e| Error::destination("recording the version's path", e))?;
        self.path = path.to_string();
        self.path_reason = Some(reason.to_string());
        self.replay_base = replay_base;
        Ok(())
    }

    /// Records the slot's boundary and restart LSN for a replay and moves to
    /// the replaying phase; the stream will start at the boundary.
    pub async fn set_replay_boundary(
        &mut self,
        client: &impl GenericClient,
        boundary: Lsn,
        restart: Lsn,
    ) -> Result<()> {
        client
            .execute(
                "UPDATE walfill.versions
                    SET phase = 'replaying', boundary_lsn = $3::text::pg_lsn,
                        applied_lsn = $3::text::pg_lsn, restart_lsn = $4::text::pg_lsn,
                        copy_started_at = now(), updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[
                    &self.target,
                    &self.version,
                    &boundary.to_string(),
                    &restart.to_string(),
                ],
            )
            .await
            .map_err(|e| Error::destination("recording the replay's boundary", e))?;
        self.phase = Phase::Replaying;
        self.boundary_lsn = Some(boundary);
        self.applied_lsn = Some(boundary);
        self.restart_lsn = Some(restart);
        Ok(())
    }

    /// Records the slot's restart LSN (where its WAL is kept from).
    pub async fn set_restart_lsn(
        &mut self,
        client: &impl GenericClient,
        restart: Lsn,
    ) -> Result<()> {
        self.execute(
            client,
            "UPDATE walfill.versions SET restart_lsn = $3::text::pg_lsn WHERE target = $1 AND version = $2",
            &restart.to_string(),
            "recording the slot's restart LSN",
        )
        .await?;
        self.restart_lsn = Some(restart);
        Ok(())
    }

    /// Forgets a replay's progress: it starts again from an empty table.
    pub async fn restart_replay(&mut self, client: &impl GenericClient) -> Result<()> {
        client
            .execute(
                "UPDATE walfill.versions
                    SET copy_cursor = NULL, rows_copied = 0, replayed_lsn = NULL,
                        changes_applied = 0, truncated_lsn = NULL, truncated_seq = NULL,
                        updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&self.target, &self.version],
            )
            .await
            .map_err(|e| Error::destination("restarting the replay", e))?;
        self.copy_cursor = None;
        self.rows_copied = 0;
        self.replayed_lsn = None;
        self.changes_applied = 0;
        self.truncated = None;
        Ok(())
    }

    /// Records a stored part of the base snapshot: call inside the
    /// transaction that stored it.
    pub async fn record_base_part(
        &mut self,
        client: &impl GenericClient,
        file: &str,
        rows: i64,
    ) -> Result<()> {
        let cursor = vec![file.to_string()];
        client
            .execute(
                "UPDATE walfill.versions
                    SET copy_cursor = $3, rows_copied = rows_copied + $4, updated_at = now()
                  WHERE target = $1 AND version = $2",
                &[&self.target, &self.version, &cursor, &rows],
            )
            .await
            .map_err(|e| Error::destination("recording the base snapshot's progress", e))?;
        self.copy_cursor = Some(cursor);
        self.rows_copied += rows;
        Ok(())
    }

    /// Records replayed changes stored, up to the transaction that committed
    /// at `replayed` (when the batch ended one): call inside the batch's
    /// transaction.
    pub async fn record_replayed(
        &mut self,
        client: &impl GenericClient,
        replayed: Option<Lsn>,
        changes: i64,
        truncated: Option<Version>,
    ) -> Result<()> {
        let replayed = replayed.or(self.replayed_lsn);
        self.record_position(client, "replayed_lsn", replayed, changes, truncated)
            .await
            .map_err(|e| Error::destination("recording the replay's position", e))?;
        self.replayed_lsn = replayed;
        Ok(())
    }

    /// Gives up replaying: the version will be built from a snapshot, for
    /// `reason`.
    pub async fn fall_back_to_snapshot(
        &mut self,
        client: &impl GenericClient,
        reason: &str,
    ) -> Result<()> {
        self.restart_replay(client).await?;
        self.set_path(client, "snapshot", reason, None).await?;
        self.set_phase(client, Phase::Planned).await
    }
}
