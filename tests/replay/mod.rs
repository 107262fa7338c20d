//! Replay backfills: versions filled from archived WAL (from the table's
//! creation or from a base snapshot) without reading the source table.

use std::time::Duration;

use crate::archiver::{terminate, LocalArchive, Running, SlotGuard};
use crate::support::cluster::archive_url;
use crate::support::workload::{
    create_orders, orders_sql, orders_target, Writer, ORDERS_SELECT, ORDERS_WHERE,
};
use crate::support::{assert_view_matches, assert_view_matches_in, TestDb, Walfill};

mod archives;
mod bases;
mod compaction;
mod creation;

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
