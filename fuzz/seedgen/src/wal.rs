//! Seeds cut from real WAL: windows of the segments for `wal_stream`,
//! single records for `wal_record`, and logged tuples for `tuple`.

use std::collections::BTreeMap;
use std::path::Path;

use walfill_fuzz::stream::{self, StartMode, StreamParams};
use walfill_replay::lsn::Lsn;
use walfill_replay::wal::{PageHeader, Poll, Record, WalDecoder, WAL_PAGE_SIZE};

use crate::values;
use crate::Seeds;

const PAGE: usize = WAL_PAGE_SIZE as usize;
/// Pages of the longest `wal_stream` window: the seed stays under the
/// 40000-byte `-max_len` of the target.
const WINDOW_PAGES: usize = 4;
/// Largest record kept as a `wal_record` seed.
const MAX_RECORD_SEED: usize = 16 << 10;

/// The 24-hex-digit segment name of a `<segment>.zst` fixture file.
pub(crate) fn segment_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?.strip_suffix(".zst")?;
    (name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())).then(|| name.to_string())
}

/// Consecutive WAL segments of one fixture, decoded.
pub(crate) struct Fixture {
    segment_size: usize,
    /// LSN of the first byte of `bytes`.
    base: u64,
    bytes: Vec<u8>,
    pub(crate) records: Vec<Record>,
}

impl Fixture {
    /// Reads and decodes the segments in `dir`, which must be consecutive.
    pub(crate) fn load(dir: &Path) -> Result<Fixture, String> {
        let mut files: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(dir)
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| segment_name(&p).map(|n| (n, p)))
            .collect();
        files.sort();
        let mut bytes = Vec::new();
        let mut first = None;
        for (name, path) in &files {
            let compressed =
                std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            let segment = zstd::decode_all(&compressed[..])
                .map_err(|e| format!("decompressing {}: {e}", path.display()))?;
            first.get_or_insert((name.clone(), segment.len()));
            bytes.extend_from_slice(&segment);
        }
        let Some((first_name, segment_size)) = first else {
            return Err(format!("no segments in {}", dir.display()));
        };
        let header = PageHeader::parse(&bytes).map_err(|e| format!("{first_name}: {e}"))?;
        let declared = header.long.map(|l| l.segment_size as usize);
        if declared != Some(segment_size) {
            return Err(format!(
                "{first_name}: segment size {declared:?} but {segment_size} bytes"
            ));
        }
        let base = header.page_addr.0;
        let mut decoder = WalDecoder::new(Lsn(base), segment_size as u32);
        decoder.feed(&bytes);
        let mut records = Vec::new();
        loop {
            match decoder.poll() {
                Ok(Poll::Record(r)) => records.push(r),
                Ok(_) => break,
                Err(e) => return Err(format!("decoding {}: {e}", dir.display())),
            }
        }
        eprintln!(
            "{}: {} segments, {} records",
            dir.display(),
            files.len(),
            records.len()
        );
        Ok(Fixture {
            segment_size,
            base,
            bytes,
            records,
        })
    }

    /// Adds every kind of seed this fixture gives.
    pub(crate) fn seeds(&self, label: &str, seeds: &mut Seeds) {
        self.stream_seeds(label, seeds);
        self.record_seeds(label, seeds);
        values::tuple_seeds(label, &self.records, seeds);
    }

    /// `window` pages of WAL from the page holding `lsn`, as a `wal_stream` seed.
    fn window(
        &self,
        lsn: u64,
        pages: usize,
        mode: StartMode,
        big: bool,
        exp: u8,
    ) -> Option<Vec<u8>> {
        let off = usize::try_from(lsn.checked_sub(self.base)?).ok()?;
        let page_start = off - off % PAGE;
        let data = self
            .bytes
            .get(page_start..(page_start + pages * PAGE).min(self.bytes.len()))?;
        let seg: u64 = if big {
            16 << 20
        } else {
            self.segment_size as u64
        };
        let params = StreamParams {
            big_segments: big,
            mode,
            segno: u32::try_from(lsn / seg).ok()?,
            offset: (lsn % seg) as u32,
            piece_exp: exp,
            seed: lsn as u32 ^ 0x5EED,
            owned: !exp.is_multiple_of(2),
            recycle: exp.is_multiple_of(3),
        };
        Some(stream::encode(&params, data))
    }

    fn stream_seeds(&self, label: &str, seeds: &mut Seeds) {
        let seg = self.segment_size;
        let nsegs = self.bytes.len() / seg;
        let pages_per_seg = seg / PAGE;
        let mut add = |name: String, seed: Option<Vec<u8>>| {
            if let Some(s) = seed {
                seeds.add("wal_stream", name, s);
            }
        };
        for s in 0..nsegs {
            let lsn = self.base + (s * seg) as u64;
            for pages in [1, 2, WINDOW_PAGES] {
                let exp = [13u8, 9, 17][pages % 3];
                add(
                    format!("{label}-seg{s}-first{pages}"),
                    self.window(lsn, pages, StartMode::Segment, false, exp),
                );
            }
            // The last pages of the segment, crossing into the next one if any.
            let lsn = self.base + ((s + 1) * seg - 2 * PAGE) as u64;
            add(
                format!("{label}-seg{s}-boundary"),
                self.window(lsn, WINDOW_PAGES, StartMode::Page, false, 11),
            );
        }
        // Windows from every 16th page, at both segment sizes when no
        // segment boundary of the small size is inside.
        for page in (1..nsegs * pages_per_seg).step_by(16) {
            let lsn = self.base + (page * PAGE) as u64;
            let exp = (page % 17) as u8 + 1;
            add(
                format!("{label}-page{page}"),
                self.window(lsn, 3, StartMode::Page, false, exp),
            );
            if (page % pages_per_seg) + 3 <= pages_per_seg {
                add(
                    format!("{label}-page{page}-16m"),
                    self.window(lsn, 3, StartMode::Page, true, exp),
                );
            }
        }
        // Starts at records, one per kind of record.
        let mut kinds = BTreeMap::new();
        for r in &self.records {
            kinds.entry((r.rmid, r.info & 0xF0)).or_insert(r.lsn.0);
        }
        for ((rmid, info), lsn) in kinds {
            let exp = (lsn % 18) as u8;
            add(
                format!("{label}-rec-{}-{info:02x}", rmid.0),
                self.window(lsn, 3, StartMode::Aligned, false, exp),
            );
        }
        // A start given raw (page start, small pieces).
        add(
            format!("{label}-raw"),
            self.window(self.base, 2, StartMode::Segment, false, 6)
                .map(|mut s| {
                    s[0] |= 3 << 1;
                    s[1..5].copy_from_slice(&((self.base >> 32) as u32).to_le_bytes());
                    s[5..9].copy_from_slice(&(self.base as u32).to_le_bytes());
                    s
                }),
        );
    }

    fn record_seeds(&self, label: &str, seeds: &mut Seeds) {
        let mut per_kind: BTreeMap<(u8, u8), usize> = BTreeMap::new();
        for r in &self.records {
            let bytes = r.bytes();
            if bytes.len() > MAX_RECORD_SEED {
                continue;
            }
            let n = per_kind.entry((r.rmid.0, r.info)).or_default();
            if *n >= 2 {
                continue;
            }
            *n += 1;
            let name = format!("{label}-{}-{:02x}-{}", r.rmid.0, r.info, r.lsn);
            seeds.add(
                "wal_record",
                name.replace('/', "_"),
                walfill_fuzz::record::encode(bytes),
            );
            if *n == 1 && r.rmid.0 % 4 == 0 {
                let name = format!("{label}-raw-{}-{:02x}", r.rmid.0, r.info);
                seeds.add("wal_record", name, walfill_fuzz::record::encode_raw(bytes));
            }
        }
    }
}
