//! What the archive can serve: a missing segment, WAL of an unknown version, an archive on S3, other server versions.

use super::*;

/// A segment missing from the archive: `plan` names it, `--path replay`
/// refuses with it, and the default path builds the version from a
/// snapshot, recording why.
#[test]
fn a_missing_segment_is_named_and_the_backfill_takes_a_snapshot() {
    let db = TestDb::new("rp_gap");
    let archive = LocalArchive::new("gap");
    let section = format!("{}wait_seconds = 2\n", archive.section());
    let walfill = Walfill::new(&db, &section);
    walfill.ok(&["setup"]);
    db.archive_wal();
    let first = db.checkpoint_segment();
    create_orders(&db, 3_000);
    db.archive_wal();
    db.exec("UPDATE orders SET status = 'paid' WHERE id % 3 = 0");
    db.archive_wal();
    db.exec("DELETE FROM orders WHERE id % 5 = 0");
    db.archive_wal();
    let last = db
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .unwrap();

    // The cluster's archived segments from the table's creation on.
    let copied = copy_server_segments(&archive, &first, &last);
    assert!(copied.len() >= 3, "segments {copied:?}");
    let target = orders_target("v1");
    walfill.configure(&db, &format!("{section}\n{target}"));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(plan.contains(": replay"), "with every segment: {plan}");

    let missing = &copied[1];
    std::fs::remove_file(archive.wal().join(missing)).unwrap();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": snapshot") && plan.contains(missing.as_str()),
        "without {missing}: {plan}"
    );
    let refused = walfill.run(&["backfill", "orders_summary", "--path", "replay"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(missing.as_str()), "{stderr}");

    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v1", "path"), "snapshot");
    assert!(version_field(&db, "v1", "path_reason").contains(missing.as_str()));
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", ORDERS_SELECT, Some(ORDERS_WHERE), "id");
}

/// WAL of a PostgreSQL version the decoder does not read (here the last
/// segment, made PostgreSQL 14's by its page magic): `plan` chooses a
/// snapshot and names the version, `--path replay` refuses, and the
/// backfill takes a snapshot.
#[test]
fn wal_of_an_unknown_version_is_named_and_the_backfill_takes_a_snapshot() {
    let db = TestDb::new("rp_version");
    let archive = LocalArchive::new("version");
    let section = format!("{}wait_seconds = 2\n", archive.section());
    let walfill = Walfill::new(&db, &section);
    walfill.ok(&["setup"]);
    db.archive_wal();
    let first = db.checkpoint_segment();
    create_orders(&db, 1_000);
    db.archive_wal();
    let last = db
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .unwrap();
    let copied = copy_server_segments(&archive, &first, &last);
    let target = orders_target("v1");
    walfill.configure(&db, &format!("{section}\n{target}"));
    walfill.ok(&["setup"]);
    assert!(walfill.ok(&["plan", "orders_summary"]).contains(": replay"));

    // Every page of the newest segment says PostgreSQL 14 (magic 0xD10D).
    let newest = archive.wal().join(copied.last().unwrap());
    let mut bytes = std::fs::read(&newest).unwrap();
    for page in bytes.chunks_mut(8192) {
        page[..2].copy_from_slice(&0xD10Du16.to_le_bytes());
    }
    std::fs::write(&newest, bytes).unwrap();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("PostgreSQL 14"),
        "{plan}"
    );
    let refused = walfill.run(&["backfill", "orders_summary", "--path", "replay"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("PostgreSQL 14"), "{stderr}");

    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v1", "path"), "snapshot");
    assert!(version_field(&db, "v1", "path_reason").contains("PostgreSQL 14"));
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", ORDERS_SELECT, Some(ORDERS_WHERE), "id");
}

/// The archive on S3, kept filled by `walfill archive`: a table created
/// meanwhile is rebuilt from it by replay.
#[test]
fn replay_from_an_archive_on_s3() {
    let db = TestDb::new("rp_s3");
    let bucket = std::env::var("WALFILL_TEST_S3_BUCKET")
        .expect("WALFILL_TEST_S3_BUCKET is not set: scripts/test.sh starts the S3 server");
    let url = format!("s3://{bucket}/replay-{}", db.name);
    let section = archive_section(&url);
    let walfill = Walfill::new(&db, &section);
    let slot = SlotGuard::named(&format!("{}_archive", db.name));
    let archiver =
        Running::new(walfill.spawn(&["archive", "--slot", &slot.name, "--flush-interval", "1"]));
    walfill.ok(&["setup"]);
    create_orders(&db, 10_000);
    let writer = Writer::start(&db, 10_000, 1_000_000, 21);
    writer.wait_for_ops(21);
    assert!(writer.stop() > 20);
    walfill.configure(&db, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v1", "path"), "replay");
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", ORDERS_SELECT, Some(ORDERS_WHERE), "id");
    let mut archiver = archiver;
    terminate(archiver.child());
    let status = archiver.take().wait().expect("wait for the archiver");
    assert!(status.success(), "walfill archive exited with {status}");
}

/// A source and a destination of different major versions (15 to 16, 17
/// to 15, 15 to 18): a version built by snapshot, then one replayed from
/// its base after writes, kept in step by sync, equal to the transform of
/// the source.
#[test]
fn a_source_and_a_destination_of_different_versions() {
    for (i, cluster) in crate::support::cluster::newer_clusters().iter().enumerate() {
        let newer = TestDb::on(&cluster.admin, &format!("rp_x{}", cluster.major));
        let fifteen = TestDb::new(&format!("rp_x15_{}", cluster.major));
        let (src, dest, archive) = if i % 2 == 0 {
            (&fifteen, &newer, archive_url())
        } else {
            (&newer, &fifteen, cluster.archive.clone())
        };
        let label = format!("source {}, destination {}", src.major(), dest.major());
        create_orders(src, 2_000);
        let archive = archive_section(&archive);
        let walfill = two_databases(src, dest, &format!("{archive}\n{}", orders_target("v1")));
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "orders_summary"]);
        assert_eq!(version_field(dest, "v1", "path"), "snapshot", "{label}");

        src.exec("UPDATE orders SET status = 'paid' WHERE id % 4 = 0; DELETE FROM orders WHERE id % 11 = 0");
        let v2 = two_databases(src, dest, &format!("{archive}\n{}", orders_target("v2")));
        v2.ok(&["setup"]);
        v2.ok(&["backfill", "orders_summary"]);
        assert_eq!(version_field(dest, "v2", "path"), "replay", "{label}");
        src.exec("INSERT INTO orders (id, customer_id, status, total_cents) VALUES (900001, 1, 'new', 5)");
        v2.ok(&["sync", "--once"]);
        let view = "derived.orders_summary";
        assert_view_matches_in(
            src,
            dest,
            view,
            "orders",
            ORDERS_SELECT,
            Some(ORDERS_WHERE),
            "id",
        );
    }
}

/// On each newer major (16, 17, 18): a version built by snapshot leaves a
/// base snapshot; after writes and a column added (on 18 also a virtual
/// generated one the transform reads), a new transform is replayed from
/// that base, and the view equals the transform of the source.
#[test]
fn snapshot_then_replay_on_newer_majors() {
    for cluster in crate::support::cluster::newer_clusters() {
        let db = TestDb::on(&cluster.admin, &format!("rp_pg{}", cluster.major));
        create_orders(&db, 3_000);
        let archive = archive_section(&cluster.archive);
        let walfill = Walfill::new(&db, &format!("{archive}\n{}", orders_target("v1")));
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "orders_summary"]);
        assert_eq!(version_field(&db, "v1", "path"), "snapshot");

        let writer = Writer::start(&db, 3_000, 1_000_000, 31);
        writer.wait_for_ops(11);
        assert!(writer.stop() > 10);
        db.exec("ALTER TABLE orders ADD COLUMN region text");
        db.exec("UPDATE orders SET region = 'apac' WHERE id % 9 = 0");
        let mut select = "id, status, total_cents, region";
        if cluster.major >= 18 {
            // A virtual generated column is not in the WAL (rows hold NULL
            // for it): the transform gets it computed from the row.
            db.exec(
                "ALTER TABLE orders ADD COLUMN doubled bigint
                     GENERATED ALWAYS AS (total_cents * 2) VIRTUAL;
                 UPDATE orders SET total_cents = total_cents + 1 WHERE id % 7 = 0",
            );
            select = "id, status, total_cents, region, doubled";
        }
        let v2 = orders_target("v2").replace(ORDERS_SELECT, select);
        walfill.configure(&db, &format!("{archive}\n{v2}"));
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "orders_summary"]);
        assert_eq!(
            version_field(&db, "v2", "path"),
            "replay",
            "PostgreSQL {}",
            cluster.major
        );
        walfill.ok(&["sync", "--once"]);
        let view = "derived.orders_summary";
        assert_view_matches(&db, view, "orders", select, Some(ORDERS_WHERE), "id");
    }
}
