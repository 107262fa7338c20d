//! Hand-made `wal_stream` inputs that once decoded differently when fed
//! whole and when fed in pieces of at most 16 bytes, kept as regression
//! cases now that the decoder is fixed.
//!
//! 1. A page where a short header is due but whose `XLP_LONG_HEADER` bit is
//!    set: the page header check used to read 40 bytes there, and failed as
//!    "truncated long page header" when fewer had been fed. It now reads
//!    only the 24 bytes due, whatever the flag says.
//! 2. A record whose header continues on the next page: the header used to
//!    be checked after taking as much of the record as was fed, so the
//!    torn-record check after a bad header started after a split-dependent
//!    number of bytes. The header is now checked as soon as it is complete.
//!
//! The seed generator adds them to the `wal_stream` seeds (named
//! `known-<name>`), so that after any `scripts/fuzz.sh` run they can be
//! replayed with `scripts/fuzz.sh wal_stream fuzz/seeds/wal_stream/known-<name>`.
//! The tests below check that whole and split feeding agree on them.

use crate::stream::{encode, StartMode, StreamParams};

const PAGE: usize = 8192;
const MIB: u64 = 1 << 20;
const MAGIC_PG15: u16 = 0xD110;
const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
const XLP_LONG_HEADER: u16 = 0x0002;

/// A 24-byte short page header.
fn short_header(info: u16, page_addr: u64, rem_len: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(40);
    h.extend_from_slice(&MAGIC_PG15.to_le_bytes());
    h.extend_from_slice(&info.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes()); // timeline
    h.extend_from_slice(&page_addr.to_le_bytes());
    h.extend_from_slice(&rem_len.to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    h
}

/// A page of 1 MiB-segment WAL starting with a long header (40 bytes) for
/// `page_addr`, the rest zero.
fn long_header_page(page_addr: u64) -> Vec<u8> {
    let mut page = short_header(XLP_LONG_HEADER, page_addr, 0);
    page.extend_from_slice(&1u64.to_le_bytes()); // system identifier
    page.extend_from_slice(&(MIB as u32).to_le_bytes());
    page.extend_from_slice(&(PAGE as u32).to_le_bytes());
    page.resize(PAGE, 0);
    page
}

/// An input starting at `start` (1 MiB segments), fed in pieces of 1 to 16 bytes.
fn input(mode: StartMode, start: u64, wal: &[u8]) -> Vec<u8> {
    let params = StreamParams {
        big_segments: false,
        mode,
        segno: (start / MIB) as u32,
        offset: (start % MIB) as u32,
        piece_exp: 4,
        seed: 1,
        owned: false,
        recycle: false,
    };
    encode(&params, wal)
}

/// A page in the middle of a segment carrying a long header for its own
/// address: "unexpected long header" (once, in pieces, "truncated long page
/// header").
pub fn long_header_flag() -> Vec<u8> {
    let start = 7 * MIB + PAGE as u64;
    input(StartMode::Page, start, &long_header_page(start))
}

/// A page in the middle of a segment still holding the long header of an
/// older segment start: the WAL ends there (recycled page); once, in
/// pieces, an error ("truncated long page header").
pub fn long_header_recycled() -> Vec<u8> {
    let start = 7 * MIB + PAGE as u64;
    input(StartMode::Page, start, &long_header_page(6 * MIB))
}

/// A first record 8 bytes before the last page of segment 7, its header
/// continuing on that page, with an `xl_prev` that is not before it and a
/// non-zero body; zeros after it up to the end of the segment. The bad
/// `xl_prev` is an error, because the body right after the header is not
/// zero (once, fed whole, the WAL ended with a torn record instead).
pub fn torn_header_check() -> Vec<u8> {
    let last_page = 8 * MIB - PAGE as u64;
    let start = last_page - 8;
    let tot_len: u32 = 100;
    let mut record = Vec::new();
    record.extend_from_slice(&tot_len.to_le_bytes());
    record.extend_from_slice(&0u32.to_le_bytes()); // xl_xid
    record.extend_from_slice(&0xFFFF_FFFFu64.to_le_bytes()); // xl_prev, after the record
    record.extend_from_slice(&[0, 0, 0, 0]); // xl_info, xl_rmid (XLOG), padding
    record.extend_from_slice(&0u32.to_le_bytes()); // xl_crc
    record.resize(tot_len as usize, 0xAA);

    let mut wal = short_header(0, last_page - PAGE as u64, 0);
    wal.resize(PAGE - 8, 0);
    wal.extend_from_slice(&record[..8]);
    wal.extend_from_slice(&short_header(
        XLP_FIRST_IS_CONTRECORD,
        last_page,
        tot_len - 8,
    ));
    wal.extend_from_slice(&record[8..]);
    wal.resize(2 * PAGE, 0);
    input(StartMode::Aligned, start, &wal)
}

/// Every known case, by name.
pub fn cases() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("split-long-header-flag", long_header_flag()),
        ("split-long-header-recycled", long_header_recycled()),
        ("split-torn-header-check", torn_header_check()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{run, split_changes_result};

    /// Byte 9 of a `wal_stream` input: the split size exponent.
    const PIECE_EXP: usize = 9;

    #[test]
    fn known_cases_give_the_same_result_whole_and_split() {
        for (name, input) in cases() {
            let mut byte_by_byte = input.clone();
            byte_by_byte[PIECE_EXP] = 0;
            for (how, input) in [("pieces", input), ("byte by byte", byte_by_byte)] {
                assert!(
                    !split_changes_result(&input),
                    "{name}: feeding {how} changes the result"
                );
                run(&input);
            }
        }
    }
}
