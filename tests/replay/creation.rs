//! Replays from the table's creation: reading nothing from the source, finding the creation, schema changes and undecodable columns in the range, a kill mid-replay.

use super::*;

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
    writer.wait_for_ops(51);
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
