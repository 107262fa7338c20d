//! An external fold gives the same rows whatever its memory: checked
//! against a plain model of the table under random histories.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use walfill_core::{Column, Datum, Lsn, Relation, RowChange, Version};
use walfill_snapshot::{ReplicaIdentity, SourceTable, TableColumn};

use super::ExternalFold;
use crate::config::QualifiedName;
use crate::pipeline::apply::fold::{Era, Folder};
use crate::pipeline::version_sql::{Definition, OutputColumn, Plan};

fn plan() -> Plan {
    let col = |attnum, name: &str, type_oid, len| TableColumn {
        attnum,
        name: name.into(),
        sql_type: "x".into(),
        type_oid,
        len,
        storage: 'x',
        generated: None,
        collation: None,
    };
    Plan {
        def: Definition {
            target: "t".into(),
            version: "v1".into(),
            dest_schema: "public".into(),
            source: QualifiedName {
                schema: "public".into(),
                name: "docs".into(),
            },
            key: None,
            select: "id, body, n".into(),
            filter: None,
            table: "t__v1".into(),
        },
        source: SourceTable {
            schema: "public".into(),
            name: "docs".into(),
            oid: 1,
            columns: vec![
                col(1, "id", 25, -1),
                col(2, "body", 25, -1),
                col(3, "n", 23, 4),
            ],
            replica_identity: ReplicaIdentity::Default,
            key: vec!["id".into()],
            estimated_rows: 0,
            estimated_from_size: false,
            encoding: None,
            default_collation: None,
        },
        key: vec!["id".into()],
        outputs: vec![OutputColumn {
            name: "id".into(),
            sql_type: "text".into(),
            collation: None,
        }],
        hidden: Vec::new(),
        referenced: vec!["id".into(), "body".into(), "n".into()],
        warnings: Vec::new(),
        identity: false,
        collations: Default::default(),
        not_portable: None,
    }
}

fn relation() -> Arc<Relation> {
    let column = |attnum: i16, name: &str| Column {
        attnum,
        name: name.into(),
        type_oid: 25,
        type_modifier: -1,
        type_name: String::new(),
        is_key: name == "id",
    };
    Arc::new(Relation {
        oid: 1,
        schema: "public".into(),
        name: "docs".into(),
        columns: vec![column(1, "id"), column(2, "body"), column(3, "n")],
        full_identity: false,
    })
}

/// One step of a random history.
#[derive(Clone, Debug)]
enum Step {
    Insert(u8, String),
    /// A new body, or `None`: the TOASTed body left unchanged.
    Update(u8, Option<String>),
    /// The key changes; the body as in `Update`.
    Rekey(u8, u8, Option<String>),
    Delete(u8),
    Truncate,
}

fn step() -> impl Strategy<Value = Step> {
    let id = 0u8..24;
    let body = "[a-zé\\t]{0,12}";
    prop_oneof![
        4 => (id.clone(), body).prop_map(|(i, b)| Step::Insert(i, b)),
        4 => (id.clone(), proptest::option::of(body)).prop_map(|(i, b)| Step::Update(i, b)),
        2 => (id.clone(), id.clone(), proptest::option::of(body))
            .prop_map(|(a, b, body)| Step::Rekey(a, b, body)),
        2 => id.prop_map(Step::Delete),
        1 => Just(Step::Truncate),
    ]
}

/// Runs `steps` (those that apply) through a fold of `budget` bytes and
/// through the model; returns both tables.
type Table = BTreeMap<String, (String, String)>;

fn run(steps: &[Step], budget: usize) -> (Table, Table) {
    let rel = relation();
    let mut fold = ExternalFold::new(Folder::new(plan(), Era::Past), budget, std::env::temp_dir());
    let mut model: Table = BTreeMap::new();
    let t = |s: &str| Datum::Text(s.to_string());
    for (i, step) in steps.iter().enumerate() {
        let version = Version {
            commit_lsn: Lsn(100 + i as u64),
            seq: 1,
        };
        let n = i.to_string();
        let change = match step {
            Step::Insert(id, body) => {
                let id = id.to_string();
                if model.contains_key(&id) {
                    continue;
                }
                model.insert(id.clone(), (body.clone(), n.clone()));
                RowChange::Insert {
                    relation: rel.clone(),
                    new: vec![t(&id), t(body), t(&n)],
                }
            }
            Step::Update(id, body) => {
                let id = id.to_string();
                let Some(row) = model.get_mut(&id) else {
                    continue;
                };
                if let Some(body) = body {
                    row.0 = body.clone();
                }
                row.1 = n.clone();
                RowChange::Update {
                    relation: rel.clone(),
                    old: None,
                    new: vec![t(&id), body.as_deref().map_or(Datum::Unchanged, t), t(&n)],
                }
            }
            Step::Rekey(from, to, body) => {
                let (from, to) = (from.to_string(), to.to_string());
                if from == to || model.contains_key(&to) {
                    continue;
                }
                let Some(mut row) = model.remove(&from) else {
                    continue;
                };
                if let Some(body) = body {
                    row.0 = body.clone();
                }
                row.1 = n.clone();
                model.insert(to.clone(), row);
                RowChange::Update {
                    relation: rel.clone(),
                    old: Some(vec![t(&from), Datum::Null, Datum::Null]),
                    new: vec![t(&to), body.as_deref().map_or(Datum::Unchanged, t), t(&n)],
                }
            }
            Step::Delete(id) => {
                let id = id.to_string();
                if model.remove(&id).is_none() {
                    continue;
                }
                RowChange::Delete {
                    relation: rel.clone(),
                    old: vec![t(&id), Datum::Null, Datum::Null],
                }
            }
            Step::Truncate => {
                model.clear();
                fold.truncate(version);
                continue;
            }
        };
        fold.add(version, change).unwrap();
    }
    let mut folded: Table = BTreeMap::new();
    let mut last: Option<Vec<String>> = None;
    fold.finish()
        .for_each_row(None, |key, entry| {
            assert!(
                last.as_ref().is_none_or(|l| *l < key),
                "rows come in key order"
            );
            last = Some(key.clone());
            let text = |d: &Datum| match d {
                Datum::Text(s) => s.clone(),
                other => format!("{other:?}"),
            };
            folded.insert(
                key[0].clone(),
                (text(&entry.values[1]), text(&entry.values[2])),
            );
            Ok(())
        })
        .unwrap();
    (folded, model)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever its budget (spilling after every few changes or never),
    /// the fold's rows are the model's: unchanged values carried over,
    /// across runs and across key changes, deleted and truncated rows gone.
    #[test]
    fn the_rows_are_the_models_whatever_the_memory(
        steps in proptest::collection::vec(step(), 0..160),
        budget in 1usize..3000,
    ) {
        let (spilled, model) = run(&steps, budget);
        prop_assert_eq!(&spilled, &model);
        let (in_memory, _) = run(&steps, usize::MAX);
        prop_assert_eq!(in_memory, model);
    }
}

#[test]
fn rows_after_a_key_are_given_on_their_own() {
    let steps: Vec<Step> = (0..20).map(|i| Step::Insert(i, format!("b{i}"))).collect();
    let rel_fold = {
        let mut fold = ExternalFold::new(Folder::new(plan(), Era::Past), 200, std::env::temp_dir());
        let rel = relation();
        for (i, step) in steps.iter().enumerate() {
            let Step::Insert(id, body) = step else {
                unreachable!()
            };
            let change = RowChange::Insert {
                relation: rel.clone(),
                new: vec![
                    Datum::Text(format!("{id:02}")),
                    Datum::Text(body.clone()),
                    Datum::Null,
                ],
            };
            fold.add(
                Version {
                    commit_lsn: Lsn(10 + i as u64),
                    seq: 1,
                },
                change,
            )
            .unwrap();
        }
        assert!(fold.spilled().runs > 1, "the budget makes it spill");
        fold
    };
    let mut keys = Vec::new();
    rel_fold
        .finish()
        .for_each_row(Some(&["11".to_string()]), |key, _| {
            keys.push(key[0].clone());
            Ok(())
        })
        .unwrap();
    assert_eq!(
        keys,
        (12..20).map(|i| format!("{i:02}")).collect::<Vec<_>>()
    );
}

/// A base snapshot's part read at a later position than a change replayed
/// after it: the change is older than the part's row and loses, in memory
/// and across runs; newer changes win.
#[test]
fn a_change_older_than_a_base_row_loses_to_it() {
    let rel = relation();
    let t = |s: &str| Datum::Text(s.to_string());
    let row = |k: &str, body: &str| RowChange::Insert {
        relation: rel.clone(),
        new: vec![t(k), t(body), Datum::Null],
    };
    let update = |k: &str, body: &str| RowChange::Update {
        relation: rel.clone(),
        old: None,
        new: vec![t(k), t(body), Datum::Null],
    };
    let v = |lsn: u64, seq: u32| Version {
        commit_lsn: Lsn(lsn),
        seq,
    };
    for budget in [1, usize::MAX] {
        let mut fold =
            ExternalFold::new(Folder::new(plan(), Era::Past), budget, std::env::temp_dir());
        // Base parts at positions 100 and 300.
        fold.add(v(100, 0), row("a", "base a")).unwrap();
        fold.add(v(300, 0), row("b", "base b")).unwrap();
        // Replayed changes from 100 on: older than b's part, newer than a's.
        fold.add(v(200, 1), update("a", "wal a")).unwrap();
        fold.add(v(200, 2), update("b", "stale b")).unwrap();
        fold.add(v(400, 1), update("b", "wal b")).unwrap();
        fold.add(v(250, 1), update("b", "stale again")).unwrap();
        let mut rows = Vec::new();
        fold.finish()
            .for_each_row(None, |key, entry| {
                rows.push((key[0].clone(), entry.values[1].clone()));
                Ok(())
            })
            .unwrap();
        assert_eq!(
            rows,
            vec![("a".into(), t("wal a")), ("b".into(), t("wal b"))],
            "budget {budget}"
        );
    }
}
