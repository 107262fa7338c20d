//! The `wal_stream` target: a WAL byte stream through `WalDecoder`.
//!
//! # Input layout
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0      | flags: bit 0 segment size 16 MiB (else 1 MiB); bits 1-2 [`StartMode`]; bit 3 hand buffers over with `feed_owned`; bit 4 give records back with `recycle`; bits 5-7 segment size for [`StartMode::Raw`] |
//! | 1..5   | segment number (u32 LE) |
//! | 5..9   | offset inside the segment (u32 LE) |
//! | 9      | split size: pieces of 1 to `1 << (b % 18)` bytes |
//! | 10..14 | seed of the split sizes (u32 LE) |
//! | 14..   | the WAL bytes, starting with the page that holds the start LSN |
//!
//! # What is checked
//!
//! The stream is decoded twice, once fed in one piece and once in pieces of
//! pseudo-random sizes, each time polling after every feed until the
//! decoder asks for more, ends or fails. Every record goes through
//! `interpret` (and the tuples of row events through the tuple decoder).
//! Besides "no panic", the harness asserts what the decoder documents:
//! both feedings give the same records and the same final answer; after an
//! end or an error `poll` repeats it; `input_end` follows the bytes fed;
//! records lie at 8-byte aligned LSNs at or after the start, in order, each
//! as long as its `xl_tot_len`. No difference between the two feedings is
//! tolerated; inputs that once showed one are kept in [`crate::known`].

use walfill_replay::lsn::Lsn;
use walfill_replay::wal::{DecodeError, EndReason, Poll, Record, WalDecoder, WAL_PAGE_SIZE};

use crate::bytes::{Input, Rng};
use crate::record::exercise_record;

/// Bytes of parameters before the WAL bytes.
pub const HEADER_LEN: usize = 14;

/// How the start LSN is derived from the segment number and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMode {
    /// The segment's first byte.
    Segment = 0,
    /// The page holding the offset.
    Page = 1,
    /// The offset rounded down to 8 bytes (a record start, if the input is real WAL).
    Aligned = 2,
    /// `segno << 32 | offset` unchanged, with a segment size from a table
    /// that includes invalid ones: exercises the start and size checks.
    Raw = 3,
}

/// Segment sizes [`StartMode::Raw`] picks from (bits 5-7 of the flags).
const RAW_SEGMENT_SIZES: [u32; 8] = [
    1 << 20,
    16 << 20,
    1 << 30,
    2 << 20,
    0,
    3 << 20,
    1 << 31,
    8192,
];

/// The decoded parameters of a `wal_stream` input.
#[derive(Clone, Debug)]
pub struct StreamSpec {
    /// Segment size given to the decoder.
    pub segment_size: u32,
    /// Start LSN given to the decoder.
    pub start: Lsn,
    /// Largest piece fed at once in the split decoding.
    pub max_piece: usize,
    /// Seed of the piece sizes.
    pub seed: u32,
    /// Whether to feed with `feed_owned` and reuse spent buffers.
    pub owned: bool,
    /// Whether to give records back with `recycle`.
    pub recycle: bool,
}

/// Parameters of an input to build with [`encode`].
#[derive(Clone, Copy, Debug)]
pub struct StreamParams {
    /// 16 MiB segments instead of 1 MiB.
    pub big_segments: bool,
    /// How the start is derived.
    pub mode: StartMode,
    /// Segment number.
    pub segno: u32,
    /// Offset inside the segment.
    pub offset: u32,
    /// Split size exponent (`max piece = 1 << (exp % 18)`).
    pub piece_exp: u8,
    /// Seed of the piece sizes.
    pub seed: u32,
    /// Use `feed_owned`.
    pub owned: bool,
    /// Use `recycle`.
    pub recycle: bool,
}

/// Builds a `wal_stream` input from parameters and WAL bytes.
pub fn encode(p: &StreamParams, wal: &[u8]) -> Vec<u8> {
    let flags = u8::from(p.big_segments)
        | (p.mode as u8) << 1
        | u8::from(p.owned) << 3
        | u8::from(p.recycle) << 4;
    let mut out = Vec::with_capacity(HEADER_LEN + wal.len());
    out.push(flags);
    out.extend_from_slice(&p.segno.to_le_bytes());
    out.extend_from_slice(&p.offset.to_le_bytes());
    out.push(p.piece_exp);
    out.extend_from_slice(&p.seed.to_le_bytes());
    out.extend_from_slice(wal);
    out
}

/// Splits an input into its parameters and WAL bytes.
pub fn decode(data: &[u8]) -> (StreamSpec, &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let segno = input.u32();
    let offset = input.u32();
    let piece_exp = input.u8();
    let seed = input.u32();
    let mode = match (flags >> 1) & 3 {
        0 => StartMode::Segment,
        1 => StartMode::Page,
        2 => StartMode::Aligned,
        _ => StartMode::Raw,
    };
    let mut segment_size: u32 = if flags & 1 != 0 { 16 << 20 } else { 1 << 20 };
    let seg = u64::from(segment_size);
    let base = u64::from(segno) * seg;
    let within = u64::from(offset) % seg;
    let start = match mode {
        StartMode::Segment => base,
        StartMode::Page => base + within - within % u64::from(WAL_PAGE_SIZE),
        StartMode::Aligned => base + (within & !7),
        StartMode::Raw => {
            segment_size = RAW_SEGMENT_SIZES[usize::from(flags >> 5)];
            u64::from(segno) << 32 | u64::from(offset)
        }
    };
    let spec = StreamSpec {
        segment_size,
        start: Lsn(start),
        max_piece: 1 << (piece_exp % 18),
        seed,
        owned: flags & 8 != 0,
        recycle: flags & 16 != 0,
    };
    (spec, input.rest())
}

/// How a decoding run stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Last {
    NeedMore,
    End { lsn: Lsn, reason: EndReason },
    Failed(DecodeError),
}

/// Records and final answer of one decoding run.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    records: Vec<Record>,
    last: Last,
}

/// Runs the `wal_stream` harness on one input.
pub fn run(data: &[u8]) {
    let (spec, wal) = decode(data);
    let whole = decode_stream(&spec, wal, None);
    let mut rng = Rng::new(spec.seed);
    let split = decode_stream(&spec, wal, Some(&mut rng));
    if whole != split {
        let n = whole.records.len().min(split.records.len());
        let first_diff = (0..n).find(|&i| whole.records[i] != split.records[i]);
        panic!(
            "feeding in pieces changed the result: {} vs {} records, first differing record {:?}, \
             final answers {:?} (whole) vs {:?} (pieces)",
            whole.records.len(),
            split.records.len(),
            first_diff.map(|i| whole.records[i].lsn),
            whole.last,
            split.last,
        );
    }
}

/// Whether feeding the input whole and in pieces gives different results.
pub fn split_changes_result(data: &[u8]) -> bool {
    let (spec, wal) = decode(data);
    let whole = decode_stream(&spec, wal, None);
    let mut rng = Rng::new(spec.seed);
    whole != decode_stream(&spec, wal, Some(&mut rng))
}

/// Decodes `wal` in one piece (`pieces` is `None`) or in pseudo-random pieces.
fn decode_stream(spec: &StreamSpec, wal: &[u8], mut pieces: Option<&mut Rng>) -> Outcome {
    let mut decoder = WalDecoder::new(spec.start, spec.segment_size);
    let input_start = decoder.input_start();
    let mut records = Vec::new();
    let mut fed = 0usize;
    let mut spent: Option<Vec<u8>> = None;
    loop {
        match poll_until_stuck(&mut decoder, spec, &mut records) {
            Last::NeedMore => {}
            last => {
                check_repeats(&mut decoder, &last);
                return Outcome { records, last };
            }
        }
        // Not ended: every byte fed so far is accounted for.
        assert_eq!(
            decoder.input_end(),
            input_start.advance(fed as u64),
            "input_end does not follow the bytes fed"
        );
        if fed == wal.len() {
            return Outcome {
                records,
                last: Last::NeedMore,
            };
        }
        let len = match pieces.as_deref_mut() {
            Some(rng) => rng.between_1_and(spec.max_piece).min(wal.len() - fed),
            None => wal.len() - fed,
        };
        let piece = &wal[fed..fed + len];
        fed += len;
        if spec.owned {
            if spent.is_none() {
                spent = decoder.take_spent_buffer();
            }
            let mut buf = spent.take().unwrap_or_default();
            buf.extend_from_slice(piece);
            decoder.feed_owned(buf);
        } else {
            decoder.feed(piece);
        }
    }
}

/// Polls until the decoder needs input, ends or fails; checks and keeps records.
fn poll_until_stuck(
    decoder: &mut WalDecoder,
    spec: &StreamSpec,
    records: &mut Vec<Record>,
) -> Last {
    loop {
        match decoder.poll() {
            Ok(Poll::Record(record)) => {
                check_record(&record, spec.start, records.last());
                exercise_record(&record, decoder.pg_major());
                if spec.recycle {
                    records.push(record.clone());
                    decoder.recycle(record);
                } else {
                    records.push(record);
                }
            }
            Ok(Poll::NeedMore) => return Last::NeedMore,
            Ok(Poll::EndOfWal { lsn, reason }) => return Last::End { lsn, reason },
            Err(e) => {
                let _ = e.to_string();
                return Last::Failed(e);
            }
        }
    }
}

/// What the decoder promises about every record it returns.
fn check_record(record: &Record, start: Lsn, prev: Option<&Record>) {
    assert_eq!(
        record.bytes().len(),
        record.tot_len as usize,
        "record at {} is not xl_tot_len long",
        record.lsn
    );
    assert_eq!(
        record.lsn.0 % 8,
        0,
        "record at unaligned LSN {}",
        record.lsn
    );
    assert!(
        record.lsn >= start,
        "record at {} before the start {start}",
        record.lsn
    );
    assert!(
        record.end_lsn > record.lsn,
        "record at {} ends at {}",
        record.lsn,
        record.end_lsn
    );
    if let Some(prev) = prev {
        assert!(
            record.lsn >= prev.end_lsn,
            "record at {} overlaps the previous one ({} to {})",
            record.lsn,
            prev.lsn,
            prev.end_lsn
        );
    }
}

/// After an end or an error, `poll` must repeat the same answer.
fn check_repeats(decoder: &mut WalDecoder, last: &Last) {
    let again = match decoder.poll() {
        Ok(Poll::EndOfWal { lsn, reason }) => Last::End { lsn, reason },
        Ok(Poll::NeedMore) => Last::NeedMore,
        Ok(Poll::Record(r)) => panic!("poll returned a record at {} after {last:?}", r.lsn),
        Err(e) => Last::Failed(e),
    };
    assert_eq!(&again, last, "poll does not repeat its final answer");
}
