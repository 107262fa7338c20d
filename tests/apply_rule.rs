//! The version rule, attacked directly through the library: snapshot rows and
//! stream changes applied in any order, duplicated, give the same result, and
//! a change that loses costs no write.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use tokio_postgres::{Client, NoTls};
use walfill::config::QualifiedName;
use walfill::pipeline::apply::{Batch, Era, Fold, Folder, Store, Writes};
use walfill::pipeline::version_sql::{self, Definition, Plan};
use walfill_core::{Column, Datum, Lsn, Relation, RowChange, Transaction, TxnVersions, Version};
use walfill_snapshot::{ChunkRows, CopyFormat, KeysetChunk};

use crate::support::TestDb;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

struct Fixture {
    source: Client,
    dest: Client,
    plan: Plan,
    relation: Arc<Relation>,
}

async fn fixture(db: &TestDb) -> Fixture {
    let source = connect(&db.url()).await;
    let dest = connect(&db.url()).await;
    // The store records rows whose transform fails in walfill's state.
    walfill::control::state::install(&dest).await.unwrap();
    let def = Definition {
        target: "rule".into(),
        version: "v1".into(),
        dest_schema: "public".into(),
        source: QualifiedName {
            schema: "public".into(),
            name: "t".into(),
        },
        key: None,
        select: "id, v".into(),
        filter: Some("v <> 'hidden'".into()),
        table: "rule__v1".into(),
    };
    let table = version_sql::describe(&source, &def).await.unwrap();
    let plan = version_sql::build(&dest, &def, table).await.unwrap();
    dest.batch_execute(&plan.staging_ddl()).await.unwrap();
    let relation = Arc::new(Relation {
        oid: plan.source.oid,
        schema: "public".into(),
        name: "t".into(),
        columns: vec![
            Column {
                attnum: 1,
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
                type_name: "integer".into(),
                is_key: true,
            },
            Column {
                attnum: 2,
                name: "v".into(),
                type_oid: 25,
                type_modifier: -1,
                type_name: "text".into(),
                is_key: false,
            },
        ],
        full_identity: false,
    });
    Fixture {
        source,
        dest,
        plan,
        relation,
    }
}

fn row(id: i32, v: &str) -> Vec<Datum> {
    vec![Datum::Text(id.to_string()), Datum::Text(v.to_string())]
}

fn key(id: i32) -> Vec<Datum> {
    vec![Datum::Text(id.to_string()), Datum::Null]
}

fn txn(lsn: u64, changes: Vec<RowChange>) -> Transaction {
    Transaction {
        xid: lsn as u32,
        commit_lsn: Lsn(lsn),
        end_lsn: Lsn(lsn + 8),
        commit_time: 0,
        changes,
    }
}

impl Fixture {
    /// Applies whole transactions as one batch, the way every history
    /// source hands them to the store: versioned, folded, the newest
    /// TRUNCATE beside. Returns that TRUNCATE.
    async fn apply(
        &mut self,
        store: &Store,
        batch: &[Transaction],
        mark: Option<Version>,
    ) -> Option<Version> {
        let mut folder = Folder::new(store.plan().clone(), Era::Present);
        let mut fold = Fold::default();
        let mut truncate = None;
        for txn in batch {
            for (version, change) in TxnVersions::of_transaction(store.plan().source.oid, txn) {
                match change {
                    RowChange::Truncate { .. } => truncate = truncate.max(Some(version)),
                    _ => {
                        folder
                            .fold(&mut fold, version, Some(txn.xid), change.clone())
                            .unwrap();
                    }
                }
            }
        }
        let tx = self.dest.transaction().await.unwrap();
        let mut batch = Batch {
            writes: Writes::Folded(fold),
            truncate,
            truncate_xid: None,
            changes: 0,
            cursor: None,
        };
        store.store(&tx, &mut batch, mark).await.unwrap();
        tx.commit().await.unwrap();
        truncate
    }

    async fn load_snapshot(&mut self, store: &Store, boundary: Lsn, mark: Option<Version>) {
        let stx = self
            .source
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await
            .unwrap();
        let mut cursor: Option<Vec<String>> = None;
        loop {
            let chunk = KeysetChunk::new(&store.plan().source, cursor.as_deref(), 7)
                .in_format(CopyFormat::Binary);
            let Some(reading) = chunk.start(&stx).await.unwrap() else {
                break;
            };
            let (sender, rows) = ChunkRows::channel(CopyFormat::Binary);
            let tx = self.dest.transaction().await.unwrap();
            let mut batch = Batch {
                writes: Writes::Chunk {
                    rows,
                    projected: false,
                    version: Version::snapshot(boundary),
                    snapshot: None,
                    after: cursor.clone(),
                },
                truncate: None,
                truncate_xid: None,
                changes: 0,
                cursor: None,
            };
            let (read, stored) = tokio::join!(
                reading.forward(&sender, None),
                store.store(&tx, &mut batch, mark)
            );
            let read = read.unwrap();
            assert_eq!(stored.unwrap().chunk, Some(read.clone()));
            tx.commit().await.unwrap();
            match read.last_key {
                Some(k) if read.rows == 7 => cursor = Some(k),
                _ => break,
            }
        }
        stx.commit().await.unwrap();
    }

    /// Visible rows of the version: what the view would show.
    async fn visible(&self) -> BTreeMap<i32, String> {
        self.dest
            .query(
                "SELECT id, v FROM public.rule__v1 WHERE NOT _walfill_deleted",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    async fn row_state(&self, id: i32) -> (String, String, bool, String) {
        let r = self
            .dest
            .query_one(
                "SELECT xmin::text, xmax::text, _walfill_deleted, _walfill_lsn::text
                   FROM public.rule__v1 WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    }
}

/// A row deleted after the boundary whose stale snapshot copy arrives later
/// stays deleted; a stale copy of an updated row does not undo the update;
/// and neither costs a write.
#[test]
fn stale_snapshot_rows_lose_to_newer_changes() {
    let db = TestDb::new("rule");
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, 'orig' FROM generate_series(1, 30) g;");
    runtime().block_on(async {
        let mut f = fixture(&db).await;
        let store = Store::new(f.plan.clone());
        let rel = f.relation.clone();
        // The stream, after a boundary at 0/1000: delete 5, update 6, hide 7.
        let stream = vec![
            txn(
                0x2000,
                vec![RowChange::Delete {
                    relation: rel.clone(),
                    old: key(5),
                }],
            ),
            txn(
                0x3000,
                vec![RowChange::Update {
                    relation: rel.clone(),
                    old: None,
                    new: row(6, "new"),
                }],
            ),
            txn(
                0x3100,
                vec![RowChange::Update {
                    relation: rel.clone(),
                    old: None,
                    new: row(7, "hidden"),
                }],
            ),
        ];
        f.apply(&store, &stream, None).await;
        let before: Vec<_> =
            futures_util::future::join_all((5..=7).map(|id| f.row_state(id))).await;

        // Now the stale snapshot (boundary 0/1000) arrives.
        f.load_snapshot(&store, Lsn(0x1000), None).await;
        let visible = f.visible().await;
        assert!(
            !visible.contains_key(&5),
            "a stale copy resurrected a deleted row"
        );
        assert_eq!(visible.get(&6).map(String::as_str), Some("new"));
        assert!(
            !visible.contains_key(&7),
            "a stale copy undid the filter's tombstone"
        );
        assert_eq!(visible.len(), 28);
        let after: Vec<_> = futures_util::future::join_all((5..=7).map(|id| f.row_state(id))).await;
        assert_eq!(
            before, after,
            "losing rows were written or locked (xmin/xmax changed)"
        );

        // Duplicate delivery of the stream costs nothing either.
        f.apply(&store, &stream, None).await;
        let again: Vec<_> = futures_util::future::join_all((5..=7).map(|id| f.row_state(id))).await;
        assert_eq!(before, again, "a duplicate change was written or locked");

        // A newer snapshot (a resumed copy) does win over older changes.
        f.source
            .batch_execute("UPDATE t SET v = 'resnap' WHERE id = 6")
            .await
            .unwrap();
        f.load_snapshot(&store, Lsn(0x5000), None).await;
        assert_eq!(
            f.visible().await.get(&6).map(String::as_str),
            Some("resnap")
        );
    });
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Step {
    Upsert(i32, u8),
    Delete(i32),
    Move(i32, i32),
    Truncate,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1..12i32, 0..4u8).prop_map(|(k, v)| Step::Upsert(k, v)),
        3 => (1..12i32).prop_map(Step::Delete),
        2 => (1..12i32, 1..12i32).prop_map(|(a, b)| Step::Move(a, b)),
        1 => Just(Step::Truncate),
    ]
}

fn value(v: u8) -> String {
    ["a", "b", "hidden", "c"][v as usize % 4].to_string()
}

/// Turns steps into transactions (one to three steps each) against a model
/// of the table, and returns them with the model's final state.
fn history(
    rel: &Arc<Relation>,
    start: &BTreeMap<i32, String>,
    steps: &[Step],
    sizes: &[usize],
) -> (Vec<Transaction>, BTreeMap<i32, String>) {
    let mut state = start.clone();
    let mut txns = Vec::new();
    let mut lsn = 0x10_000u64;
    let mut i = 0;
    for &size in sizes.iter().cycle() {
        if i >= steps.len() {
            break;
        }
        let mut changes = Vec::new();
        for s in &steps[i..(i + size).min(steps.len())] {
            match s {
                Step::Upsert(k, v) => {
                    let change = if state.contains_key(k) {
                        RowChange::Update {
                            relation: rel.clone(),
                            old: None,
                            new: row(*k, &value(*v)),
                        }
                    } else {
                        RowChange::Insert {
                            relation: rel.clone(),
                            new: row(*k, &value(*v)),
                        }
                    };
                    state.insert(*k, value(*v));
                    changes.push(change);
                }
                Step::Delete(k) => {
                    if state.remove(k).is_some() {
                        changes.push(RowChange::Delete {
                            relation: rel.clone(),
                            old: key(*k),
                        });
                    }
                }
                Step::Move(a, b) => {
                    if a != b && state.contains_key(a) && !state.contains_key(b) {
                        let v = state.remove(a).unwrap();
                        changes.push(RowChange::Update {
                            relation: rel.clone(),
                            old: Some(key(*a)),
                            new: row(*b, &v),
                        });
                        state.insert(*b, v);
                    }
                }
                Step::Truncate => {
                    state.clear();
                    changes.push(RowChange::Truncate {
                        relations: vec![rel.clone()],
                        cascade: false,
                        restart_seqs: false,
                    });
                }
            }
        }
        i += size;
        lsn += 0x100;
        txns.push(txn(lsn, changes));
    }
    let visible = state.into_iter().filter(|(_, v)| v != "hidden").collect();
    (txns, visible)
}

/// Snapshot rows and stream batches applied in any order, some twice, end in
/// the state the history leads to.
#[test]
fn any_interleaving_gives_the_same_result() {
    let db = TestDb::new("interleave");
    db.exec("CREATE TABLE t (id int PRIMARY KEY, v text)");
    let rt = runtime();
    let f = rt.block_on(fixture(&db));
    let rel = f.relation.clone();
    let f = tokio::sync::Mutex::new(f);
    let config = ProptestConfig {
        cases: 40,
        ..ProptestConfig::default()
    };
    proptest!(config, |(
        start in proptest::collection::btree_map(1..12i32, 0..4u8, 0..8),
        steps in proptest::collection::vec(step(), 1..25),
        sizes in proptest::collection::vec(1..4usize, 1..5),
        batch in 1..4usize,
        order in proptest::collection::vec(any::<u32>(), 40),
        duplicate in any::<proptest::sample::Index>(),
    )| {
        rt.block_on(async {
            let mut f = f.lock().await;
            let start: BTreeMap<i32, String> = start.into_iter().map(|(k, v)| (k, value(v))).collect();
            f.source.batch_execute("TRUNCATE t").await.unwrap();
            for (k, v) in &start {
                f.source.execute("INSERT INTO t VALUES ($1, $2)", &[k, v]).await.unwrap();
            }
            f.dest.batch_execute("TRUNCATE public.rule__v1").await.unwrap();
            let (txns, expected) = history(&rel, &start, &steps, &sizes);
            // Units: the snapshot (boundary before every change), then the
            // stream cut into batches; shuffled, one duplicated.
            let mut units: Vec<Option<Vec<Transaction>>> = vec![None];
            units.extend(txns.chunks(batch).map(|c| Some(c.to_vec())));
            let copy = units[duplicate.index(units.len())].clone();
            units.push(copy);
            let mut keyed: Vec<(u32, Option<Vec<Transaction>>)> =
                units.into_iter().enumerate().map(|(i, u)| (order[i % order.len()] ^ i as u32, u)).collect();
            keyed.sort_by_key(|(k, _)| *k);
            let store = Store::new(f.plan.clone());
            let mut mark: Option<Version> = None;
            for (_, unit) in keyed {
                match unit {
                    None => f.load_snapshot(&store, Lsn(0x1000), mark).await,
                    Some(batch) => {
                        let truncated = f.apply(&store, &batch, mark).await;
                        mark = mark.max(truncated);
                    }
                }
            }
            let visible = f.visible().await;
            prop_assert_eq!(visible, expected);
            Ok(())
        })?;
    });
}
