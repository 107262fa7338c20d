//! The live stream: committed transactions from a logical slot (pgoutput).
//!
//! [`LiveStream`] reads the raw replication protocol so that nothing the
//! server says is lost in translation: pgoutput's "unchanged TOAST" marker
//! becomes [`Datum::Unchanged`] and relation messages keep their identity
//! columns. Transactions arrive as events (begin, each change, commit), so
//! a transaction of any size passes through in bounded memory; transactional
//! logical messages (walfill's catalog journal) arrive among the changes, at
//! their place. The slot's confirmed position moves only when the consumer
//! calls [`LiveStream::confirm`] after its own durable commit, so a crash at
//! any moment replays from the last confirmed transaction.
//!
//! pgoutput describes a relation by its OID, names and types, but not by
//! attribute numbers: the [`Relation`]s here have `attnum` 0 until the
//! consumer matches them to a description of the table.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pg_walstream::{
    parse_keepalive_message, CancellationToken, ColumnData, LogicalReplicationMessage,
    LogicalReplicationParser, TupleData,
};
use walfill_core::{Column, Datum, Lsn, Relation, RowChange};

use crate::boundary::ReplicationConnection;
use crate::error::{SlotProblem, SnapshotError};

/// How often the stream reports its position even when nothing happens, well
/// inside the server's default `wal_sender_timeout` of 60 s.
const STATUS_INTERVAL: Duration = Duration::from_secs(10);

/// What the stream has to say next.
#[derive(Debug)]
pub enum StreamEvent {
    /// A committed transaction starts; its changes follow.
    Begin {
        /// Top-level xid.
        xid: u32,
        /// LSN of its commit record: the version of its changes.
        commit_lsn: Lsn,
        /// When it committed on the source: microseconds since
        /// 2000-01-01 00:00 UTC, PostgreSQL's epoch.
        committed_at: i64,
    },
    /// One change of the open transaction, in order.
    Change(RowChange),
    /// The open transaction ends.
    Commit {
        /// LSN of its commit record.
        commit_lsn: Lsn,
        /// LSN just past it: where a consumer resumes after it.
        end_lsn: Lsn,
    },
    /// Nothing arrived for a while; every transaction committed before
    /// `position` has been delivered.
    Idle {
        /// The server's WAL position as of its last message.
        position: Lsn,
    },
}

/// A logical replication stream from a slot, with transaction assembly.
pub struct LiveStream {
    conn: ReplicationConnection,
    slot: String,
    parser: LogicalReplicationParser,
    relations: HashMap<u32, Arc<Relation>>,
    /// Commit LSN of the transaction being received.
    open: Option<Lsn>,
    received: Lsn,
    confirmed: Lsn,
    last_status: Instant,
}

impl LiveStream {
    /// Starts streaming slot `slot` for `publication`, from `from` (or from
    /// the slot's confirmed position, whichever is later).
    pub fn start(
        mut conn: ReplicationConnection,
        slot: &str,
        publication: &str,
        from: Lsn,
    ) -> Result<LiveStream, SnapshotError> {
        let publications = format!("\"{}\"", publication.replace('"', "\"\""));
        conn.inner
            .start_replication(
                slot,
                from.0,
                &[
                    ("proto_version", "1"),
                    ("publication_names", &publications),
                    ("messages", "true"),
                ],
            )
            .map_err(|e| {
                let context = match SlotProblem::of(&e) {
                    Some(SlotProblem::Missing) => format!(
                        "replication slot {slot} no longer exists, so changes after {from} \
                         are lost to this version; rebuild it with `walfill backfill`"
                    ),
                    Some(SlotProblem::InUse) => format!(
                        "replication slot {slot} is in use by another process (another \
                         walfill running for this version?)"
                    ),
                    None => format!("starting replication from slot {slot} at {from}"),
                };
                SnapshotError::replication(context, e)
            })?;
        Ok(LiveStream {
            conn,
            slot: slot.to_string(),
            parser: LogicalReplicationParser::with_protocol_version(1),
            relations: HashMap::new(),
            open: None,
            received: from,
            confirmed: from,
            last_status: Instant::now(),
        })
    }

    /// The position up to which every committed transaction was delivered.
    pub fn position(&self) -> Lsn {
        self.received
    }

    /// Tells the server that everything up to `lsn` is durably applied, so
    /// the slot may release the WAL before it.
    pub async fn confirm(&mut self, lsn: Lsn) -> Result<(), SnapshotError> {
        if lsn > self.confirmed {
            self.confirmed = lsn;
        }
        self.send_status().await
    }

    async fn send_status(&mut self) -> Result<(), SnapshotError> {
        self.last_status = Instant::now();
        self.conn
            .inner
            .send_standby_status_update(self.received.0, self.confirmed.0, self.confirmed.0, false)
            .await
            .map_err(|e| {
                SnapshotError::replication(format!("reporting position to slot {}", self.slot), e)
            })
    }

    /// Waits for the next event, or reports [`StreamEvent::Idle`] when no
    /// transaction arrives for `idle` between transactions, or at once
    /// when, between transactions, the server says it has sent everything
    /// before `until`.
    ///
    /// Keepalives do not put the idle report off: on a busy cluster the
    /// server sends one each time it has read WAL that was not ours, often
    /// many times a second, and a table nobody writes must still see its
    /// position move (and its slot confirmed) while that goes on.
    pub async fn next(
        &mut self,
        idle: Duration,
        until: Option<Lsn>,
    ) -> Result<StreamEvent, SnapshotError> {
        let mut deadline = Instant::now() + idle;
        loop {
            if self.last_status.elapsed() >= STATUS_INTERVAL {
                self.send_status().await?;
            }
            let token = CancellationToken::new();
            let timer = {
                let token = token.clone();
                let wait = deadline.saturating_duration_since(Instant::now());
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    token.cancel();
                })
            };
            let message = self.conn.inner.get_copy_data_async(&token).await;
            timer.abort();
            let message = match message {
                Ok(m) => m,
                Err(e) if e.is_cancelled() => {
                    // Reporting our position makes the server send a keepalive
                    // with its own if it is ahead of what we have seen.
                    self.send_status().await?;
                    if self.open.is_none() {
                        return Ok(StreamEvent::Idle {
                            position: self.received,
                        });
                    }
                    deadline = Instant::now() + idle;
                    continue;
                }
                Err(e) => {
                    return Err(SnapshotError::replication(
                        format!("reading from replication slot {}", self.slot),
                        e,
                    ))
                }
            };
            match message.first() {
                Some(b'w') if message.len() >= 25 => {
                    if let Some(event) = self.handle_wal_data(message.slice(25..))? {
                        return Ok(event);
                    }
                }
                Some(b'k') => {
                    let keepalive = parse_keepalive_message(&message)
                        .map_err(|e| SnapshotError::replication("reading a keepalive", e))?;
                    if self.open.is_none() && Lsn(keepalive.wal_end) > self.received {
                        self.received = Lsn(keepalive.wal_end);
                    }
                    if keepalive.reply_requested {
                        self.send_status().await?;
                    }
                    // A catch-up to `until` need not wait out `idle` once
                    // the server is past it with no transaction open.
                    if self.open.is_none() && until.is_some_and(|u| self.received >= u) {
                        return Ok(StreamEvent::Idle {
                            position: self.received,
                        });
                    }
                }
                _ => {
                    return Err(SnapshotError::Protocol(format!(
                        "unexpected message of {} bytes starting with {:?}",
                        message.len(),
                        message.first().map(|b| *b as char)
                    )))
                }
            }
        }
    }

    fn handle_wal_data(&mut self, payload: Bytes) -> Result<Option<StreamEvent>, SnapshotError> {
        let parsed = self
            .parser
            .parse_wal_message_bytes(payload)
            .map_err(|e| SnapshotError::replication("decoding a pgoutput message", e))?;
        let change = match parsed.message {
            LogicalReplicationMessage::Begin {
                final_lsn,
                xid,
                timestamp,
            } => {
                self.open = Some(Lsn(final_lsn));
                return Ok(Some(StreamEvent::Begin {
                    xid,
                    commit_lsn: Lsn(final_lsn),
                    committed_at: timestamp,
                }));
            }
            LogicalReplicationMessage::Commit {
                commit_lsn,
                end_lsn,
                ..
            } => {
                if self.open.take().is_none() {
                    return Err(SnapshotError::Protocol(format!(
                        "commit at {} without begin",
                        Lsn(commit_lsn)
                    )));
                }
                if Lsn(end_lsn) > self.received {
                    self.received = Lsn(end_lsn);
                }
                return Ok(Some(StreamEvent::Commit {
                    commit_lsn: Lsn(commit_lsn),
                    end_lsn: Lsn(end_lsn),
                }));
            }
            LogicalReplicationMessage::Relation {
                relation_id,
                namespace,
                relation_name,
                columns,
                replica_identity,
            } => {
                let relation = Relation {
                    oid: relation_id,
                    schema: namespace.to_string(),
                    name: relation_name.to_string(),
                    columns: columns
                        .iter()
                        .map(|c| Column {
                            attnum: 0,
                            name: c.name.to_string(),
                            type_oid: c.type_id,
                            type_modifier: c.type_modifier,
                            type_name: String::new(),
                            is_key: c.is_key(),
                        })
                        .collect(),
                    full_identity: replica_identity == b'f',
                };
                self.relations.insert(relation_id, Arc::new(relation));
                return Ok(None);
            }
            LogicalReplicationMessage::Insert { relation_id, tuple } => {
                let relation = self.relation(relation_id)?;
                let new = datums(tuple, &relation)?;
                RowChange::Insert { relation, new }
            }
            LogicalReplicationMessage::Update {
                relation_id,
                old_tuple,
                new_tuple,
                ..
            } => {
                let relation = self.relation(relation_id)?;
                let old = old_tuple.map(|t| datums(t, &relation)).transpose()?;
                let new = datums(new_tuple, &relation)?;
                RowChange::Update { relation, old, new }
            }
            LogicalReplicationMessage::Delete {
                relation_id,
                old_tuple,
                ..
            } => {
                let relation = self.relation(relation_id)?;
                let old = datums(old_tuple, &relation)?;
                RowChange::Delete { relation, old }
            }
            LogicalReplicationMessage::Truncate {
                relation_ids,
                flags,
            } => {
                let relations = relation_ids
                    .into_iter()
                    .map(|id| self.relation(id))
                    .collect::<Result<Vec<_>, _>>()?;
                RowChange::Truncate {
                    relations,
                    cascade: flags & 1 != 0,
                    restart_seqs: flags & 2 != 0,
                }
            }
            // Transactional messages are part of their transaction (the
            // catalog journal's among them); others carry nothing to apply.
            LogicalReplicationMessage::Message {
                flags,
                prefix,
                content,
                ..
            } if flags & 1 != 0 => RowChange::Message {
                prefix,
                content: content.to_vec(),
            },
            // Type, origin and other messages carry nothing to apply.
            _ => return Ok(None),
        };
        if self.open.is_none() {
            return Err(SnapshotError::Protocol(
                "row change outside a transaction".into(),
            ));
        }
        Ok(Some(StreamEvent::Change(change)))
    }

    fn relation(&self, id: u32) -> Result<Arc<Relation>, SnapshotError> {
        self.relations.get(&id).cloned().ok_or_else(|| {
            SnapshotError::Protocol(format!("change for relation {id} before its description"))
        })
    }
}

fn datums(tuple: TupleData, relation: &Relation) -> Result<Vec<Datum>, SnapshotError> {
    if tuple.columns.len() != relation.columns.len() {
        return Err(SnapshotError::Protocol(format!(
            "row of {}.{} has {} values for {} columns",
            relation.schema,
            relation.name,
            tuple.columns.len(),
            relation.columns.len()
        )));
    }
    tuple.columns.into_iter().map(datum).collect()
}

fn datum(column: ColumnData) -> Result<Datum, SnapshotError> {
    match column.data_type {
        b'n' => Ok(Datum::Null),
        b'u' => Ok(Datum::Unchanged),
        b't' => String::from_utf8(column.into_bytes().to_vec())
            .map(Datum::Text)
            .map_err(|_| SnapshotError::Protocol("a text value is not valid UTF-8".into())),
        other => Err(SnapshotError::Protocol(format!(
            "unexpected column kind {:?} (walfill asks for text values)",
            other as char
        ))),
    }
}
