//! Copies in parallel key ranges: resumed range by range, and an identity copy straight in.

use super::*;

/// Three workers copy key ranges cut from the key's histogram, with writes
/// going on; killed mid-copy, each range resumes after its own last stored
/// key, and the view is exact.
#[test]
fn parallel_key_ranges_under_writes_resume_each_range_and_are_exact() {
    let db = TestDb::new("chunked_parallel");
    create_orders(&db, 30_000);
    let walfill = Walfill::new(
        &db,
        &format!(
            "{CHUNKED}workers = 3\nmax_rows_per_second = 9000\n\n{}",
            orders_target("v1")
        ),
    );
    walfill.ok(&["setup"]);
    let writer = Writer::start(&db, 30_000, 1_000_000, 31);
    let sampler = OldestXact::start(&db);

    let mut run = walfill.spawn(&["backfill", "orders_summary", "--no-swap"]);
    db.wait_for(
        "SELECT count(*) = 3 AND bool_and(rows_copied >= 2000) FROM walfill.chunk_ranges",
        Duration::from_secs(60),
        "every range to store two chunks",
    );
    run.kill().expect("SIGKILL walfill");
    let _ = run.wait();
    let stored: i64 = number(&db, "SELECT rows_copied FROM walfill.versions");
    let ranges = db
        .value(
            "SELECT string_agg(coalesce(above, '-') || '..' || coalesce(up_to, '-'), ' ' ORDER BY range_no)
               FROM walfill.chunk_ranges",
        )
        .unwrap();
    let before: Vec<String> = db
        .client()
        .query(
            "SELECT cursor[1] FROM walfill.chunk_ranges ORDER BY range_no",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();

    walfill.ok(&["backfill", "orders_summary", "--no-swap"]);
    let oldest = sampler.stop();
    let ops = writer.stop();
    assert!(ops > 100, "the writer only managed {ops} statements");
    assert!(
        oldest < 1.0,
        "a walfill transaction stayed open {oldest:.2} s"
    );
    // The ranges are the same, each started at its own cursor and ended.
    let after = db
        .value(
            "SELECT string_agg(coalesce(above, '-') || '..' || coalesce(up_to, '-'), ' ' ORDER BY range_no)
               FROM walfill.chunk_ranges WHERE done",
        )
        .unwrap();
    assert_eq!(after, ranges, "ranges {ranges} are not all done: {after}");
    assert!(before.iter().all(|c| !c.is_empty()));
    let copied: i64 = number(&db, "SELECT rows_copied FROM walfill.versions");
    // Each range went on from its own cursor: ranges started over would
    // count the {stored} rows stored before the kill twice.
    assert!(
        (27_000..30_000 + stored).contains(&copied),
        "{copied} rows counted as copied for about 30000 ({ranges}), {stored} before the kill"
    );
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_summary", "v1"]);
    assert_orders_exact(&db);
}

/// An identity transform copied by two workers in key ranges, with writes
/// going on: chunks go straight into the version's table, each row
/// carrying its own chunk's version, side by side; the stream decides
/// against those versions, and the view is exact.
#[test]
fn an_identity_copy_in_parallel_ranges_goes_straight_in_and_is_exact() {
    let db = TestDb::new("chunked_identity");
    create_orders(&db, 20_000);
    let columns = "id, customer_id, status, total_cents, note";
    let target = format!(
        "[[target]]\nname = \"orders_all\"\nsource = \"public.orders\"\n\
         select = \"{columns}\"\nversion = \"v1\"\nschema = \"derived\"\n"
    );
    let walfill = Walfill::new(
        &db,
        &format!("{CHUNKED}workers = 2\nmax_rows_per_second = 10000\n\n{target}"),
    );
    walfill.ok(&["setup"]);
    let writer = Writer::start(&db, 20_000, 1_000_000, 37);
    let out = walfill.run(&["backfill", "orders_all", "--no-swap"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("copied straight in"), "{stderr}");
    assert!(
        stderr.contains("copying key ranges in parallel"),
        "{stderr}"
    );
    assert!(writer.stop() > 50);
    assert!(
        number(
            &db,
            "SELECT count(DISTINCT _walfill_seq) FROM derived.orders_all__v1 WHERE _walfill_seq < 0"
        ) > 10,
        "the chunks' rows do not carry their own chunks' versions"
    );
    walfill.ok(&["sync", "--once"]);
    walfill.ok(&["swap", "orders_all", "v1"]);
    assert_view_matches(&db, "derived.orders_all", "orders", columns, None, "id");
}
