//! `walfill archive` and `walfill wal-push` against the test cluster: the
//! archive they fill is compared byte for byte with the segments the
//! cluster's own `archive_command` copied, and decoded.

mod kill;
mod push;
mod s3;
mod stream;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use walfill_replay::wal::{Poll, WalDecoder};
use walfill_replay::{Lsn, SegmentName, SegmentNo, TimelineId};

use crate::support::cluster::{admin_url, connect, drop_slots};
use crate::support::TestDb;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A `file://` archive in a temporary directory of its own, removed at the end.
pub struct LocalArchive {
    pub dir: PathBuf,
}

impl LocalArchive {
    pub fn new(tag: &str) -> LocalArchive {
        let dir = std::env::temp_dir().join(format!(
            "walfill-archive-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("archive dir");
        LocalArchive { dir }
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    /// The `[archive]` section naming it.
    pub fn section(&self) -> String {
        format!("[archive]\nurl = \"{}\"\n", self.url())
    }

    pub fn wal(&self) -> PathBuf {
        self.dir.join("wal")
    }

    /// The names of the files under `wal/`, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = match std::fs::read_dir(self.wal()) {
            Ok(entries) => entries
                .map(|e| {
                    e.expect("dir entry")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    /// The decompressed content of `wal/<name>`.
    pub fn zst(&self, name: &str) -> Vec<u8> {
        let path = self.wal().join(name);
        let packed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        zstd::decode_all(&packed[..])
            .unwrap_or_else(|e| panic!("{} is not zstd: {e}", path.display()))
    }
}

impl Drop for LocalArchive {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A physical slot on the test cluster, dropped at the end (it holds WAL).
pub struct SlotGuard {
    pub name: String,
}

impl SlotGuard {
    /// Guards a slot that the archiver will create.
    pub fn named(name: &str) -> SlotGuard {
        SlotGuard {
            name: name.to_string(),
        }
    }

    /// Creates the slot now (reserving WAL from the last checkpoint's redo point).
    pub fn create(name: &str) -> SlotGuard {
        let mut admin = connect(&admin_url());
        admin
            .execute(
                "SELECT pg_create_physical_replication_slot($1, true)",
                &[&name],
            )
            .unwrap_or_else(|e| panic!("creating slot {name}: {e}"));
        SlotGuard::named(name)
    }

    /// `restart_lsn` of the slot.
    pub fn restart_lsn(&self) -> Lsn {
        let mut admin = connect(&admin_url());
        let text: Option<String> = admin
            .query_one(
                "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.name],
            )
            .unwrap_or_else(|e| panic!("slot {}: {e}", self.name))
            .get(0);
        lsn(&text.expect("the slot reserves WAL"))
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let Ok(mut admin) = postgres::Client::connect(&admin_url(), postgres::NoTls) else {
            return;
        };
        drop_slots(&mut admin, "slot_name", &self.name);
    }
}

pub fn lsn(text: &str) -> Lsn {
    text.parse().unwrap_or_else(|e| panic!("{e}"))
}

/// `pg_current_wal_lsn()`.
pub fn current_lsn(db: &TestDb) -> Lsn {
    lsn(&db.value("SELECT pg_current_wal_lsn()").unwrap())
}

/// The test cluster's WAL segment size.
pub fn segment_size(db: &TestDb) -> u32 {
    db.value("SELECT pg_size_bytes(current_setting('wal_segment_size'))")
        .unwrap()
        .parse()
        .unwrap()
}

/// The start of the segment holding `lsn`.
pub fn segment_start(lsn: Lsn, size: u32) -> Lsn {
    SegmentNo::containing(lsn, u64::from(size)).start_lsn(u64::from(size))
}

/// A segment's file name on timeline 1 (the test cluster's).
pub fn segment_file(segno: SegmentNo, size: u32) -> String {
    SegmentName {
        timeline: TimelineId(1),
        segno,
    }
    .file_name(u64::from(size))
}

/// Where the test cluster's `archive_command` copies segments.
pub fn server_archive() -> PathBuf {
    let url = crate::oracle::archive_url();
    let path = url
        .strip_prefix("file://")
        .unwrap_or_else(|| panic!("WALFILL_TEST_ARCHIVE_URL is not a file:// URL: {url}"));
    Path::new(path).join("wal")
}

/// Waits until the cluster has archived every segment holding WAL before `lsn`.
pub fn wait_server_archived(db: &TestDb, lsn: Lsn) {
    let started = Instant::now();
    loop {
        let done = db.value(&format!(
            "SELECT coalesce(last_archived_wal >= pg_walfile_name('{lsn}'::pg_lsn - 1), false) FROM pg_stat_archiver"
        ));
        if done.as_deref() == Some("true") {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the cluster did not archive WAL up to {lsn}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks that `archive` holds every byte of WAL from the segment of `from`
/// up to `to`: complete segments as `.zst` files identical to the cluster's
/// own copies, and, when `to` is inside a segment, a `.partial.zst` whose
/// bytes before `to` are the cluster's. Returns the number of complete
/// segments checked.
pub fn assert_archive_holds(archive: &LocalArchive, db: &TestDb, from: Lsn, to: Lsn) -> usize {
    let size = segment_size(db);
    let seg = u64::from(size);
    let files = archive.files();
    let server = server_archive();
    let mut checked = 0;
    let mut segno = SegmentNo::containing(from, seg);
    while segno.start_lsn(seg).advance(seg) <= to {
        let name = segment_file(segno, size);
        assert!(
            files.contains(&format!("{name}.zst")),
            "segment {name} is missing from the archive; it has {files:?}"
        );
        assert!(
            !files.contains(&name) && !files.contains(&format!("{name}.partial.zst")),
            "segment {name} has other files beside its .zst: {files:?}"
        );
        let ours = archive.zst(&format!("{name}.zst"));
        let theirs = std::fs::read(server.join(&name))
            .unwrap_or_else(|e| panic!("the cluster's copy of {name}: {e}"));
        assert!(
            ours == theirs,
            "segment {name} differs from the cluster's copy"
        );
        checked += 1;
        segno = segno.next();
    }
    let offset = to.segment_offset(seg) as usize;
    if offset > 0 && SegmentNo::containing(to, seg) == segno {
        let name = segment_file(segno, size);
        let (file, ours) = if files.contains(&format!("{name}.zst")) {
            (format!("{name}.zst"), archive.zst(&format!("{name}.zst")))
        } else {
            let file = format!("{name}.partial.zst");
            assert!(
                files.contains(&file),
                "no file for the tail segment {name}: {files:?}"
            );
            let bytes = archive.zst(&file);
            (file, bytes)
        };
        assert_eq!(ours.len(), size as usize, "{file} is not one segment long");
        let theirs = server_bytes(db, &name, offset);
        assert!(
            ours[..offset] == theirs[..],
            "{file} differs from the cluster's WAL before {to}"
        );
    }
    checked
}

/// Checks, while the archiver may be running, that the slot has not passed
/// what the archive holds: once the slot moved from where it was created
/// (`start`), every segment from there up to its `restart_lsn` is in the
/// archive, the one holding it with the cluster's bytes.
pub fn assert_slot_within_archive(
    archive: &LocalArchive,
    db: &TestDb,
    slot: &SlotGuard,
    start: Lsn,
) {
    let size = segment_size(db);
    let seg = u64::from(size);
    let restart = slot.restart_lsn();
    if restart <= start {
        // The slot has not moved since it was created: nothing confirmed yet.
        return;
    }
    let files = archive.files();
    let mut segno = SegmentNo::containing(start, seg);
    while segno < SegmentNo::containing(restart, seg) {
        let name = segment_file(segno, size);
        assert!(
            files.contains(&format!("{name}.zst")),
            "the slot is at {restart} but segment {name} is not in the archive: {files:?}"
        );
        segno = segno.next();
    }
    let offset = restart.segment_offset(seg) as usize;
    if offset == 0 {
        return;
    }
    let name = segment_file(segno, size);
    // The tail file may be replaced by the complete one meanwhile: look twice.
    let read = |files: &[String]| {
        [format!("{name}.zst"), format!("{name}.partial.zst")]
            .into_iter()
            .filter(|f| files.contains(f))
            .find_map(|f| std::fs::read(archive.wal().join(f)).ok())
    };
    let packed = read(&files)
        .or_else(|| read(&archive.files()))
        .unwrap_or_else(|| panic!("the slot is at {restart} but {name} is not in the archive"));
    let ours = zstd::decode_all(&packed[..]).expect("zstd");
    assert!(
        ours[..offset] == server_bytes(db, &name, offset)[..],
        "the slot is at {restart} but the archive's {name} does not hold the WAL before it"
    );
}

/// The first `len` bytes of a segment of the cluster: its archived copy if
/// there is one yet, else the file in `pg_wal` (read by the server).
pub fn server_bytes(db: &TestDb, name: &str, len: usize) -> Vec<u8> {
    if let Ok(bytes) = std::fs::read(server_archive().join(name)) {
        return bytes[..len].to_vec();
    }
    db.client()
        .query_one(
            "SELECT pg_read_binary_file('pg_wal/' || $1, 0, $2)",
            &[&name, &(len as i64)],
        )
        .unwrap_or_else(|e| panic!("reading pg_wal/{name}: {e}"))
        .get(0)
}

/// Decodes the complete segments `segments` (in order, the first starting at
/// `start`) with the WAL decoder: every record must decode, and the WAL must
/// not end inside them. Returns the number of records.
pub fn decode_segments(
    start: Lsn,
    size: u32,
    segments: impl IntoIterator<Item = Vec<u8>>,
) -> usize {
    let mut decoder = WalDecoder::new(start, size);
    let mut records = 0;
    let mut end = start;
    for bytes in segments {
        assert_eq!(bytes.len(), size as usize);
        end = end.advance(u64::from(size));
        decoder.feed_owned(bytes);
        loop {
            match decoder.poll() {
                Ok(Poll::Record(record)) => {
                    records += 1;
                    decoder.recycle(record);
                }
                Ok(Poll::NeedMore) => break,
                Ok(Poll::EndOfWal { lsn, reason }) => {
                    panic!("the archived WAL ends at {lsn} ({reason:?}), inside complete segments ending at {end}")
                }
                Err(e) => panic!("archived WAL does not decode: {e}"),
            }
        }
    }
    records
}

/// A spawned `walfill archive`, killed if the test ends before it does.
pub struct Running(Option<Child>);

impl Running {
    pub fn new(child: Child) -> Running {
        Running(Some(child))
    }

    /// The process.
    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the process was taken")
    }

    /// The process, no longer killed at the end.
    pub fn take(mut self) -> Child {
        self.0.take().expect("the process was taken")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends SIGTERM to a child process.
pub fn terminate(child: &Child) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM failed");
}

/// Waits up to `timeout` for `check`, polling.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
