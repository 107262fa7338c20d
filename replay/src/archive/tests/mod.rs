//! Archive tests on real object-store backends (`InMemory` and
//! `LocalFileSystem` in a temporary directory), with segments written by
//! PostgreSQL 15 (the `basic` WAL fixture, 1 MiB segments).
//!
//! - `conformance`: one suite of cases, run against every backend;
//! - `end_to_end`: fixture segments through the archive into the WAL decoder.

mod conformance;
mod end_to_end;
mod observed;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use std::io::Write;

use futures_util::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::lsn::{Lsn, SegmentName, SegmentNo, TimelineId};

use super::{Archive, ArchiveError, ReadOptions, SegmentData};

/// Segment size of the fixture cluster.
pub(super) const SEG: u32 = 1 << 20;

/// The fixture directory.
fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/wal/pg15/basic")
}

/// Decompresses a fixture file.
fn unzstd(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    let packed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    zstd::decode_all(&packed[..]).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixture: its three segments (numbers 7, 8, 9 on timeline 1) and
/// the number of records `pg_waldump` listed in them.
pub(super) struct Fixture {
    pub(super) segments: Vec<(SegmentName, Vec<u8>)>,
    pub(super) waldump_records: usize,
}

/// The fixture, loaded once.
pub(super) fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let segments = (7..=9)
            .map(|n| {
                let name = name(1, n);
                let file = format!("wal/{}.zst", name.file_name(u64::from(SEG)));
                (name, unzstd(&file))
            })
            .collect();
        let dump = String::from_utf8(unzstd("waldump.txt.zst")).expect("waldump text");
        let waldump_records = dump.lines().filter(|l| l.starts_with("rmgr: ")).count();
        Fixture {
            segments,
            waldump_records,
        }
    })
}

/// The bytes of fixture segment `n` (7, 8 or 9).
pub(super) fn real(n: u64) -> Vec<u8> {
    fixture().segments[(n - 7) as usize].1.clone()
}

/// A segment-sized buffer for segment `n` that is not real WAL past its
/// first page header (borrowed from the fixture, so the segment size can be
/// learned from it) and differs from every other segment's.
pub(super) fn synthetic(n: u64) -> Vec<u8> {
    let mut bytes = real(7);
    for (i, chunk) in bytes[8192..].chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(n * 0x1_0000 + i as u64).to_le_bytes());
    }
    bytes
}

/// Segment `segno` of timeline `tli`.
pub(super) fn name(tli: u32, segno: u64) -> SegmentName {
    SegmentName {
        timeline: TimelineId(tli),
        segno: SegmentNo(segno),
    }
}

/// First LSN of segment `segno`.
pub(super) fn start(segno: u64) -> Lsn {
    SegmentNo(segno).start_lsn(u64::from(SEG))
}

/// A storage backend holding one archive for one test case.
pub(super) struct Backend {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// For archives opened by URL: the URL, and for `file://` ones the
    /// directory removed at the end.
    local: Option<(String, Option<TempDir>)>,
}

impl Backend {
    /// An archive in memory, under a prefix named after the case.
    pub(super) fn memory(case: &str) -> Backend {
        Backend {
            store: Arc::new(InMemory::new()),
            prefix: Path::from(format!("cases/{case}")),
            local: None,
        }
    }

    /// An archive in a fresh temporary directory, opened by `file://` URL.
    pub(super) fn local(case: &str) -> Backend {
        let dir = TempDir::new(case);
        let url = url::Url::from_directory_path(&dir.0)
            .expect("absolute temporary directory")
            .to_string();
        let archive = Archive::open(&url).expect("file URL");
        Backend {
            store: Arc::clone(archive.store()),
            prefix: archive.prefix().clone(),
            local: Some((url, Some(dir))),
        }
    }

    /// An archive in the S3 test bucket (`WALFILL_TEST_S3_BUCKET`, with the
    /// server in `AWS_ENDPOINT_URL`: `scripts/test.sh` starts one), under a
    /// prefix of its own.
    pub(super) fn s3(case: &str) -> Backend {
        let bucket = std::env::var("WALFILL_TEST_S3_BUCKET").unwrap_or_else(|_| {
            panic!(
                "WALFILL_TEST_S3_BUCKET is not set: run the tests with scripts/test.sh, which \
                 starts the S3 test server"
            )
        });
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let url = format!(
            "s3://{bucket}/conformance/{case}-{}-{nanos}",
            std::process::id()
        );
        let archive = Archive::open(&url).expect("s3 URL");
        Backend {
            store: Arc::clone(archive.store()),
            prefix: archive.prefix().clone(),
            local: Some((url, None)),
        }
    }

    /// A new handle on the archive, knowing nothing yet (segment size).
    pub(super) fn archive(&self) -> Archive {
        match &self.local {
            Some((url, _)) => Archive::open(url).expect("archive URL"),
            None => Archive::from_store(Arc::clone(&self.store), self.prefix.clone()),
        }
    }

    /// Writes raw bytes as `wal/<file>`, bypassing every check.
    pub(super) async fn put_raw(&self, file: &str, bytes: Vec<u8>) {
        let location = self.prefix.clone().join("wal").join(file);
        self.store
            .put(&location, PutPayload::from(bytes))
            .await
            .expect("raw put");
    }

    /// Writes raw bytes outside `wal/`.
    pub(super) async fn put_other(&self, path: &str, bytes: Vec<u8>) {
        let location = Path::parse(format!("{}/{path}", self.prefix)).expect("path");
        self.store
            .put(&location, PutPayload::from(bytes))
            .await
            .expect("raw put");
    }

    /// The file names under `wal/`, sorted.
    pub(super) async fn wal_files(&self) -> Vec<String> {
        let wal = self.prefix.clone().join("wal");
        let mut names: Vec<String> = self
            .store
            .list(Some(&wal))
            .map_ok(|m| m.location.filename().unwrap_or_default().to_string())
            .try_collect()
            .await
            .expect("list");
        names.sort();
        names
    }
}

/// A directory under the system temporary directory, removed when dropped.
pub(super) struct TempDir(PathBuf);

impl TempDir {
    fn new(case: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "walfill-archive-{}-{case}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads a range completely; stops at the first error, returning what came before it.
pub(super) async fn read_all(
    archive: &Archive,
    from: Lsn,
    to: Option<Lsn>,
    options: ReadOptions,
) -> (Vec<SegmentData>, Option<ArchiveError>) {
    let stream = archive.read(from, to, options);
    let mut stream = std::pin::pin!(stream);
    let mut got = Vec::new();
    while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
        match item {
            Ok(segment) => got.push(segment),
            Err(e) => {
                // Nothing follows an error.
                assert!(futures_util::StreamExt::next(&mut stream).await.is_none());
                return (got, Some(e));
            }
        }
    }
    (got, None)
}

/// The segment numbers of what was read.
pub(super) fn segnos(segments: &[SegmentData]) -> Vec<u64> {
    segments.iter().map(|s| s.name.segno.0).collect()
}

/// `data` compressed with `codec`, by each format's own crate (the
/// integration tests use the command-line tools).
pub(in crate::archive) fn pack(codec: super::Codec, data: &[u8]) -> Vec<u8> {
    match codec {
        super::Codec::Plain => data.to_vec(),
        super::Codec::Zstd => super::codec::compress(data).unwrap(),
        super::Codec::Gzip => {
            let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            w.write_all(data).unwrap();
            w.finish().unwrap()
        }
        super::Codec::Lz4 => {
            let mut w = lz4_flex::frame::FrameEncoder::new(Vec::new());
            w.write_all(data).unwrap();
            w.finish().unwrap()
        }
        super::Codec::Bzip2 => {
            let mut w = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            w.write_all(data).unwrap();
            w.finish().unwrap()
        }
        super::Codec::Brotli => {
            let mut out = Vec::new();
            {
                let mut w = brotli::CompressorWriter::new(&mut out, 4096, 3, 22);
                w.write_all(data).unwrap();
            }
            out
        }
        super::Codec::Lzma => {
            let options = xz2::stream::LzmaOptions::new_preset(1).unwrap();
            let stream = xz2::stream::Stream::new_lzma_encoder(&options).unwrap();
            let mut w = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
            w.write_all(data).unwrap();
            w.finish().unwrap()
        }
    }
}
