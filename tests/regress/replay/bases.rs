//! c3: a damaged base snapshot (truncated, short of columns or rows, missing) makes the backfill fall back to a snapshot.

use super::*;

/// The files of the base snapshots of table `table` of `db` in the
/// cluster's archive.
fn base_files(db: &TestDb, table: &str) -> Vec<PathBuf> {
    let database = db
        .value("SELECT oid FROM pg_database WHERE datname = current_database()")
        .unwrap();
    let relid = db
        .value(&format!("SELECT '{table}'::regclass::oid"))
        .unwrap();
    let dir = PathBuf::from(archive_url().trim_start_matches("file://"))
        .join("base")
        .join(database)
        .join(relid);
    let mut files = Vec::new();
    let mut stack = vec![dir];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A table older than the journal, built by snapshot (which leaves a base
/// snapshot in the archive), then written to; returns the configuration.
fn table_with_a_base(db: &TestDb) -> (Walfill, String) {
    db.exec(
        "CREATE TABLE t (id int PRIMARY KEY, v text, w int);
         INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 3000) g;",
    );
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(
        db,
        &format!(
            "{archive}\n{}",
            target("t_view", "t", "id, v, w", None, "v1")
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "t_view"]);
    assert_eq!(field(db, "t_view", "v1", "path"), "snapshot");
    db.exec("UPDATE t SET w = w + 1 WHERE id % 3 = 0; DELETE FROM t WHERE id % 11 = 0");
    db.archive_wal();
    (walfill, archive)
}

/// Builds v2 (auto path) over a damaged base: it must fall back to a
/// snapshot (like a WAL gap), never fail or panic.
fn v2_over_damaged_base(db: &TestDb, walfill: &Walfill, archive: &str, damage: &str) {
    let select = "id, upper(v) AS v, w";
    walfill.configure(
        db,
        &format!("{archive}\n{}", target("t_view", "t", select, None, "v2")),
    );
    let plan = walfill.run(&["plan", "t_view"]);
    let out = walfill.run(&["backfill", "t_view"]);
    let err = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(101),
        "backfill panicked over {damage}:\n{err}"
    );
    assert!(
        out.status.success(),
        "backfill over {damage} failed with {} instead of taking a snapshot (plan said: {}):\n{err}",
        out.status,
        String::from_utf8_lossy(&plan.stdout)
    );
    assert_eq!(field(db, "t_view", "v2", "phase"), "active");
    assert_view_matches(db, "public.t_view", "t", select, None, "id");
}

/// c3, a truncated part. A base snapshot whose Parquet part is damaged:
/// a later backfill (auto) of a new version falls back to a snapshot and
/// the view equals the source.
#[test]
fn c3_a_truncated_base_snapshot_part_falls_back_to_a_snapshot() {
    let db = TestDb::new("c3a");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        let len = std::fs::metadata(&part).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&part).unwrap();
        file.set_len(len / 2).unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "a truncated part");
}

/// c3, a part with fewer columns than the manifest says (a valid Parquet
/// file with one column): fall back, never panic.
#[test]
fn c3_a_base_snapshot_part_with_fewer_columns_falls_back_to_a_snapshot() {
    use arrow::array::{ArrayRef, StringArray};
    use arrow::record_batch::RecordBatch;

    let db = TestDb::new("c3b");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        let ids: ArrayRef = Arc::new(StringArray::from(vec!["1", "2", "3"]));
        let batch = RecordBatch::try_from_iter([("id", ids)]).unwrap();
        let file = std::fs::File::create(&part).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "a part with one column");
}

/// The Parquet parts of the base snapshots of `t`.
fn base_parts(db: &TestDb) -> Vec<PathBuf> {
    let files = base_files(db, "t");
    let parts: Vec<PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .cloned()
        .collect();
    assert!(!parts.is_empty(), "no base snapshot parts in {files:?}");
    parts
}

/// c3, a part holding fewer rows than the manifest says (a valid Parquet
/// file with the same columns, its second half lost): the base is not
/// usable, so the backfill falls back to a snapshot; never a view missing
/// those rows.
#[test]
fn c3_a_base_snapshot_part_with_fewer_rows_than_its_manifest_falls_back() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let db = TestDb::new("c3c");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        let bytes = bytes::Bytes::from(std::fs::read(&part).unwrap());
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
        let schema = batches[0].schema();
        let file = std::fs::File::create(&part).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
        for batch in &batches {
            writer.write(&batch.slice(0, batch.num_rows() / 2)).unwrap();
        }
        writer.close().unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "parts with half their rows");
}

/// c3, a part missing from the archive: fall back to a snapshot.
#[test]
fn c3_a_missing_base_snapshot_part_falls_back_to_a_snapshot() {
    let db = TestDb::new("c3d");
    let (walfill, archive) = table_with_a_base(&db);
    for part in base_parts(&db) {
        std::fs::remove_file(&part).unwrap();
    }
    v2_over_damaged_base(&db, &walfill, &archive, "a missing part");
}
