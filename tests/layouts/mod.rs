//! Replay backfills from archives that other tools fill, read where they
//! are: a flat folder of segment files, WAL-G's `wal_005/`, and a
//! pgBackRest repository filled by `pgbackrest archive-push`. Each holds
//! the WAL of the table's creation and of writes after it, compressed by
//! the tools' own programs, and the backfill must build exactly the view
//! the source's rows give, without reading the table.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::failover::Failover;
use crate::support::foreign::{ForeignArchive, Mirror};
use crate::support::service::Service;
use crate::support::workload::{create_orders, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE};
use crate::support::{assert_view_matches_in, TestDb, Walfill};

mod bases;
mod foreign;

fn two_databases(source: &TestDb, dest: &TestDb, rest: &str) -> Walfill {
    Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n{rest}",
        source.url(),
        dest.url()
    ))
}

/// The table is created (after `walfill setup`) and written to while the
/// foreign archive is filled; `walfill backfill --path replay` then builds
/// the view from that archive alone. `named` puts the layout in the
/// configuration instead of leaving it to detection. Returns the walfill
/// runner and the archive for more checks.
fn replay_from(kind: &str, named: bool) -> (TestDb, TestDb, Walfill, Arc<ForeignArchive>) {
    let src = TestDb::new("lay_src");
    let dest = TestDb::new("lay_dest");
    let archive = Arc::new(ForeignArchive::new(kind, &src));
    // Everything from here on reaches the foreign archive: the segment
    // begun now, with a checkpoint (a restart point for decoding) in it.
    src.archive_wal();
    let first = src
        .value("SELECT pg_walfile_name(pg_current_wal_lsn())")
        .expect("a segment name");
    src.exec("CHECKPOINT");
    let mirror = Mirror::start(archive.clone(), &first);

    let layout = if named {
        format!("layout = \"{kind}\"\n")
    } else {
        String::new()
    };
    let section = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n{layout}",
        archive.url()
    );
    // Setup before the table exists installs the journal.
    two_databases(&src, &dest, &section).ok(&["setup"]);
    create_orders(&src, 10_000);
    let writer = Writer::start(&src, 10_000, 1_000_000, 11);
    // Segments switched while writes go on: enough files for every codec
    // the layout is stored with to be used.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(600));
        src.archive_wal();
    }
    assert!(writer.stop() > 20);

    let walfill = two_databases(&src, &dest, &format!("{section}\n{}", orders_target("v1")));
    walfill.ok(&["setup"]);
    src.archive_wal();
    let plan = walfill.ok(&["plan", "orders_summary"]);
    let how = if named { "as configured" } else { "detected" };
    assert!(
        plan.contains(": replay")
            && plan.contains("creation")
            && plan.contains(&format!(
                "archive: {} (layout {kind}, {how})",
                archive.url()
            )),
        "plan: {plan}"
    );

    let before = src.table_reads("orders");
    walfill.ok(&["backfill", "orders_summary", "--path", "replay"]);
    assert_eq!(
        src.table_reads("orders"),
        before,
        "the backfill read orders"
    );
    let stored = mirror.finish();
    assert!(stored >= 5, "only {stored} segments reached the archive");
    assert_eq!(
        dest.value("SELECT path FROM walfill.versions WHERE version = 'v1'")
            .as_deref(),
        Some("replay")
    );
    assert_view_matches_in(
        &src,
        &dest,
        "derived.orders_summary",
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        "id",
    );
    // walfill wrote nothing into the other tool's archive.
    assert!(
        !archive
            .files()
            .iter()
            .any(|f| f.starts_with("wal/") || f.starts_with("base/")),
        "{:?}",
        archive.files()
    );
    (src, dest, walfill, archive)
}
