//! Record layouts of PostgreSQL 15 (page magic 0xD110).
//!
//! Each submodule reads the main data (and block data) of one group of
//! resource managers, following the structs of the PostgreSQL 15 headers
//! named in its documentation. Later versions reuse what did not change.

mod heap;
mod misc;
mod xact;

use super::error::{DecodeError, DecodeErrorKind};
use super::event::WalEvent;
use super::reader::ByteReader;
use super::record::{BlockRef, Record};
use super::rmgr::RmgrId;

/// Interprets a PostgreSQL 15 record.
pub(crate) fn interpret(record: &Record) -> Result<WalEvent, DecodeError> {
    let result = match record.rmid {
        RmgrId::XLOG => misc::xlog(record),
        RmgrId::XACT => xact::interpret(record),
        RmgrId::SMGR => misc::smgr(record),
        RmgrId::STANDBY => misc::standby(record),
        RmgrId::HEAP => heap::heap(record),
        RmgrId::HEAP2 => heap::heap2(record),
        RmgrId::LOGICAL_MESSAGE => misc::logical_message(record),
        _ => Ok(other(record)),
    };
    result.map_err(|kind| DecodeError::new(record.lsn, kind).with_rmgr(record.rmid))
}

/// The event of a record logical decoding ignores.
fn other(record: &Record) -> WalEvent {
    WalEvent::Other {
        rmid: record.rmid,
        info: record.info,
    }
}

/// The block reference with id `id`, which the record type requires.
fn required_block(record: &Record, id: u8) -> Result<&BlockRef, DecodeErrorKind> {
    record.block(id).ok_or(DecodeErrorKind::MissingBlock { id })
}

/// A reader over the main data.
fn main_reader(record: &Record) -> ByteReader<'_> {
    ByteReader::new(record.main_data())
}

#[cfg(test)]
mod tests;
