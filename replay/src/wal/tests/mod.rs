//! Tests against WAL written by a real PostgreSQL 15 (the `basic` fixture,
//! made by `scripts/gen-wal-fixtures.sh`), checked record by record against
//! `pg_waldump`'s output for the same segments, plus property tests.
//!
//! The fixture files are zstd-compressed; they are read through the `zstd`
//! command-line tool.

mod fixture;
mod interpret;
mod props;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::lsn::Lsn;
use crate::wal::{Poll, Record, WalDecoder};

/// Segment size of the fixture cluster.
pub(super) const SEG: u32 = 1 << 20;

/// The fixture directory of a case.
fn case_dir(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/wal/pg15")
        .join(case)
}

/// Decompresses a fixture file with the `zstd` tool.
fn unzstd(path: &PathBuf) -> Vec<u8> {
    let out = Command::new("zstd")
        .arg("-dc")
        .arg(path)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running `zstd -dc {}` (is zstd installed?): {e}",
                path.display()
            )
        });
    assert!(out.status.success(), "zstd -dc {} failed", path.display());
    out.stdout
}

/// The fixture's segments: (file name, bytes), in order.
pub(super) struct Fixture {
    pub(super) segments: Vec<(String, Vec<u8>)>,
    pub(super) waldump: Vec<DumpLine>,
}

impl Fixture {
    /// The segments concatenated.
    pub(super) fn wal(&self) -> Vec<u8> {
        self.segments
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect()
    }

    /// The LSN of the first segment's first byte.
    pub(super) fn start(&self) -> Lsn {
        let name = &self.segments[0].0;
        let segno = crate::lsn::SegmentName::parse(name, u64::from(SEG))
            .expect("segment name")
            .segno;
        segno.start_lsn(u64::from(SEG))
    }
}

/// The `basic` fixture, loaded once.
pub(super) fn basic() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = case_dir("basic");
        let wal = dir.join("wal");
        let mut names: Vec<String> = std::fs::read_dir(&wal)
            .unwrap_or_else(|e| panic!("reading {}: {e}", wal.display()))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.len() == 28 && n.ends_with(".zst"))
            .collect();
        names.sort();
        assert!(!names.is_empty(), "no segments in {}", dir.display());
        let segments = names
            .iter()
            .map(|n| (n[..24].to_string(), unzstd(&wal.join(n))))
            .collect();
        let text = String::from_utf8(unzstd(&dir.join("waldump.txt.zst"))).expect("waldump text");
        let waldump = text.lines().map(DumpLine::parse).collect();
        Fixture { segments, waldump }
    })
}

/// Decodes `wal` from `start` fed in `chunk`-byte pieces; all records, then the final answer.
pub(super) fn decode_all(start: Lsn, wal: &[u8], chunk: usize) -> (Vec<Record>, Poll) {
    let mut d = WalDecoder::new(start, SEG);
    let mut pieces = wal.chunks(chunk.max(1));
    let mut records = Vec::new();
    loop {
        match d.poll().unwrap_or_else(|e| panic!("decoding failed: {e}")) {
            Poll::Record(r) => records.push(r),
            Poll::NeedMore => match pieces.next() {
                Some(p) => d.feed(p),
                None => return (records, Poll::NeedMore),
            },
            end @ Poll::EndOfWal { .. } => return (records, end),
        }
    }
}

/// A block reference as `pg_waldump` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DumpBlock {
    pub(super) id: u8,
    pub(super) rel: String,
    pub(super) fork: Option<String>,
    pub(super) block: u32,
    /// `None`: no image; `Some(true)`: "FPW"; `Some(false)`: "FPW for WAL verification".
    pub(super) image: Option<bool>,
}

/// One line of `pg_waldump`'s default output.
#[derive(Clone, Debug)]
pub(super) struct DumpLine {
    pub(super) rmgr: String,
    pub(super) rec_len: u32,
    pub(super) tot_len: u32,
    pub(super) xid: u32,
    pub(super) lsn: Lsn,
    pub(super) prev: Lsn,
    /// The description without the block references.
    pub(super) desc: String,
    pub(super) blocks: Vec<DumpBlock>,
}

/// The text between `start` and the next `end` after it.
fn between<'a>(line: &'a str, start: &str, end: &str) -> &'a str {
    let from = line
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in {line}"))
        + start.len();
    let rest = &line[from..];
    let to = rest.find(end).unwrap_or(rest.len());
    rest[..to].trim()
}

impl DumpLine {
    fn parse(line: &str) -> DumpLine {
        let (rec, tot) = between(line, "len (rec/tot):", ",")
            .split_once('/')
            .expect("rec/tot");
        let desc_all = &line[line.find("desc: ").expect("desc") + 6..];
        let mut parts = desc_all.split(", blkref #");
        let desc = parts.next().unwrap_or("").trim_end().to_string();
        let blocks = parts.map(DumpBlock::parse).collect();
        DumpLine {
            rmgr: between(line, "rmgr: ", " ").to_string(),
            rec_len: rec.trim().parse().expect("rec len"),
            tot_len: tot.trim().parse().expect("tot len"),
            xid: between(line, "tx:", ",").parse().expect("xid"),
            lsn: between(line, "lsn: ", ",").parse().expect("lsn"),
            prev: between(line, "prev ", ",").parse().expect("prev"),
            desc,
            blocks,
        }
    }
}

impl DumpBlock {
    /// Parses `N: rel A/B/C[ fork F] blk N[ FPW[ for WAL verification]]`.
    fn parse(text: &str) -> DumpBlock {
        let (id, rest) = text.split_once(": rel ").expect("blkref");
        let mut words = rest.split_whitespace();
        let rel = words.next().expect("rel").to_string();
        let mut fork = None;
        let mut word = words.next().expect("blk");
        if word == "fork" {
            fork = words.next().map(str::to_string);
            word = words.next().expect("blk");
        }
        assert_eq!(word, "blk", "{text}");
        let block = words
            .next()
            .expect("block number")
            .parse()
            .expect("block number");
        let image = match words.next() {
            None => None,
            Some("FPW") => Some(words.next().is_none()),
            Some(other) => panic!("unexpected {other:?} in {text}"),
        };
        DumpBlock {
            id: id.trim().parse().expect("block id"),
            rel,
            fork,
            block,
            image,
        }
    }
}
