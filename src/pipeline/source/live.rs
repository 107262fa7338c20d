//! The live stream as a history source: a version's slot (pgoutput), its
//! transactions folded into batches.
//!
//! Batches end at transaction boundaries, with the end of the last
//! transaction as their cursor; the slot is confirmed only once the batch is
//! committed. A transaction larger than the memory bound is handed on in
//! pieces without a cursor, which the apply loop stores in one open
//! destination transaction: memory stays bounded and readers never see part
//! of a transaction.
//!
//! Changes are the version's table's by OID, whatever its name now; their
//! columns get attribute numbers from the stream's description of the table
//! ([`StreamDesc`]), which the catalog journal's messages move at exactly
//! the LSN of each schema change. Without the journal, walfill checks each
//! new description pgoutput sends against the catalog, and stops rather
//! than guess.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use walfill_core::{Lsn, Relation, RowChange, TxnVersions, Version};
use walfill_replay::decode::{parse_journal, JournalUpdate, JOURNAL_ERROR_PREFIX, JOURNAL_PREFIX};
use walfill_snapshot::{LiveStream, StreamEvent};

use crate::error::{Error, Result};
use crate::pipeline::apply::{
    describe_relation, Batch, Cursor, Era, Fold, Folder, HistorySource, StreamDesc, Writes,
};
use crate::pipeline::version_sql::Plan;

/// How long the stream may be silent before walfill treats it as idle.
const IDLE: Duration = Duration::from_millis(250);
/// Longest a batch waits before it is stored.
const BATCH_AGE: Duration = Duration::from_secs(1);

/// How a live source runs.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Store after this many changes (at the next transaction boundary).
    pub batch_changes: usize,
    /// Buffered writes beyond this many bytes are stored as a piece.
    pub memory_bytes: usize,
    /// Stop once every transaction committed before this is stored.
    pub until: Option<Lsn>,
}

/// A version's stream, as batches.
pub struct LiveSource {
    stream: LiveStream,
    catalog: Client,
    database: u32,
    folder: Folder,
    versions: TxnVersions,
    desc: StreamDesc,
    desc_moved: bool,
    journal: bool,
    /// Resolved descriptions by the address of pgoutput's.
    resolved: HashMap<usize, Arc<Relation>>,
    options: LiveOptions,
    cancel: CancellationToken,
    pending: Fold,
    changes: i64,
    truncate: Option<Version>,
    truncate_xid: Option<u32>,
    /// The open transaction's commit LSN, and whether it was stored before.
    open: Option<(Lsn, bool)>,
    /// The open transaction's xid, as far as the rule needs it (see
    /// [`crate::pipeline::version_sql`]).
    xid: Option<u32>,
    /// Where every transaction before is stored (or about to be).
    position: Lsn,
    /// The position of the last cursor handed out.
    recorded: Lsn,
    oldest: Option<Instant>,
    /// When the last transaction taken since the last cursor committed.
    committed_at: Option<i64>,
    done: bool,
}

impl LiveSource {
    /// A source reading `stream` (started at `from`, where everything
    /// before is stored) for `plan`'s table, whose columns the stream sends
    /// as `desc` describes. `catalog` is a source session for the checks
    /// made without the journal.
    #[allow(clippy::too_many_arguments)]
    pub async fn new(
        stream: LiveStream,
        catalog: Client,
        plan: Plan,
        desc: StreamDesc,
        from: Lsn,
        options: LiveOptions,
        cancel: CancellationToken,
    ) -> Result<LiveSource> {
        let row = catalog
            .query_one(
                "SELECT (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()),
                        EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger
                                 WHERE evtname = 'walfill_journal_ddl' AND evtenabled <> 'D')",
                &[],
            )
            .await
            .map_err(|e| Error::source_query("looking for the catalog journal", e))?;
        let relid = plan.source.oid;
        Ok(LiveSource {
            stream,
            catalog,
            database: row.get(0),
            journal: row.get(1),
            folder: Folder::new(plan, Era::Present),
            versions: TxnVersions::new(relid),
            desc,
            desc_moved: false,
            resolved: HashMap::new(),
            options,
            cancel,
            pending: Fold::default(),
            changes: 0,
            truncate: None,
            truncate_xid: None,
            open: None,
            xid: None,
            position: from,
            recorded: from,
            oldest: None,
            committed_at: None,
            done: false,
        })
    }

    /// Moves the position this source stops at to `until`.
    pub fn extend(&mut self, until: Lsn) {
        self.options.until = Some(until);
        self.done = false;
    }

    fn relid(&self) -> u32 {
        self.folder.plan().source.oid
    }

    /// What is pending, as a batch ending at `cursor` (`None`: a piece).
    fn take(&mut self, cursor: Option<Lsn>) -> Batch {
        self.oldest = None;
        let writes = match self.pending.is_empty() {
            true => Writes::None,
            false => Writes::Folded(std::mem::take(&mut self.pending)),
        };
        let cursor = cursor.map(|end| {
            self.recorded = end;
            Cursor::Streamed {
                end,
                description: std::mem::take(&mut self.desc_moved).then(|| self.desc.clone()),
                committed_at: self.committed_at.take(),
            }
        });
        Batch {
            writes,
            truncate: self.truncate.take(),
            truncate_xid: self.truncate_xid.take(),
            changes: std::mem::take(&mut self.changes),
            cursor,
        }
    }

    fn has_news(&self) -> bool {
        !self.pending.is_empty()
            || self.truncate.is_some()
            || self.changes > 0
            || self.desc_moved
            || self.position > self.recorded
    }

    async fn change(&mut self, change: RowChange) -> Result<()> {
        let Some((_, skip)) = self.open else {
            return Err(Error::Internal("a change outside a transaction".into()));
        };
        if let RowChange::Message { prefix, content } = &change {
            if !skip {
                self.message(prefix, content)?;
            }
            return Ok(());
        }
        let Some(version) = self.versions.next(&change) else {
            return Ok(());
        };
        if skip {
            return Ok(());
        }
        self.changes += 1;
        let change = match change {
            RowChange::Truncate { .. } => {
                if self.truncate.is_none_or(|t| version > t) {
                    self.truncate = Some(version);
                    self.truncate_xid = self.xid;
                }
                return Ok(());
            }
            RowChange::Insert { relation, new } => RowChange::Insert {
                relation: self.resolve(&relation).await?,
                new,
            },
            RowChange::Update { relation, old, new } => RowChange::Update {
                relation: self.resolve(&relation).await?,
                old,
                new,
            },
            RowChange::Delete { relation, old } => RowChange::Delete {
                relation: self.resolve(&relation).await?,
                old,
            },
            RowChange::Message { .. } => return Ok(()),
        };
        self.folder
            .fold(&mut self.pending, version, self.xid, change)?;
        Ok(())
    }

    /// A catalog journal message: the table's description moves here.
    fn message(&mut self, prefix: &str, content: &[u8]) -> Result<()> {
        let relid = self.relid();
        let plan = self.folder.plan();
        if prefix == JOURNAL_ERROR_PREFIX {
            return Err(plan.schema_changed(format!(
                "the catalog journal failed to record a schema change in the source at {}, so \
                 the columns of {} can no longer be followed",
                self.open.map(|(l, _)| l).unwrap_or_default(),
                plan.source
            )));
        }
        if prefix != JOURNAL_PREFIX {
            return Ok(());
        }
        let message = parse_journal(content, self.database).map_err(|e| {
            plan.schema_changed(format!(
                "a catalog journal message is unreadable: {e}, so the columns of {} can no \
                 longer be followed",
                plan.source
            ))
        })?;
        for update in message.updates {
            match update {
                JournalUpdate::Drop(oid) if oid == relid => {
                    return Err(plan.schema_changed(format!(
                        "source table {} (OID {relid}) was dropped (or made unlogged)",
                        plan.source
                    )))
                }
                JournalUpdate::Upsert(relation) if relation.oid == relid => {
                    let desc = StreamDesc::from_journal(&relation);
                    check_read_columns(plan, &desc)?;
                    if desc != self.desc {
                        self.desc = desc;
                        self.desc_moved = true;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `relation` (as pgoutput describes it) with attribute numbers.
    async fn resolve(&mut self, relation: &Arc<Relation>) -> Result<Arc<Relation>> {
        let key = Arc::as_ptr(relation) as usize;
        if let Some(resolved) = self.resolved.get(&key) {
            if resolved.oid == relation.oid {
                return Ok(resolved.clone());
            }
        }
        let plan = self.folder.plan();
        if !self.journal {
            // No journal tells where the table changed: the catalog must
            // still have every column the version reads where it was.
            let now = StreamDesc::from_catalog(&self.catalog, relation.oid).await?;
            check_read_columns(plan, &now)?;
            if self.desc.resolve(relation).is_none() && now.resolve(relation).is_some() {
                self.desc = now;
                self.desc_moved = true;
            }
        }
        let resolved = self.desc.resolve(relation).ok_or_else(|| {
            plan.schema_changed(format!(
                "the stream describes {} as ({}), but walfill expected ({}) at {}{}",
                relation.qualified_name(),
                describe_relation(relation),
                self.desc.describe(),
                self.position,
                if self.journal {
                    ""
                } else {
                    " (the catalog journal is not installed: `walfill setup` installs it, \
                     so schema changes can be followed)"
                }
            ))
        })?;
        if self.resolved.len() > 64 {
            self.resolved.clear();
        }
        self.resolved.insert(key, resolved.clone());
        Ok(resolved)
    }
}

/// Fails when a column `plan` reads is gone from `desc` or changed type.
fn check_read_columns(plan: &Plan, desc: &StreamDesc) -> Result<()> {
    for column in plan.source.replicated_columns() {
        if !plan.reads(&column.name) {
            continue;
        }
        let what = match desc.column(column.attnum) {
            None => "was dropped",
            Some(c) if c.type_oid != column.type_oid => "changed type",
            Some(_) => continue,
        };
        return Err(plan.schema_changed(format!(
            "source table {} changed under version {} of target {}: column {} (attribute {}) \
             {what}, and the version reads it",
            plan.source, plan.def.version, plan.def.target, column.name, column.attnum
        )));
    }
    Ok(())
}

impl HistorySource for LiveSource {
    async fn next(&mut self) -> Result<Option<Batch>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let reached = self
                .options
                .until
                .is_some_and(|until| self.stream.position() >= until);
            if self.open.is_none() && (reached || self.cancel.is_cancelled()) {
                self.done = true;
                self.position = self.position.max(self.stream.position());
                if self.has_news() {
                    return Ok(Some(self.take(Some(self.position))));
                }
                return Ok(None);
            }
            // `next` returns within IDLE when nothing arrives, so a stop
            // request is seen soon; and as soon as the server says it is
            // past the target, so a catch-up ends without waiting.
            match self.stream.next(IDLE, self.options.until).await? {
                StreamEvent::Begin {
                    xid,
                    commit_lsn,
                    committed_at,
                } => {
                    // The switch shows what the rule is for: without the
                    // xid, a chunked copy's rows are decided by LSN alone.
                    self.xid = (!crate::failpoint::armed("apply.lsn_rule")).then_some(xid);
                    // A transaction the stream sends again (it resumes at the
                    // last confirmed position) was stored before.
                    let stored = commit_lsn < self.recorded;
                    if !stored {
                        self.committed_at = Some(committed_at);
                    }
                    self.versions.begin(commit_lsn);
                    self.open = Some((commit_lsn, stored));
                    self.oldest.get_or_insert_with(Instant::now);
                }
                StreamEvent::Change(change) => {
                    self.change(change).await?;
                    if self.pending.bytes() >= self.options.memory_bytes {
                        return Ok(Some(self.take(None)));
                    }
                }
                StreamEvent::Commit { end_lsn, .. } => {
                    self.open = None;
                    self.position = self.position.max(end_lsn);
                    let full = self.changes as usize >= self.options.batch_changes
                        || self.oldest.is_some_and(|t| t.elapsed() >= BATCH_AGE);
                    if full && self.has_news() {
                        return Ok(Some(self.take(Some(self.position))));
                    }
                }
                StreamEvent::Idle { position } => {
                    self.position = self.position.max(position);
                    if self.has_news() {
                        return Ok(Some(self.take(Some(self.position))));
                    }
                }
            }
        }
    }

    async fn stored(&mut self, cursor: &Cursor) -> Result<()> {
        if let Cursor::Streamed { end, .. } = cursor {
            self.stream.confirm(*end).await?;
        }
        Ok(())
    }
}
