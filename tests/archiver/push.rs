//! `walfill wal-push` as the `archive_command` of a small cluster of its own
//! (1 MiB segments), started for the test.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::time::Duration;

use walfill_replay::summary::SegmentSummary;
use walfill_replay::{Lsn, SegmentName, SegmentNo};

use super::{decode_segments, lsn, wait_until, LocalArchive, COUNTER};
use crate::support::cluster::connect;
use crate::support::server::{as_server_owner, is_root, pg_bindir, server_command};

/// A throwaway cluster archiving with `walfill wal-push` into `archive`,
/// and with `cp` into `copies` (the reference).
struct PushCluster {
    dir: PathBuf,
    data: PathBuf,
    copies: PathBuf,
    config: PathBuf,
    binary: PathBuf,
    url: String,
}

impl PushCluster {
    fn start(archive: &LocalArchive) -> PushCluster {
        let dir = std::env::temp_dir().join(format!(
            "walfill-push-cluster-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let data = dir.join("data");
        let copies = dir.join("copies");
        std::fs::create_dir_all(&copies).expect("cluster dir");
        // The server runs the binary: a copy where it can surely reach it.
        let binary = dir.join("walfill");
        std::fs::copy(env!("CARGO_BIN_EXE_walfill"), &binary).expect("copy the binary");
        let config = dir.join("walfill.toml");
        std::fs::write(
            &config,
            format!(
                "[source]\nurl = \"postgresql://unused@127.0.0.1:1/unused\"\n\n{}",
                archive.section()
            ),
        )
        .expect("write config");
        if is_root() {
            for path in [&dir, &archive.dir] {
                let ok = Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(path)
                    .status()
                    .expect("chown");
                assert!(ok.success(), "chown {}", path.display());
            }
        }
        let bin = pg_bindir();
        let data_arg = data.to_str().expect("utf-8 path");
        as_server_owner(
            &bin.join("initdb"),
            &[
                "-D",
                data_arg,
                "-U",
                "postgres",
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--wal-segsize=1",
            ],
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let archive_command = format!(
            "cp %p {copies}/%f && {binary} --config {config} wal-push %p",
            copies = copies.display(),
            binary = binary.display(),
            config = config.display(),
        );
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             wal_level = replica\narchive_mode = on\narchive_command = '{archive_command}'\n\
             fsync = off\nmax_wal_senders = 0\nlc_messages = 'C'\n",
            dir.display()
        );
        let conf_path = data.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf_path).unwrap_or_default();
        text.push_str(&conf);
        std::fs::write(&conf_path, text).expect("write postgresql.auto.conf");
        let log = dir.join("server.log");
        as_server_owner(
            &bin.join("pg_ctl"),
            &[
                "-D",
                data_arg,
                "-l",
                log.to_str().expect("utf-8"),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        PushCluster {
            url: format!("postgresql://postgres@127.0.0.1:{port}/postgres"),
            dir,
            data,
            copies,
            config,
            binary,
        }
    }

    fn exec(&self, sql: &str) {
        connect(&self.url)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    fn value(&self, sql: &str) -> String {
        connect(&self.url)
            .query_one(&format!("SELECT x::text FROM ({sql}) AS q(x)"), &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// `walfill wal-push PATH` run in `cwd`, as PostgreSQL runs it.
    fn push(&self, cwd: &Path, path: &str) -> Output {
        Command::new(&self.binary)
            .args([
                "--config",
                self.config.to_str().expect("utf-8"),
                "wal-push",
                path,
            ])
            .current_dir(cwd)
            .env("RUST_LOG", "walfill=info")
            .env_remove("WALFILL_CONFIG")
            .output()
            .expect("run wal-push")
    }
}

impl Drop for PushCluster {
    fn drop(&mut self) {
        if let Some(data) = self.data.to_str() {
            let _ = server_command(&pg_bindir().join("pg_ctl"))
                .args(["-D", data, "-m", "immediate", "-w", "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The archive holds what `archive_command` was given, zstd; pushing the
/// same file again succeeds; other bytes under a stored name are refused
/// and the stored file is kept; history files are stored as they are; a
/// complete segment replaces a `.partial` one; the decoder reads it all.
#[test]
fn wal_push_as_archive_command() {
    let archive = LocalArchive::new("push");
    let cluster = PushCluster::start(&archive);
    const MIB: u32 = 1 << 20;

    cluster.exec("CREATE TABLE t (id int, pad text)");
    let mut last = Lsn(0);
    for round in 0..4 {
        cluster.exec(&format!(
            "INSERT INTO t SELECT g, repeat('z', 300) FROM generate_series(1, {}) g",
            1000 + round * 2000
        ));
        last = lsn(&cluster.value("SELECT pg_switch_wal()"));
    }
    let last_name = SegmentName {
        timeline: walfill_replay::TimelineId(1),
        segno: SegmentNo::containing(last, u64::from(MIB)),
    }
    .file_name(u64::from(MIB));
    wait_until(Duration::from_secs(60), "the cluster to archive", || {
        cluster.value("SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver") >= last_name
    });
    assert_eq!(
        cluster.value("SELECT failed_count FROM pg_stat_archiver"),
        "0"
    );

    // Every segment the server archived is there, compressed, identical.
    let mut names: Vec<String> = std::fs::read_dir(&cluster.copies)
        .expect("copies")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 4, "archived: {names:?}");
    for name in &names {
        let theirs = std::fs::read(cluster.copies.join(name)).expect("copy");
        assert!(
            archive.zst(&format!("{name}.zst")) == theirs,
            "{name} differs"
        );
    }
    assert!(
        !archive.files().iter().any(|f| !f.ends_with(".zst")),
        "{:?}",
        archive.files()
    );

    // Each segment has its summary once the next one is stored.
    for pair in names.windows(2) {
        let path = archive.dir.join("summary").join(&pair[0]);
        let stored = std::fs::read(&path).unwrap_or_default();
        let summary =
            SegmentSummary::decode(&stored).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            summary.object.name.ends_with(&format!("{}.zst", pair[0])),
            "{:?}",
            summary.object
        );
        assert!(!summary.events.is_empty(), "{}", path.display());
    }

    // Pushing the same file again: success, nothing changes.
    let name = &names[1];
    let stored = std::fs::read(archive.wal().join(format!("{name}.zst"))).expect("stored");
    let out = cluster.push(&cluster.copies, name);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("already archived"));

    // Other bytes under the same name: refused, the stored file kept.
    let other = cluster.dir.join("other");
    std::fs::create_dir_all(&other).expect("dir");
    let mut changed = std::fs::read(cluster.copies.join(name)).expect("copy");
    changed[5000] ^= 0xFF;
    std::fs::write(other.join(name), &changed).expect("write");
    let out = cluster.push(&other, name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a different segment was accepted");
    assert!(stderr.contains("different content"), "{stderr}");
    assert_eq!(
        std::fs::read(archive.wal().join(format!("{name}.zst"))).expect("stored"),
        stored
    );

    // A file that is not a segment of its name: refused.
    std::fs::write(other.join("000000010000000000000063"), &changed).expect("write");
    let out = cluster.push(&other, "000000010000000000000063");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("name says"));

    // History files: stored verbatim, idempotent, never replaced.
    let history = b"1\t0/5000000\tno recovery target specified\n";
    std::fs::write(other.join("00000002.history"), history).expect("write");
    let out = cluster.push(&other, "00000002.history");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(archive.wal().join("00000002.history")).expect("history"),
        history
    );
    assert!(cluster.push(&other, "00000002.history").status.success());
    std::fs::write(other.join("00000002.history"), b"1\t0/6000000\tother\n").expect("write");
    let out = cluster.push(&other, "00000002.history");
    assert!(
        !out.status.success(),
        "a different history file was accepted"
    );
    assert_eq!(
        std::fs::read(archive.wal().join("00000002.history")).expect("history"),
        history
    );

    // A .partial of the segment being written, then the complete segment
    // from the server: the complete file replaces the partial one.
    cluster.exec("INSERT INTO t VALUES (0, 'in the partial segment')");
    let current = cluster.value("SELECT pg_walfile_name(pg_current_wal_lsn())");
    let bytes: Vec<u8> = connect(&cluster.url)
        .query_one("SELECT pg_read_binary_file('pg_wal/' || $1)", &[&current])
        .expect("read the current segment")
        .get(0);
    std::fs::write(other.join(format!("{current}.partial")), &bytes).expect("write");
    let out = cluster.push(&other, &format!("{current}.partial"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(archive.zst(&format!("{current}.partial.zst")) == bytes);
    cluster.exec("INSERT INTO t VALUES (1, 'after the partial')");
    cluster.value("SELECT pg_switch_wal()");
    // wal-push stores the complete file, then deletes the partial one.
    wait_until(
        Duration::from_secs(60),
        "the complete segment to replace the partial one",
        || {
            let files = archive.files();
            files.contains(&format!("{current}.zst"))
                && !files.contains(&format!("{current}.partial.zst"))
        },
    );

    // The decoder reads every pushed segment.
    let first = SegmentName::parse(&names[0], u64::from(MIB)).expect("a segment name");
    let segments: Vec<Vec<u8>> = names
        .iter()
        .map(|n| archive.zst(&format!("{n}.zst")))
        .collect();
    let records = decode_segments(first.segno.start_lsn(u64::from(MIB)), MIB, segments);
    assert!(records > 1000, "only {records} records");
}
