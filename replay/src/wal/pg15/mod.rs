//! Record layouts of PostgreSQL 15 (page magic 0xD110), and the few places
//! where 16, 17 and 18 differ in the records logical decoding reads.
//!
//! Each submodule reads the main data (and block data) of one group of
//! resource managers, following the structs of the PostgreSQL 15 headers
//! named in its documentation. Of those records, 16 changed none (its
//! `RelFileNode` became `RelFileLocator`, the same three OIDs); 17 added
//! `wal_level` to `xl_end_of_recovery`; 18 widened `xl_xact_stats_item`
//! (a 64-bit object ID). Records added later (17's `XLOG_CHECKPOINT_REDO`,
//! its new pruning records) are ones logical decoding ignores.

mod heap;
mod misc;
mod xact;

use super::error::{DecodeError, DecodeErrorKind};
use super::event::WalEvent;
use super::page::PgMajor;
use super::reader::ByteReader;
use super::record::{BlockRef, Record};
use super::rmgr::RmgrId;

/// Interprets a record written by PostgreSQL `major` (15 or later).
pub(crate) fn interpret(record: &Record, major: PgMajor) -> Result<WalEvent, DecodeError> {
    let result = match record.rmid {
        RmgrId::XLOG => misc::xlog(record, major),
        RmgrId::XACT => xact::interpret(record, major),
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
