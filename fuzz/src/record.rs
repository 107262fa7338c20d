//! The `wal_record` target: one record through `Record::parse` and
//! `interpret`; also what every target does with a decoded record.
//!
//! # Input layout
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | flags: bit 0 set = the rest is a whole record, header included, given to `Record::parse` unchanged |
//! | 1..5  | `xl_xid` (u32 LE) |
//! | 5     | `xl_info` |
//! | 6     | `xl_rmid` |
//! | 7..   | the record body (fragment headers and payloads) |
//!
//! Without bit 0 the harness writes the 24-byte header itself, with the
//! right `xl_tot_len` and CRC, so that the fuzzer spends its effort on the
//! fragments and the rmgr-specific data rather than on the length check.

use walfill_replay::lsn::Lsn;
use walfill_replay::wal::{interpret, record_crc, PgMajor, Record, WalEvent, RECORD_HEADER_LEN};

use crate::bytes::Input;
use crate::tuple::exercise_fragment;

/// Bytes of parameters before the record body.
pub const HEADER_LEN: usize = 7;

/// LSN given to parsed records (the first record position of a segment).
const RECORD_LSN: Lsn = Lsn(0x0700_0028);
/// `xl_prev` written into built headers.
const PREV_LSN: Lsn = Lsn(0x0700_0000);

/// Builds a `wal_record` input from a real record (header included): keeps
/// its xid, info and rmid and the body after the header.
pub fn encode(record: &[u8]) -> Vec<u8> {
    let header = record.get(..RECORD_HEADER_LEN as usize).unwrap_or_default();
    let xid = header.get(4..8).unwrap_or(&[0; 4]);
    let info = header.get(16).copied().unwrap_or(0);
    let rmid = header.get(17).copied().unwrap_or(0);
    let mut out = vec![0u8];
    out.extend_from_slice(xid);
    out.push(info);
    out.push(rmid);
    out.extend_from_slice(record.get(RECORD_HEADER_LEN as usize..).unwrap_or_default());
    out
}

/// Builds a raw-mode input: `record` goes to `Record::parse` unchanged.
pub fn encode_raw(record: &[u8]) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend_from_slice(record);
    out
}

/// The whole record (header included) an input stands for.
pub fn record_bytes(data: &[u8]) -> Vec<u8> {
    let mut input = Input::new(data);
    let flags = input.u8();
    if flags & 1 != 0 {
        return input.rest().to_vec();
    }
    let xid = input.u32();
    let info = input.u8();
    let rmid = input.u8();
    let body = input.rest();
    let tot_len = RECORD_HEADER_LEN as usize + body.len();
    let mut bytes = Vec::with_capacity(tot_len);
    bytes.extend_from_slice(&(tot_len as u32).to_le_bytes());
    bytes.extend_from_slice(&xid.to_le_bytes());
    bytes.extend_from_slice(&PREV_LSN.0.to_le_bytes());
    bytes.extend_from_slice(&[info, rmid, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(body);
    let crc = record_crc(&bytes);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Runs the `wal_record` harness on one input.
pub fn run(data: &[u8]) {
    let bytes = record_bytes(data);
    let _ = record_crc(&bytes);
    let end = RECORD_LSN.advance(bytes.len().next_multiple_of(8) as u64);
    let record = match Record::parse(RECORD_LSN, end, bytes.clone()) {
        Ok(record) => record,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert_eq!(
        record.bytes(),
        &bytes[..],
        "the record does not keep its bytes"
    );
    assert!(
        record.blocks.windows(2).all(|w| w[0].id <= w[1].id),
        "block references not in ascending id order: {:?}",
        record.blocks.iter().map(|b| b.id).collect::<Vec<_>>()
    );
    exercise_record(&record, Some(PgMajor::Pg15));
    for major in [PgMajor::Pg16, PgMajor::Pg17, PgMajor::Pg18] {
        if let Err(e) = interpret(&record, major) {
            let _ = e.to_string();
        }
    }
}

/// Reads every part of a decoded record, interprets it with `major` (PG 15
/// when not known yet) and decodes the tuples of row events.
pub fn exercise_record(record: &Record, major: Option<PgMajor>) {
    let _ = record.rmgr_info();
    let _ = record.rmid.to_string();
    let _ = record.main_data().len();
    let _ = record.fpi_len();
    for block in &record.blocks {
        let _ = record.block_data(block).len();
        if let Some(image) = &block.image {
            let _ = record.image_bytes(image).len();
            let _ = image.compression();
        }
        let _ = block.fork.name();
    }
    let event = match interpret(record, major.unwrap_or(PgMajor::Pg15)) {
        Ok(event) => event,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    match &event {
        WalEvent::Insert(i) => i.tuple.iter().for_each(exercise_fragment),
        WalEvent::MultiInsert(m) => m.tuples.iter().for_each(exercise_fragment),
        WalEvent::Update(u) => u.old.iter().chain(u.new.iter()).for_each(exercise_fragment),
        WalEvent::Delete(d) => d.old.iter().for_each(exercise_fragment),
        _ => {}
    }
}
