//! Folding changes, columns matched by attribute number.

use super::*;
use crate::config::QualifiedName;
use crate::pipeline::version_sql::{Definition, OutputColumn};
use walfill_core::{Column, Lsn};
use walfill_snapshot::{ReplicaIdentity, SourceTable, TableColumn};

/// docs(id int key, body text, n int), attributes 1, 2 and 4 (3 dropped);
/// the transform reads id and body.
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
            select: "id, body".into(),
            filter: None,
            table: "t__v1".into(),
        },
        source: SourceTable {
            schema: "public".into(),
            name: "docs".into(),
            oid: 1,
            columns: vec![
                col(1, "id", 23, 4),
                col(2, "body", 25, -1),
                col(4, "n", 23, 4),
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
            sql_type: "integer".into(),
            collation: None,
        }],
        hidden: Vec::new(),
        referenced: vec!["id".into(), "body".into()],
        warnings: Vec::new(),
        identity: false,
        collations: Default::default(),
        not_portable: None,
    }
}

fn relation_with(full: bool, columns: &[(i16, &str, u32)]) -> Arc<Relation> {
    Arc::new(Relation {
        oid: 1,
        schema: "public".into(),
        name: "docs".into(),
        columns: columns
            .iter()
            .map(|(attnum, name, type_oid)| Column {
                attnum: *attnum,
                name: name.to_string(),
                type_oid: *type_oid,
                type_modifier: -1,
                type_name: String::new(),
                is_key: full || *name == "id",
            })
            .collect(),
        full_identity: full,
    })
}

fn relation(full: bool) -> Arc<Relation> {
    relation_with(full, &[(1, "id", 23), (2, "body", 25), (4, "n", 23)])
}

fn t(s: &str) -> Datum {
    Datum::Text(s.into())
}

fn v(lsn: u64, seq: u32) -> Version {
    Version {
        commit_lsn: Lsn(lsn),
        seq,
    }
}

fn key(k: &str) -> Vec<String> {
    vec![k.to_string()]
}

#[test]
fn last_change_per_key_wins_and_unread_columns_are_left_out() {
    let rel = relation(false);
    let map = ColumnMap::build(&plan(), rel.clone(), Era::Present).unwrap();
    let mut fold = Fold::default();
    let insert = RowChange::Insert {
        relation: rel.clone(),
        new: vec![t("1"), t("a"), t("7")],
    };
    let update = RowChange::Update {
        relation: rel.clone(),
        old: None,
        new: vec![t("1"), Datum::Unchanged, t("8")],
    };
    fold.add(&map, insert.clone(), v(10, 1), None).unwrap();
    fold.add(&map, update.clone(), v(10, 2), None).unwrap();
    let entries: HashMap<_, _> = fold.drain().collect();
    assert_eq!(entries.len(), 1);
    let e = &entries[&key("1")];
    assert_eq!(e.version, v(10, 2));
    // The unchanged body came from the insert earlier in the batch; n
    // is not read by the transform.
    assert_eq!(e.values, vec![t("1"), t("a"), Datum::Null]);
    assert_eq!(e.fill_key, None);
}

#[test]
fn columns_are_matched_by_attribute_number_not_by_name() {
    // Earlier, body was attribute 3 (since dropped): its values are not
    // the plan's body (attribute 2, added again under the same name).
    let past = relation_with(false, &[(1, "id", 23), (3, "body", 25)]);
    let map = ColumnMap::build(&plan(), past.clone(), Era::Past).unwrap();
    let mut fold = Fold::default();
    let insert = RowChange::Insert {
        relation: past,
        new: vec![t("1"), t("dropped value")],
    };
    fold.add(&map, insert.clone(), v(5, 1), None).unwrap();
    let entries: HashMap<_, _> = fold.drain().collect();
    assert_eq!(entries[&key("1")].values[1], Datum::Null);

    // A renamed column is the same column.
    let renamed = relation_with(false, &[(1, "id", 23), (2, "text", 25), (4, "n", 23)]);
    let map = ColumnMap::build(&plan(), renamed.clone(), Era::Present).unwrap();
    let mut fold = Fold::default();
    let insert = RowChange::Insert {
        relation: renamed,
        new: vec![t("2"), t("kept"), t("0")],
    };
    fold.add(&map, insert.clone(), v(6, 1), None).unwrap();
    let entries: HashMap<_, _> = fold.drain().collect();
    assert_eq!(entries[&key("2")].values[1], t("kept"));
}

#[test]
fn key_change_leaves_a_tombstone_and_remembers_where_to_fill_from() {
    let rel = relation(false);
    let map = ColumnMap::build(&plan(), rel.clone(), Era::Present).unwrap();
    let mut fold = Fold::default();
    let moved = RowChange::Update {
        relation: rel.clone(),
        old: Some(vec![t("1"), Datum::Null, Datum::Null]),
        new: vec![t("2"), Datum::Unchanged, t("3")],
    };
    fold.add(&map, moved.clone(), v(20, 1), None).unwrap();
    let moved_again = RowChange::Update {
        relation: rel.clone(),
        old: Some(vec![t("2"), Datum::Null, Datum::Null]),
        new: vec![t("5"), Datum::Unchanged, t("4")],
    };
    fold.add(&map, moved_again.clone(), v(21, 1), None).unwrap();
    let entries: HashMap<_, _> = fold.drain().collect();
    assert_eq!(entries[&key("1")].op, Op::Delete);
    assert_eq!(entries[&key("2")].op, Op::Delete);
    assert_eq!(entries[&key("2")].version, v(21, 1));
    let last = &entries[&key("5")];
    assert_eq!(last.op, Op::Upsert);
    assert_eq!(last.values[1], Datum::Unchanged);
    // Still unknown: fill from the stored row of the first key.
    assert_eq!(last.fill_key, Some(key("1")));
}

#[test]
fn a_key_image_is_not_a_whole_old_row_but_a_full_identity_row_is() {
    let mut fold = Fold::default();
    let rel = relation(false);
    let map = ColumnMap::build(&plan(), rel.clone(), Era::Present).unwrap();
    let change = RowChange::Update {
        relation: rel,
        old: Some(vec![t("1"), Datum::Null, Datum::Null]),
        new: vec![t("2"), Datum::Unchanged, t("3")],
    };
    fold.add(&map, change.clone(), v(30, 1), None).unwrap();
    let entries: HashMap<_, _> = fold.drain().collect();
    assert_eq!(entries[&key("2")].values[1], Datum::Unchanged);

    let rel = relation(true);
    let map = ColumnMap::build(&plan(), rel.clone(), Era::Present).unwrap();
    let change = RowChange::Update {
        relation: rel,
        old: Some(vec![t("1"), t("old body"), t("3")]),
        new: vec![t("1"), Datum::Unchanged, t("3")],
    };
    fold.add(&map, change.clone(), v(31, 1), None).unwrap();
    let entries: HashMap<_, _> = fold.drain().collect();
    let e = &entries[&key("1")];
    assert_eq!(e.values[1], t("old body"));
    assert_eq!(e.fill_key, None);
}

#[test]
fn a_column_the_transform_reads_must_be_there_in_the_present() {
    let gone = relation_with(false, &[(1, "id", 23), (4, "n", 23)]);
    let err = ColumnMap::build(&plan(), gone.clone(), Era::Present)
        .unwrap_err()
        .to_string();
    assert!(err.contains("column body (attribute 2) is gone"), "{err}");
    assert!(err.contains("configure a new version"), "{err}");
    // In the past it simply did not exist yet.
    assert!(ColumnMap::build(&plan(), gone, Era::Past).is_ok());
    let retyped = relation_with(false, &[(1, "id", 23), (2, "body", 1043), (4, "n", 23)]);
    let err = ColumnMap::build(&plan(), retyped, Era::Present)
        .unwrap_err()
        .to_string();
    assert!(err.contains("changed type"), "{err}");
}
