//! Replay backfills: versions filled from archived WAL (from the table's
//! creation or from a base snapshot) without reading the source table.

use std::time::Duration;

use crate::archiver::{terminate, LocalArchive, Running, SlotGuard};
use crate::support::cluster::archive_url;
use crate::support::workload::{
    create_orders, orders_sql, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE,
};
use crate::support::{assert_view_matches, assert_view_matches_in, TestDb, Walfill};

/// `[archive]` pointing at the test cluster's archive.
fn archive_section(url: &str) -> String {
    format!("[archive]\nurl = \"{url}\"\nwait_seconds = 120\n")
}

fn two_databases(source: &TestDb, dest: &TestDb, rest: &str) -> Walfill {
    Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n{rest}",
        source.url(),
        dest.url()
    ))
}

/// Copies the test cluster's archived segments `first` to `last` (names)
/// into `archive`; returns their names, in order.
fn copy_server_segments(archive: &LocalArchive, first: &str, last: &str) -> Vec<String> {
    let server = archive_url().trim_start_matches("file://").to_string();
    std::fs::create_dir_all(archive.wal()).unwrap();
    let mut copied: Vec<String> = std::fs::read_dir(format!("{server}/wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 24 && n.as_str() >= first && n.as_str() <= last)
        .collect();
    copied.sort();
    for name in &copied {
        std::fs::copy(format!("{server}/wal/{name}"), archive.wal().join(name)).unwrap();
    }
    copied
}

fn version_field(db: &TestDb, version: &str, field: &str) -> String {
    db.value(&format!(
        "SELECT {field} FROM walfill.versions WHERE version = '{version}'"
    ))
    .unwrap_or_default()
}

/// A table created after `walfill setup`, so its creation is in the
/// journal: a rebuild replays it from there and never reads the table, and
/// does so again after the destination is lost.
#[test]
fn rebuild_by_replay_reads_nothing_from_the_source() {
    let src = TestDb::new("rp_src");
    let dest = TestDb::new("rp_dest");
    let archive = archive_section(&archive_url());
    // Setup before the table exists installs the journal.
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    create_orders(&src, 20_000);
    let writer = Writer::start(&src, 20_000, 1_000_000, 5);
    std::thread::sleep(Duration::from_secs(2));
    assert!(writer.stop() > 50);

    let walfill = two_databases(&src, &dest, &format!("{archive}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    src.archive_wal();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": replay") && plan.contains("creation"),
        "plan: {plan}"
    );

    // The control: a read of the table moves the counters.
    let untouched = src.table_reads("orders");
    src.value("SELECT count(*) FROM orders WHERE id > 0");
    let before = src.table_reads("orders");
    assert_ne!(untouched, before, "a read of orders was not counted");
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(
        src.table_reads("orders"),
        before,
        "the backfill read orders"
    );
    assert_eq!(version_field(&dest, "v1", "path"), "replay");
    assert_eq!(version_field(&dest, "v1", "phase"), "active");
    let view = "derived.orders_summary";
    assert_view_matches_in(
        &src,
        &dest,
        view,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );

    // The destination is lost; a new one is rebuilt from the archive alone.
    drop(dest);
    let rebuilt = TestDb::new("rp_dest2");
    let walfill = two_databases(
        &src,
        &rebuilt,
        &format!("{archive}\n{}", orders_target("v1")),
    );
    walfill.ok(&["setup"]);
    let before = src.table_reads("orders");
    walfill.ok(&["backfill", "orders_summary", "--path", "replay"]);
    assert_eq!(src.table_reads("orders"), before, "the rebuild read orders");
    assert_eq!(version_field(&rebuilt, "v1", "path"), "replay");
    let view = "derived.orders_summary";
    assert_view_matches_in(
        &src,
        &rebuilt,
        view,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
}

/// Runs `plan` for `orders_summary`, which must choose a replay from the
/// table's creation; returns each logged read of the catalog journal as
/// its `(from, end)` LSNs, in order, and the command's stderr.
fn plan_from_creation(walfill: &Walfill) -> (Vec<(String, String)>, String) {
    let out = walfill.run(&["plan", "orders_summary"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(
        plan.contains(": replay") && plan.contains("creation"),
        "plan: {plan}"
    );
    let field = |line: &str, name: &str| {
        let value = line
            .split(&format!(" {name}="))
            .nth(1)?
            .split_whitespace()
            .next()?;
        Some(value.to_string())
    };
    let reads = stderr
        .lines()
        .filter(|l| l.contains("read the catalog journal"))
        .filter_map(|l| Some((field(l, "from")?, field(l, "end")?)))
        .collect::<Vec<_>>();
    assert!(!reads.is_empty(), "no read of the journal logged: {stderr}");
    (reads, stderr)
}

/// The search for a table's creation starts where the catalog journal first
/// described the table, not at the end of the archive, so a table created
/// a few segments back is found by reading the journal from there.
#[test]
fn the_search_for_a_creation_starts_where_the_journal_first_described_the_table() {
    let db = TestDb::new("rp_hint");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    create_orders(&db, 2_000);
    let created = db.value("SELECT pg_current_wal_lsn()::text").unwrap();
    // More WAL after the creation, in segments of its own.
    for _ in 0..3 {
        db.exec("UPDATE orders SET note = coalesce(note, '') || '.' WHERE id % 10 = 0");
        db.archive_wal();
    }
    walfill.configure(&db, &format!("{archive}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    let (reads, stderr) = plan_from_creation(&walfill);
    let first_from = &reads[0].0;
    assert_eq!(
        db.value(&format!(
            "SELECT '{first_from}'::pg_lsn <= '{created}'::pg_lsn"
        ))
        .as_deref(),
        Some("true"),
        "the first read of the journal started at {first_from}, after the table's \
         creation (before {created}): {stderr}"
    );
}

/// When the creating transaction took its xid segments before it created
/// the table, the restart point before it is found by reading back from the
/// journal's first description of the table, stretch by stretch; the scan
/// of everything that follows runs once, and the replay is exact.
#[test]
fn a_creation_whose_transaction_began_segments_earlier_is_scanned_once() {
    let db = TestDb::new("rp_probe");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    // A checkpoint logs the running transactions: a restart point from
    // before the creating transaction's xid.
    db.exec("CHECKPOINT");
    let mut creator = db.client();
    creator
        .batch_execute("BEGIN; SELECT txid_current()")
        .unwrap();
    db.exec("CREATE TABLE filler (x int)");
    for _ in 0..6 {
        db.exec("INSERT INTO filler SELECT generate_series(1, 100)");
        db.archive_wal();
    }
    creator
        .batch_execute(&format!("{}; COMMIT", orders_sql(3_000)))
        .unwrap();
    db.exec("UPDATE orders SET note = coalesce(note, '') || '.' WHERE id % 7 = 0");
    db.archive_wal();
    walfill.configure(&db, &format!("{archive}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    // The probes end at the table's first description, the one full scan
    // at the archive's end.
    let (reads, stderr) = plan_from_creation(&walfill);
    let last = &reads[reads.len() - 1].1;
    let full = reads.iter().filter(|(_, end)| end == last).count();
    assert_eq!(
        full, 1,
        "the archive was scanned to its end {full} times: {stderr}"
    );

    walfill.ok(&["backfill", "orders_summary", "--path", "replay"]);
    assert_eq!(version_field(&db, "v1", "path"), "replay");
    assert_view_matches(
        &db,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
}

/// A table older than the journal is built by snapshot, which leaves a base
/// snapshot in the archive; a new transform is then replayed from that base
/// while writes go on, TOASTed values left unchanged by updates included.
#[test]
fn a_new_transform_replays_from_the_base_snapshot_while_writes_continue() {
    let db = TestDb::new("rp_base");
    create_orders(&db, 20_000);
    // Large, incompressible notes are stored out of line; the writer's
    // updates leave them unchanged.
    db.exec(
        "UPDATE orders SET note = (SELECT string_agg(md5(id::text || g::text), '')
                                     FROM generate_series(1, 120) g)
          WHERE id % 40 = 1",
    );
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &format!("{archive}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(plan.contains(": snapshot"), "plan: {plan}");
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v1", "path"), "snapshot");

    let select = "id, status, length(note) AS note_length, md5(note) AS note_md5, total_cents";
    let v2 = orders_target("v2").replace(ORDERS_SELECT, select);
    walfill.configure(&db, &format!("{archive}\n{v2}"));
    db.archive_wal();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": replay") && plan.contains("base snapshot of 20000 rows"),
        "plan: {plan}"
    );

    let writer = Writer::start(&db, 20_000, 1_000_000, 9);
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    db.wait_for(
        "SELECT phase <> 'planned' FROM walfill.versions WHERE version = 'v2'",
        Duration::from_secs(60),
        "the replay to start",
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(writer.stop() > 50);
    walfill.wait_ok(backfill, Duration::from_secs(180));

    assert_eq!(version_field(&db, "v2", "path"), "replay");
    assert_eq!(version_field(&db, "v2", "replay_base->>'kind'"), "snapshot");
    assert_eq!(version_field(&db, "v2", "phase"), "active");
    // The swap happens once the version is within `swap_max_lag_bytes` of
    // the source, so the writer's last transactions may still be on their
    // way; `sync --once` applies everything committed by now.
    walfill.ok(&["sync", "--once"]);
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", select, Some(ORDERS_WHERE), "id");
}

/// Columns added and dropped, the table renamed and truncated between its
/// creation and the backfill: the replay follows each change. A later rewrite that
/// converts a column's values makes replay wrong for transforms reading
/// that column only, and those are built from a snapshot.
#[test]
fn schema_changes_in_the_replayed_range() {
    let db = TestDb::new("rp_ddl");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    create_orders(&db, 5_000);
    db.exec(
        "UPDATE orders SET status = 'paid' WHERE id % 7 = 0;
         ALTER TABLE orders ADD COLUMN region text;
         INSERT INTO orders SELECT g, 1, 'open', g, NULL, 'us' FROM generate_series(5001, 6000) g;
         UPDATE orders SET region = 'apac' WHERE id % 11 = 0;
         ALTER TABLE orders ADD COLUMN flagged boolean DEFAULT true;
         ALTER TABLE orders RENAME TO orders_old;
         DELETE FROM orders_old WHERE id % 17 = 0;
         UPDATE orders_old SET total_cents = total_cents + 1 WHERE id % 13 = 0;
         ALTER TABLE orders_old RENAME TO orders;
         ALTER TABLE orders DROP COLUMN customer_id;
         INSERT INTO orders (id, status, total_cents, note, region)
              SELECT g, 'open', g / 3, 'late', 'latam' FROM generate_series(6001, 6500) g;
         UPDATE orders SET note = 'edited' WHERE id % 19 = 0;
         TRUNCATE orders;
         INSERT INTO orders (id, status, total_cents, note, region)
              SELECT g, 'open', g, 'after truncate', 'emea' FROM generate_series(1, 3000) g;
         UPDATE orders SET status = 'test' WHERE id % 23 = 0;",
    );
    let select = "id, upper(status) AS status, total_cents, note, region";
    let with_select = |version: &str, select: &str| {
        let target = orders_target(version).replace(ORDERS_SELECT, select);
        format!("{archive}\n{target}")
    };
    walfill.configure(&db, &with_select("v1", select));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v1", "path"), "replay");
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", select, Some(ORDERS_WHERE), "id");

    // A rewrite with converted values, then a transform that reads the
    // column added with a default: both need a snapshot.
    db.exec(
        "ALTER TABLE orders ALTER COLUMN total_cents TYPE numeric(20, 2) USING total_cents * 1.5",
    );
    db.archive_wal();
    walfill.configure(&db, &with_select("v2", "id, status, total_cents"));
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("column total_cents changed type"),
        "plan: {plan}"
    );
    walfill.configure(&db, &with_select("v2", "id, status, flagged"));
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("column flagged was added with a default"),
        "plan: {plan}"
    );
    walfill.configure(&db, &with_select("v2", "id, status, note"));
    let plan = walfill.ok(&["plan", "orders_summary"]);
    assert!(plan.contains(": replay"), "plan: {plan}");

    let select = "id, status, total_cents, flagged";
    walfill.configure(&db, &with_select("v2", select));
    walfill.ok(&["backfill", "orders_summary"]);
    assert_eq!(version_field(&db, "v2", "path"), "snapshot");
    assert_view_matches(&db, view, "orders", select, Some(ORDERS_WHERE), "id");
}

/// A column of a type walfill cannot decode decides the path only when the
/// transform reads it.
#[test]
fn an_undecodable_column_matters_only_when_the_transform_reads_it() {
    let db = TestDb::new("rp_types");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE places (id int PRIMARY KEY, pos regclass, name text);
         INSERT INTO places SELECT g, 'pg_class', 'place ' || g FROM generate_series(1, 500) g;
         UPDATE places SET name = 'renamed' WHERE id % 5 = 0;",
    );
    let target = |select: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"places_v\"\nsource = \"public.places\"\n\
             select = \"{select}\"\nversion = \"v1\"\n"
        )
    };
    walfill.configure(&db, &target("id, pos::text AS pos"));
    walfill.ok(&["setup"]);
    db.archive_wal();
    let plan = walfill.ok(&["plan", "places_v"]);
    assert!(
        plan.contains(": snapshot") && plan.contains("public.places.pos has type regclass"),
        "plan: {plan}"
    );

    walfill.configure(&db, &target("id, upper(name) AS name"));
    let plan = walfill.ok(&["plan", "places_v"]);
    assert!(plan.contains(": replay"), "plan: {plan}");
    // A base is every column's rows: none can be kept of this table.
    assert!(
        plan.contains("no base snapshot can be kept of public.places: column public.places.pos has type regclass"),
        "plan: {plan}"
    );
    let out = walfill.run(&["backfill", "places_v"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // Its rows lack a column it could not decode: no base of the table.
    assert!(
        log.contains("no base snapshot can be kept of public.places")
            && log.contains("has type regclass")
            && !log.contains("base snapshot written"),
        "{log}"
    );
    assert_eq!(version_field(&db, "v1", "path"), "replay");
    assert_view_matches(
        &db,
        "public.places_v",
        "places",
        "id, upper(name) AS name",
        None,
        "id",
    );
    // Nor does a copy in the exported snapshot, which leaves one of other
    // tables.
    walfill.configure(
        &db,
        &format!(
            "{}\n[backfill]\nsnapshot = \"exported\"\n",
            target("id, upper(name) AS name").replace("\"v1\"", "\"v2\"")
        ),
    );
    let out = walfill.run(&["backfill", "places_v", "--path", "snapshot"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("no base snapshot can be kept of public.places")
            && !log.contains("base snapshot written"),
        "{log}"
    );
}

/// `kill -9` while replaying, once while the WAL is decoded (nothing is
/// stored then) and once while the merged rows are loaded: each rerun keeps
/// the slot, the second goes on after the last key stored, and the version
/// ends exact. The fold's memory bound (1 MiB) makes it spill to disk.
#[test]
fn kill_mid_replay_then_rerun() {
    let db = TestDb::new("rp_kill");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    create_orders(&db, 0);
    db.exec(
        "DO $$ BEGIN FOR i IN 0..399 LOOP
             INSERT INTO orders SELECT g, g % 97, 'open', g, 'n' || g
               FROM generate_series(i * 500 + 1, i * 500 + 500) g;
             UPDATE orders SET total_cents = total_cents + 1 WHERE id % 400 = i;
             COMMIT;
         END LOOP; END $$;",
    );
    let settings = "[backfill]\nchunk_rows = 500\nreplay_memory_mb = 1\n";
    walfill.configure(
        &db,
        &format!("{archive}\n{settings}\n{}", orders_target("v1")),
    );
    walfill.ok(&["setup"]);
    let args = ["backfill", "orders_summary", "--no-swap"];
    // Killed after its third run is on disk: nothing is stored yet.
    let killed = walfill.run_env(&args, &[("WALFILL_FAILPOINTS", "replay.spilled@3")]);
    assert!(!killed.status.success());
    assert_eq!(version_field(&db, "v1", "phase"), "replaying");
    assert_eq!(version_field(&db, "v1", "load_cursor IS NULL"), "true");
    // Killed after the 40th batch it stored (a few record how far it
    // decoded; the rest are rows, 500 a batch).
    let killed = walfill.run_env(&args, &[("WALFILL_FAILPOINTS", "replay.batch@40")]);
    assert!(!killed.status.success());
    assert_eq!(version_field(&db, "v1", "phase"), "replaying");
    assert_eq!(version_field(&db, "v1", "load_cursor IS NOT NULL"), "true");
    let stored: i64 = version_field(
        &db,
        "v1",
        "(SELECT count(*) FROM derived.orders_summary__v1)",
    )
    .parse()
    .unwrap();
    assert!(stored > 0, "nothing was stored before the kill");
    assert_eq!(
        version_field(&db, "v1", "rows_copied"),
        stored.to_string(),
        "the rows counted are the rows stored"
    );
    // Rows stored by the killed run carry destination transaction ids below
    // this one; a rerun that started over would have replaced them all.
    let rerun_from: i64 = db.value("SELECT txid_current()").unwrap().parse().unwrap();

    walfill.ok(&["backfill", "orders_summary"]);
    let kept: i64 = db
        .value(&format!(
            "SELECT count(*) FROM derived.orders_summary__v1 WHERE xmin::text::bigint < {rerun_from}"
        ))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        kept > 0,
        "the rerun replaced every row the killed run stored ({stored}) instead of resuming"
    );
    let resumed = db
        .value(
            "SELECT detail->>'phase' FROM walfill.events WHERE kind = 'backfill_started'
              ORDER BY id DESC LIMIT 1",
        )
        .unwrap();
    assert_eq!(resumed, "replaying", "the rerun resumed the replay");
    let boundaries = db
        .value("SELECT count(*) FROM walfill.events WHERE kind = 'boundary'")
        .unwrap();
    assert_eq!(boundaries, "1", "the reruns kept the slot and its boundary");
    assert_eq!(version_field(&db, "v1", "path"), "replay");
    let spilled = db
        .value(
            "SELECT count(*) FROM walfill.events WHERE kind = 'filled'
                AND (detail->>'spilled_runs')::int > 1",
        )
        .unwrap();
    assert_eq!(spilled, "1", "the fold spilled sorted runs to disk");
    let view = "derived.orders_summary";
    assert_view_matches(&db, view, "orders", ORDERS_SELECT, Some(ORDERS_WHERE), "id");
}

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
    std::thread::sleep(Duration::from_secs(2));
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
        std::thread::sleep(Duration::from_millis(700));
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

/// A fresh fill stores each source row once, whether the filter takes it
/// or not: a row it takes transformed, with the source values the plan
/// keeps beside it; a row it rejects as a tombstone, its key and those
/// values and nothing else. The same from a snapshot (filtered chunks) and
/// from a replay (merged batches), which both store each batch in one
/// pass over the work table; except that a replay leaves out the
/// tombstones whose kept values are all too short to be stored out of
/// line (20 bytes or less), which nothing needs.
#[test]
fn a_fresh_fill_stores_each_row_once_as_a_row_or_a_tombstone() {
    let db = TestDb::new("rp_once");
    let archive = archive_section(&archive_url());
    let walfill = Walfill::new(&db, &archive);
    walfill.ok(&["setup"]);
    db.exec(
        "CREATE TABLE items (id int PRIMARY KEY, kind text NOT NULL, n int, note text);
         INSERT INTO items
         SELECT g, CASE WHEN g % 3 = 0 THEN 'skip' ELSE 'keep' END, g,
                CASE WHEN g % 7 = 0 THEN NULL
                     WHEN g % 4 = 0 THEN 'a note long enough to keep ' || g
                     ELSE 'note ' || g END
           FROM generate_series(1, 3000) g;
         UPDATE items SET kind = 'skip' WHERE id % 5 = 0;
         UPDATE items SET kind = 'keep', note = 'back' WHERE id % 9 = 0;
         DELETE FROM items WHERE id % 11 = 0;",
    );
    let select = "id, n * 2 AS doubled, upper(note) AS loud";
    let filter = "kind <> 'skip'";
    let long_note = "octet_length(note) > 20";
    for (version, path, kept) in [
        ("snap", "snapshot", "true".to_string()),
        ("rep", "replay", format!("(kind <> 'skip' OR {long_note})")),
    ] {
        walfill.configure(
            &db,
            &format!(
                "{archive}\n[backfill]\nchunk_rows = 400\n\n[[target]]\nname = \"items_out\"\n\
                 source = \"items\"\nselect = \"{select}\"\nwhere = \"{filter}\"\n\
                 version = \"{version}\"\n"
            ),
        );
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "items_out", "--no-swap", "--path", path]);
        assert_eq!(version_field(&db, version, "path"), path);
        let table = format!("public.items_out__{version}");
        let counts = |sql: &str| db.value(sql).unwrap();
        assert_eq!(
            counts(&format!(
                "SELECT count(*) FILTER (WHERE NOT _walfill_deleted) || ' rows, ' || \
                        count(*) FILTER (WHERE _walfill_deleted) || ' tombstones' FROM {table}"
            )),
            counts(&format!(
                "SELECT count(*) FILTER (WHERE kind <> 'skip') || ' rows, ' || \
                        count(*) FILTER (WHERE kind = 'skip' AND {kept}) || ' tombstones' FROM items"
            )),
            "{path}: one stored row per source row"
        );
        let wrong = counts(&format!(
            "SELECT count(*) FROM (SELECT * FROM items WHERE {kept}) AS i FULL JOIN {table} AS t USING (id)
              WHERE t.id IS NULL OR i.id IS NULL
                 OR t._walfill_deleted IS DISTINCT FROM (i.kind = 'skip')
                 OR t._walfill_src_kind IS DISTINCT FROM i.kind
                 OR t._walfill_src_note IS DISTINCT FROM i.note
                 OR (t._walfill_deleted AND (t.doubled IS NOT NULL OR t.loud IS NOT NULL))
                 OR (NOT t._walfill_deleted AND (t.doubled IS DISTINCT FROM i.n * 2
                                                 OR t.loud IS DISTINCT FROM upper(i.note)))"
        ));
        assert_eq!(wrong, "0", "{path}: stored rows that are not the source's");
    }
}

/// A replay leaves a base snapshot of the table's rows at its boundary,
/// every column included (not only those its transform reads); the next
/// version, reading another column, replays from that base instead of the
/// table's creation, without reading the source.
#[test]
fn a_replay_leaves_a_base_the_next_version_replays_from() {
    let src = TestDb::new("rp_leaves_src");
    let dest = TestDb::new("rp_leaves_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;
         UPDATE items SET b = 'changed ' || id WHERE id % 7 = 0;
         DELETE FROM items WHERE id % 11 = 0;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a * 2 AS a2", "v1"));
    walfill.ok(&["setup"]);
    src.archive_wal();
    let out = walfill.run(&["backfill", "items_v", "--path", "replay"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("base snapshot written"), "{log}");
    assert_eq!(
        version_field(&dest, "v1", "replay_base->>'kind'"),
        "creation"
    );

    src.exec(
        "UPDATE items SET b = 'later ' || id, a = a + 1 WHERE id % 5 = 0;
         DELETE FROM items WHERE id % 13 = 0;
         INSERT INTO items SELECT g, g, 'new' FROM generate_series(3001, 3100) g;",
    );
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains("from the base snapshot of"), "{plan}");
    let before = src.table_reads("items");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(src.table_reads("items"), before, "the replay read items");
    assert_eq!(
        version_field(&dest, "v2", "replay_base->>'kind'"),
        "snapshot"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// `walfill compact` rolls the newest base forward with the archived WAL,
/// reading no source row and creating no slot; the next version replays
/// from the compacted base (not the old one) and equals the transform.
#[test]
fn compaction_rolls_a_base_forward_from_the_archive_alone() {
    let src = TestDb::new("rp_compact_src");
    let dest = TestDb::new("rp_compact_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 4000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let first_base = version_field(&dest, "v1", "boundary_lsn::text");

    src.exec(
        "UPDATE items SET b = 'later ' || id, a = a * 3 WHERE id % 4 = 0;
         DELETE FROM items WHERE id % 9 = 0;
         INSERT INTO items SELECT g, g, 'new' FROM generate_series(4001, 4500) g;",
    );
    src.archive_wal();
    src.exec("UPDATE items SET b = 'last' WHERE id % 10 = 1");
    src.archive_wal();

    let reads = src.table_reads("items");
    // (Slots of this database: the tests beside this one make their own.)
    let slots_here =
        "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()";
    let slots = src.value(slots_here);
    // The summary of a segment the archive no longer holds (segment 0 of
    // timeline 1 never is) is retired by the compaction.
    let summaries =
        std::path::PathBuf::from(archive_url().trim_start_matches("file://")).join("summary");
    std::fs::create_dir_all(&summaries).unwrap();
    let expired = summaries.join("000000010000000000000000");
    std::fs::write(&expired, b"an expired segment's summary").unwrap();
    let out = walfill.ok(&["compact"]);
    assert!(out.contains("public.items: a new base at"), "{out}");
    assert!(
        !expired.exists(),
        "the expired segment's summary is still there"
    );
    assert!(
        std::fs::read_dir(&summaries).unwrap().count() > 0,
        "the summaries of archived segments went too"
    );
    assert_eq!(src.table_reads("items"), reads, "compaction read items");
    assert_eq!(src.value(slots_here), slots, "compaction created a slot");
    let boundary_in = |out: &str| -> Option<String> {
        out.split("a new base at ")
            .nth(1)
            .and_then(|rest| rest.split(':').next())
            .map(str::to_string)
    };
    let mut compacted = boundary_in(&out).unwrap();

    // Again: nothing newer in the archive, or (other databases of the
    // cluster write WAL too) a newer base.
    let again = walfill.ok(&["compact"]);
    match boundary_in(&again) {
        Some(newer) => compacted = newer,
        None => assert!(again.contains("as recent as the archive"), "{again}"),
    }

    src.exec("UPDATE items SET a = -a WHERE id % 6 = 0");
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    let before = src.table_reads("items");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(src.table_reads("items"), before, "the replay read items");
    assert_eq!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        compacted,
        "replayed from the compacted base (the first was at {first_base})"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// `walfill serve` compacts on its own once the archived WAL since a
/// table's newest base passes `[compact] after_wal_mb`, records a
/// `compacted` event, and keeps only `[archive] keep_bases` bases; a replay
/// from the compacted base equals the transform.
#[test]
fn serve_compacts_a_base_once_the_wal_since_passes_the_limit() {
    use crate::support::service::{wait_for, Service};
    let src = TestDb::new("rp_autocompact_src");
    let dest = TestDb::new("rp_autocompact_dest");
    let archive = format!(
        "{}keep_bases = 1\n\n[compact]\nafter_wal_mb = 1\ncheck_seconds = 1\n\n\
         [serve]\npoll_seconds = 1\nlease_seconds = 3\narchiver = false\n",
        archive_section(&archive_url())
    );
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    // More than a MiB of WAL after the base.
    src.exec(
        "UPDATE items SET b = repeat('x', 200) || id;
         UPDATE items SET a = a + 1 WHERE id % 3 = 0;
         DELETE FROM items WHERE id % 8 = 0;",
    );
    src.archive_wal();
    src.archive_wal();
    let mut service = Service::start(&walfill, false, &[]);
    wait_for(
        &dest,
        "SELECT EXISTS (SELECT FROM walfill.events WHERE kind = 'compacted')",
        Duration::from_secs(90),
        "a compaction",
        &[&service],
    );
    service.stop(Duration::from_secs(30));
    // One base left under the table's folder: the compacted one.
    let (database, relid) = (
        src.value("SELECT oid FROM pg_database WHERE datname = current_database()")
            .unwrap(),
        src.value("SELECT 'items'::regclass::oid").unwrap(),
    );
    let dir = std::path::PathBuf::from(archive_url().trim_start_matches("file://"))
        .join("base")
        .join(&database)
        .join(&relid);
    let manifests: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("manifest.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(manifests.len(), 1, "{manifests:?} in {}", dir.display());
    let first = version_field(&dest, "v1", "boundary_lsn::text");
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        first,
        "replayed from the first base, not the compacted one"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// `[compact] schedule` compacts on its own whatever the WAL's size (the
/// size trigger is off here): at the first due time after the service
/// started, with a `compacted` event that says why.
#[test]
fn serve_compacts_on_the_compact_schedule() {
    use crate::support::service::{wait_for, Service};
    let src = TestDb::new("rp_compactsched_src");
    let dest = TestDb::new("rp_compactsched_dest");
    let settings = format!(
        "{}\n[compact]\nafter_wal_mb = 0\nschedule = \"* * * * *\"\ncheck_seconds = 1\n\n\
         [serve]\npoll_seconds = 1\nlease_seconds = 3\narchiver = false\n",
        archive_section(&archive_url())
    );
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 3000) g;",
    );
    let walfill = two_databases(
        &src,
        &dest,
        &format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a\"\nversion = \"v1\"\n"
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    // A MiB of WAL after the base, and a running-transactions record
    // (a checkpoint's) before the segment the new base begins.
    src.exec("UPDATE items SET a = a + 1; UPDATE items SET a = a + 1; CHECKPOINT;");
    src.archive_wal();
    src.exec("UPDATE items SET a = a WHERE id = 1");
    src.archive_wal();
    let mut service = Service::start(&walfill, false, &[]);
    // The minute the service starts in is remembered, the next one runs.
    wait_for(
        &dest,
        "SELECT EXISTS (SELECT FROM walfill.events
                         WHERE kind = 'compacted' AND detail->>'why' = 'schedule')",
        Duration::from_secs(150),
        "a scheduled compaction",
        &[&service],
    );
    service.stop(Duration::from_secs(30));
    let walfill = two_databases(
        &src,
        &dest,
        &format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a * 3 AS a3\"\nversion = \"v2\"\n"
        ),
    );
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        version_field(&dest, "v1", "boundary_lsn::text"),
        "replayed from the first base, not the compacted one"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, a * 3 AS a3",
        None,
        "id",
    );
}

/// A compaction killed (as by `kill -9`) when it starts, after writing a
/// part, and before its manifest leaves the old base usable: the table
/// replays from it meanwhile, and the rerun writes the new base, from
/// which the next version replays exactly.
#[test]
fn a_killed_compaction_leaves_the_old_base_and_a_rerun_finishes() {
    let src = TestDb::new("rp_compact_kill_src");
    let dest = TestDb::new("rp_compact_kill_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let first = version_field(&dest, "v1", "boundary_lsn::text");
    let writer = std::thread::spawn({
        let url = src.url();
        move || {
            let mut client = crate::support::cluster::connect(&url);
            for i in 0..40 {
                client
                    .batch_execute(&format!(
                        "UPDATE items SET a = a + 1, b = 'w{i}' WHERE id % 40 = {i};
                         DELETE FROM items WHERE id = {};
                         INSERT INTO items VALUES ({}, {i}, 'new');",
                        i * 7 + 1,
                        5000 + i
                    ))
                    .unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    for point in ["compact.start", "base.part_written", "base.before_manifest"] {
        // The newest complete segment begins after the base.
        src.archive_wal();
        src.exec("UPDATE items SET a = a WHERE id = 2");
        src.archive_wal();
        let out = walfill.run_env(&["compact"], &[("WALFILL_FAILPOINTS", point)]);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{point}: not killed\n{log}{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(log.contains(&format!("failpoint {point} reached")), "{log}");
        // The old base is still the newest usable one.
        let plan = two_databases(&src, &dest, &target("id, b", "probe")).ok(&["plan", "items_v"]);
        assert!(
            plan.contains(&format!("consistent at {first}")),
            "{point}: {plan}"
        );
    }
    writer.join().unwrap();
    src.archive_wal();
    let out = walfill.ok(&["compact"]);
    assert!(out.contains("a new base at"), "{out}");
    src.exec("UPDATE items SET b = 'after' WHERE id % 11 = 0");
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        first
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// A base snapshot part that was damaged (truncated) never gives a wrong
/// row: the replay from that base stops, says which part, and the backfill
/// builds the version from a snapshot instead.
#[test]
fn a_damaged_base_part_makes_the_backfill_take_a_snapshot() {
    let src = TestDb::new("rp_bad_base_src");
    let dest = TestDb::new("rp_bad_base_dest");
    let archive = archive_section(&archive_url());
    two_databases(&src, &dest, &archive).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{archive}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    src.exec("UPDATE items SET b = 'later' WHERE id % 3 = 0");
    src.archive_wal();
    // Truncate the base's part.
    let (database, relid) = (
        src.value("SELECT oid FROM pg_database WHERE datname = current_database()")
            .unwrap(),
        src.value("SELECT 'items'::regclass::oid").unwrap(),
    );
    let dir = std::path::PathBuf::from(archive_url().trim_start_matches("file://"))
        .join("base")
        .join(&database)
        .join(&relid);
    let mut damaged = 0;
    for base in std::fs::read_dir(&dir).unwrap().flatten() {
        for part in std::fs::read_dir(base.path()).unwrap().flatten() {
            let path = part.path();
            if path.extension().is_some_and(|e| e == "parquet") {
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0, "no part under {}", dir.display());
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    let out = walfill.run(&["backfill", "items_v"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("cannot replay; building the version from a snapshot instead")
            && log.contains("base snapshot"),
        "{log}"
    );
    assert_eq!(version_field(&dest, "v2", "path"), "snapshot");
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}

/// The planner weighs both paths: a small table with more WAL since its
/// creation than a replay is worth takes a snapshot (`plan` shows both
/// estimates and the rule), and once a compaction leaves a recent base the
/// same table replays from it, exactly.
#[test]
fn the_planner_weighs_both_paths_and_a_compaction_makes_replay_cheap_again() {
    let src = TestDb::new("rp_cost_src");
    let dest = TestDb::new("rp_cost_dest");
    let settings = format!(
        "{}\n[backfill]\nreplay_max_slowdown = 400\nsnapshot = \"exported\"\n",
        archive_section(&archive_url())
    );
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 2000) g;
         ANALYZE items;",
    );
    // About 250 MiB of WAL after the table's creation (another table's,
    // whatever the segment size): over 6 s of decoding at the default
    // rate, for 2000 rows a snapshot copies in 0.01 s. (The limit of 400
    // times, 4 s here, leaves room for the WAL the tests running beside
    // this one write into the same cluster.)
    let more_wal = || {
        src.exec(
            "CREATE TABLE IF NOT EXISTS filler (g int, t text);
             INSERT INTO filler SELECT g, repeat(md5(g::text), 30)
               FROM generate_series(1, 230000) g;
             TRUNCATE filler;",
        );
        src.archive_wal();
    };
    more_wal();
    let target = |version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a * 2 AS a2\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("v1"));
    walfill.ok(&["setup"]);
    let plan: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "snapshot", "{plan:#}");
    let estimates = &plan["estimates"];
    let (replay, snapshot) = (
        estimates["replay_seconds"].as_f64().unwrap(),
        estimates["snapshot_seconds"].as_f64().unwrap(),
    );
    assert!(replay > 400.0 * snapshot, "{plan:#}");
    assert!(
        plan["reason"]
            .as_str()
            .unwrap()
            .starts_with("snapshot: a replay would decode"),
        "{plan:#}"
    );
    let text = walfill.ok(&["plan", "items_v"]);
    assert!(
        text.contains("estimates: replay") && text.contains("rule: snapshot: "),
        "{text}"
    );
    // The operator who must spare the source raises the limit: a replay.
    let spare = two_databases(
        &src,
        &dest,
        &target("v1").replace("replay_max_slowdown = 400", "replay_max_slowdown = 100000"),
    );
    let plan: serde_json::Value =
        serde_json::from_str(&spare.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "replay", "{plan:#}");
    // The snapshot it takes leaves a base; more WAL makes it old.
    walfill.ok(&["backfill", "items_v"]);
    assert_eq!(version_field(&dest, "v1", "path"), "snapshot");
    more_wal();
    let plan: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "snapshot", "{plan:#}");
    let uncompacted = plan["estimates"]["replay_wal_bytes"].as_i64().unwrap();
    // A compaction rolls the base forward: replay again, from it.
    // (A checkpoint logs the running transactions, as the background
    // writer does every 15 s on a busy cluster: the new base's restart
    // point. This test writes its WAL faster than that.)
    src.exec(
        "UPDATE items SET a = a + 1 WHERE id % 10 = 0; DELETE FROM items WHERE id = 7;
         CHECKPOINT;",
    );
    src.archive_wal();
    // The new base's boundary: the start of the newest complete segment.
    src.exec("UPDATE items SET a = a WHERE id = 2");
    src.archive_wal();
    walfill.ok(&["compact"]);
    let walfill = two_databases(&src, &dest, &target("v2"));
    let plan: serde_json::Value =
        serde_json::from_str(&walfill.ok(&["plan", "items_v", "--json"])).unwrap();
    assert_eq!(plan["path"], "replay", "{plan:#}");
    assert!(
        plan["estimates"]["replay_base_rows"].as_u64().unwrap() >= 1999,
        "{plan:#}"
    );
    let restart = plan["start"]["manifest"]["restart_lsn"]
        .as_str()
        .unwrap()
        .to_string();
    walfill.ok(&["backfill", "items_v"]);
    assert_eq!(version_field(&dest, "v2", "path"), "replay");
    assert_eq!(
        version_field(&dest, "v2", "replay_base->>'kind'"),
        "snapshot"
    );
    // It read no segment older than the compacted base's restart point:
    // the `filled` event and `status` say what it read.
    let first = dest
        .value(
            "SELECT detail->>'first_segment_lsn' FROM walfill.events
              WHERE kind = 'filled' AND version = 'v2'",
        )
        .expect("a filled event");
    let newer = src
        .value(&format!(
            "SELECT ('{first}'::pg_lsn - '0/0') >= ('{restart}'::pg_lsn - '0/0')
                    - (('{restart}'::pg_lsn - '0/0')
                       % pg_size_bytes(current_setting('wal_segment_size')))"
        ))
        .unwrap();
    assert_eq!(
        newer, "true",
        "the replay read from {first}, before the base's {restart}"
    );
    let segments: i64 = version_field(&dest, "v2", "segments_read").parse().unwrap();
    let read: i64 = version_field(&dest, "v2", "wal_read_bytes")
        .parse()
        .unwrap();
    assert!(
        segments >= 1 && read < uncompacted,
        "{segments} segments, {read} bytes read (the old base needed {uncompacted})"
    );
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains(&format!("from {segments} segments")),
        "{status}"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, a * 2 AS a2",
        None,
        "id",
    );
}

/// A base follows its table by OID: renamed (and moved to another schema)
/// after its base was taken, the table replays from that base under its new
/// name, exactly.
#[test]
fn a_base_follows_its_table_across_a_rename() {
    let src = TestDb::new("rp_base_rename_src");
    let dest = TestDb::new("rp_base_rename_dest");
    let settings = archive_section(&archive_url());
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 2000) g;",
    );
    let target = |source: &str, version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"{source}\"\n\
             select = \"id, a + 1 AS a1, b\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("public.items", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let boundary = version_field(&dest, "v1", "boundary_lsn::text");
    src.exec(
        "CREATE SCHEMA shop;
         ALTER TABLE items RENAME TO goods;
         ALTER TABLE goods SET SCHEMA shop;
         UPDATE shop.goods SET a = a * 2 WHERE id % 7 = 0;
         DELETE FROM shop.goods WHERE id % 11 = 0;
         INSERT INTO shop.goods VALUES (5000, 1, 'new');",
    );
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("shop.goods", "v2"));
    let before = src.table_reads("shop.goods");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(
        src.table_reads("shop.goods"),
        before,
        "the replay read the table"
    );
    assert_eq!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        boundary,
        "not replayed from the base taken before the rename"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "shop.goods",
        "id, a + 1 AS a1, b",
        None,
        "id",
    );
}

/// `ADD COLUMN ... DEFAULT` writes no row changes, so no replay from before
/// it can know the column's values: the next version is copied. The base
/// that copy leaves makes the table replayable again, from it.
#[test]
fn a_base_after_a_blocking_change_makes_the_table_replayable_again() {
    let src = TestDb::new("rp_base_unblock_src");
    let dest = TestDb::new("rp_base_unblock_dest");
    let settings = archive_section(&archive_url());
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int);
         INSERT INTO items SELECT g, g FROM generate_series(1, 2000) g;
         ALTER TABLE items ADD COLUMN c int DEFAULT 5;
         UPDATE items SET a = a + 1 WHERE id % 3 = 0;",
    );
    src.archive_wal();
    let target = |version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"id, a, c\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("v1"));
    walfill.ok(&["setup"]);
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains(": snapshot"), "{plan}");
    walfill.ok(&["backfill", "items_v"]);
    assert_eq!(version_field(&dest, "v1", "path"), "snapshot");
    src.exec(
        "UPDATE items SET c = c + id WHERE id % 5 = 0;
         DELETE FROM items WHERE id % 13 = 0;
         INSERT INTO items VALUES (9000, 1, 2);",
    );
    src.archive_wal();
    let walfill = two_databases(&src, &dest, &target("v2"));
    let plan = walfill.ok(&["plan", "items_v"]);
    assert!(plan.contains(": replay"), "{plan}");
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_eq!(
        version_field(&dest, "v2", "replay_base->>'kind'"),
        "snapshot"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, a, c",
        None,
        "id",
    );
}

/// Compaction reads the archive alone: with the source unreachable it
/// still rolls the base forward (the cluster's identity comes from the
/// base's manifest and the archive), and the next version replays from the
/// new base exactly.
#[test]
fn compaction_runs_while_the_source_is_unreachable() {
    let src = TestDb::new("rp_compact_nosrc_src");
    let dest = TestDb::new("rp_compact_nosrc_dest");
    let settings = archive_section(&archive_url());
    two_databases(&src, &dest, &settings).ok(&["setup"]);
    src.exec(
        "CREATE TABLE items (id int PRIMARY KEY, a int, b text);
         INSERT INTO items SELECT g, g, 'b' || g FROM generate_series(1, 3000) g;",
    );
    let target = |select: &str, version: &str| {
        format!(
            "{settings}\n[[target]]\nname = \"items_v\"\nsource = \"public.items\"\n\
             select = \"{select}\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = two_databases(&src, &dest, &target("id, a", "v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "items_v", "--path", "snapshot"]);
    let first = version_field(&dest, "v1", "boundary_lsn::text");
    src.exec(
        "UPDATE items SET a = a + 1, b = repeat('y', 100) WHERE id % 4 = 0;
         DELETE FROM items WHERE id % 9 = 0;
         CHECKPOINT;",
    );
    src.archive_wal();
    src.exec("UPDATE items SET a = a WHERE id = 1");
    src.archive_wal();
    // Nothing listens on port 1.
    let offline = Walfill::with_text(&format!(
        "[source]\nurl = \"postgresql://walfill@127.0.0.1:1/gone\"\n\
         [destination]\nurl = \"{}\"\n{}",
        dest.url(),
        target("id, a", "v1")
    ));
    // A name that is neither a target nor a table one reads.
    let out = offline.run(&["compact", "public.nope"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("public.nope") && err.contains("public.items"),
        "{err}"
    );
    // The table, by its name.
    let out = offline.run(&["compact", "public.items"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("a new base at"),
        "{log}"
    );
    let walfill = two_databases(&src, &dest, &target("id, b, a", "v2"));
    walfill.ok(&["backfill", "items_v", "--path", "replay"]);
    assert_ne!(
        version_field(&dest, "v2", "replay_base->'manifest'->>'boundary'"),
        first,
        "replayed from the first base, not the compacted one"
    );
    assert_view_matches_in(
        &src,
        &dest,
        "public.items_v",
        "items",
        "id, b, a",
        None,
        "id",
    );
}
