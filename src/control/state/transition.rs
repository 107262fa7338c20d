//! Every change of a version's phase, each one destination transaction
//! (with its event record), so a crash leaves the version either before or
//! after it, and every state it can be left in has a way forward.

use tokio_postgres::{Client, GenericClient, Transaction};
use walfill_core::Lsn;

use super::version::{NewVersion, Path, Phase, VersionState};
use crate::error::{Error, Result};
use crate::pipeline::apply::StreamDesc;

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

/// What a version forgets of its progress when its fill starts over.
const RESET: &str = "copy_cursor = NULL, rows_copied = 0, replayed_lsn = NULL, \
                     replay_read_lsn = NULL, load_cursor = NULL, copy_rate = 0, \
                     changes_applied = 0, truncated_lsn = NULL, truncated_seq = NULL";

/// What a version forgets of its slot when it is built again.
const UNBOUND: &str = "boundary_lsn = NULL, copy_boundary_lsn = NULL, applied_lsn = NULL, \
                       stream_desc = NULL";

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
                rows_estimated, source_relid, source_schema, source_name, source_desc, meaning)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'planned', $9, $10, $11, $12, $13, $14,
                     $15)",
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
                &crate::pipeline::version_sql::MEANING,
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

    /// One transition: `prepare` (if any: a statement run first, such as
    /// emptying the version's table), the `UPDATE ... SET {set}` (params
    /// from `$3`), and an event of `kind` with `detail`, in one destination
    /// transaction; then the state is read back.
    #[allow(clippy::too_many_arguments)]
    async fn transition(
        &mut self,
        client: &mut Client,
        what: &str,
        prepare: Option<String>,
        set: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        kind: &str,
        detail: serde_json::Value,
    ) -> Result<()> {
        let tx = begin(client, what).await?;
        if let Some(sql) = prepare {
            tx.batch_execute(&sql)
                .await
                .map_err(|e| Error::destination(format!("recording {what}"), e))?;
        }
        self.update(&tx, set, params, &format!("recording {what}"))
            .await?;
        super::record_event(&tx, &self.target, Some(&self.version), kind, detail).await?;
        commit(tx, what).await?;
        let lease = self.lease;
        *self = VersionState::load(&*client, &self.target, &self.version)
            .await?
            .ok_or_else(|| Error::Internal(format!("version {} vanished", self.label())))?;
        self.lease = lease;
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
        self.transition(
            client,
            "the version's path",
            None,
            "path = $3, path_reason = $4, replay_base = $5, phase = 'planned'",
            &[&path.as_str(), &reason, &replay_base],
            "path",
            serde_json::json!({ "path": path.as_str(), "reason": reason }),
        )
        .await
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
        let stream = stream
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Error::Internal(format!("describing the stream: {e}")))?;
        let slot = self.slot_name.clone();
        self.transition(
            client,
            "the version's boundary",
            Some(format!("TRUNCATE {}", self.staging_table())),
            &format!(
                "phase = $3, path = $4, boundary_lsn = $5, copy_boundary_lsn = $5, applied_lsn = $5,
                 restart_lsn = coalesce($6, restart_lsn), stream_desc = $7,
                 lost = NULL, copy_started_at = now(), {RESET}"
            ),
            &[
                &path.filling().as_str(),
                &path.as_str(),
                &boundary,
                &restart,
                &stream,
            ],
            "boundary",
            serde_json::json!({ "slot": slot, "lsn": boundary.to_string(), "path": path.as_str() }),
        )
        .await
    }

    /// Records a new snapshot for the rest of an interrupted copy.
    pub async fn resume_copy(&mut self, client: &mut Client, copy_boundary: Lsn) -> Result<()> {
        let after = self.copy_cursor.clone();
        self.transition(
            client,
            "the resumed copy",
            None,
            "copy_boundary_lsn = $3",
            &[&copy_boundary],
            "copy_resumed",
            serde_json::json!({ "after": after, "snapshot_lsn": copy_boundary.to_string() }),
        )
        .await
    }

    /// Starts a replay's load over: its table holds rows an earlier attempt
    /// left without a load cursor to go on from. One transaction.
    pub async fn restart_load(&mut self, client: &mut Client) -> Result<()> {
        self.transition(
            client,
            "the replay's new start",
            Some(format!("TRUNCATE {}", self.staging_table())),
            RESET,
            &[],
            "replay_restarted",
            serde_json::json!({}),
        )
        .await
    }

    /// Gives up replaying: the version goes back to planned, to be built
    /// from a snapshot, for `reason`. One transaction.
    pub async fn fall_back(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        let why = format!("replay abandoned: {reason}");
        self.transition(
            client,
            "the fallback to a snapshot",
            None,
            &format!(
                "phase = 'planned', path = 'snapshot', path_reason = $3, replay_base = NULL, {RESET}"
            ),
            &[&why],
            "replay_abandoned",
            serde_json::json!({ "reason": reason }),
        )
        .await
    }

    /// The version is filled up to its boundary: it catches up with the
    /// stream from there, whose columns `stream` describes (when the fill
    /// did not record them when it started). `spilled`: what a replay's
    /// fold wrote to local disk, and `read`: the archived WAL it read, for
    /// the record.
    pub async fn finish_fill(
        &mut self,
        client: &mut Client,
        stream: Option<&StreamDesc>,
        spilled: Option<crate::pipeline::apply::Spilled>,
        read: Option<&crate::pipeline::apply::WalRead>,
    ) -> Result<()> {
        let desc = stream
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| Error::Internal(format!("describing the stream: {e}")))?;
        let mut detail = serde_json::json!({
            "path": self.path.as_str(), "rows": self.rows_copied, "changes": self.changes_applied
        });
        if let Some(spilled) = spilled {
            detail["spilled_runs"] = spilled.runs.into();
            detail["spilled_bytes"] = spilled.bytes.into();
            detail["spilled_peak_bytes"] = spilled.peak_bytes.into();
        }
        if let Some(read) = read {
            detail["segments_read"] = read.segments.into();
            detail["segments_summarized"] = read.summarized.into();
            detail["wal_read_bytes"] = read.bytes.into();
            detail["first_segment_lsn"] = read.first.map(|l| l.to_string()).into();
        }
        let (segments, bytes) = (
            read.map(|r| r.segments as i64),
            read.map(|r| r.bytes as i64),
        );
        self.transition(
            client,
            "the end of the fill",
            None,
            "phase = 'catching_up', stream_desc = coalesce($3, stream_desc),
             copy_finished_at = now(), segments_read = $4, wal_read_bytes = $5",
            &[&desc, &segments, &bytes],
            "filled",
            detail,
        )
        .await
    }

    /// The version has caught up with the source.
    pub async fn caught_up(&mut self, client: &mut Client) -> Result<()> {
        let applied = self.applied_lsn.unwrap_or_default().to_string();
        self.transition(
            client,
            "that the version caught up",
            None,
            "phase = 'ready', caught_up_at = now()",
            &[],
            "caught_up",
            serde_json::json!({ "applied": applied }),
        )
        .await
    }

    /// Starts the version over (its slot was lost): back to planned, its
    /// table emptied, in one transaction.
    pub async fn rebuild(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        self.transition(
            client,
            "the rebuild",
            Some(format!("TRUNCATE {}", self.staging_table())),
            &format!("phase = 'planned', lost = NULL, {UNBOUND}, {RESET}"),
            &[],
            "rebuild",
            serde_json::json!({ "reason": reason }),
        )
        .await
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
                walfill_core::name::fnv1a(base.as_bytes()),
                self.lease
            );
        }
        let old = self.table_name.clone();
        self.transition(
            client,
            "the rebuild",
            None,
            &format!(
                "phase = 'planned', lost = NULL, table_name = $3,
                 replaced_table = coalesce(replaced_table, $4), path_reason = NULL, {UNBOUND},
                 {RESET}"
            ),
            &[&table, &old],
            "rebuild",
            serde_json::json!({ "reason": reason, "table": table, "readers_keep": old }),
        )
        .await
    }

    /// Records that the version lost changes for good (its slot is gone):
    /// it cannot be published until rebuilt.
    pub async fn mark_lost(&mut self, client: &mut Client, reason: &str) -> Result<()> {
        self.transition(
            client,
            "the lost version",
            None,
            "lost = $3",
            &[&reason],
            "lost",
            serde_json::json!({ "reason": reason }),
        )
        .await
    }
}

/// The phase changes of a swap, in the swap's transaction `tx`: `version`
/// becomes active; the version that was (`old`, unless the swap publishes
/// the active version again) becomes previous, kept current for rollback;
/// an older previous one becomes merely ready.
pub async fn swap_phases(
    tx: &Transaction<'_>,
    target: &str,
    version: &str,
    old: Option<&str>,
) -> Result<()> {
    let failed = |e| Error::destination("recording the swap", e);
    tx.execute(
        "UPDATE walfill.versions SET phase = $3, updated_at = now()
          WHERE target = $1 AND phase = $4 AND version <> $2",
        &[
            &target,
            &version,
            &Phase::Ready.as_str(),
            &Phase::Previous.as_str(),
        ],
    )
    .await
    .map_err(failed)?;
    if let Some(old) = old {
        tx.execute(
            "UPDATE walfill.versions SET phase = $3, updated_at = now()
              WHERE target = $1 AND version = $2",
            &[&target, &old, &Phase::Previous.as_str()],
        )
        .await
        .map_err(failed)?;
    }
    tx.execute(
        "UPDATE walfill.versions SET phase = $3, swapped_at = now(), updated_at = now(),
                held = false, swap_at = NULL, swap_error = NULL, swap_tried_at = NULL
          WHERE target = $1 AND version = $2",
        &[&target, &version, &Phase::Active.as_str()],
    )
    .await
    .map_err(failed)?;
    Ok(())
}

/// Records in `tx` that `version` is retired: its slot and table go.
pub async fn retire_phase(tx: &Transaction<'_>, target: &str, version: &str) -> Result<()> {
    tx.execute(
        "UPDATE walfill.versions SET phase = $3, updated_at = now()
          WHERE target = $1 AND version = $2",
        &[&target, &version, &Phase::Retired.as_str()],
    )
    .await
    .map_err(|e| Error::destination("recording the retirement", e))?;
    Ok(())
}
