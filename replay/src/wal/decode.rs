//! The one place that picks the version-specific record layouts.

use super::error::DecodeError;
use super::event::WalEvent;
use super::page::PgMajor;
use super::pg15;
use super::record::Record;

/// What `record` means for logical decoding, reading it with the layouts of
/// the PostgreSQL version `major` (from [`WalDecoder::pg_major`](super::WalDecoder::pg_major)).
///
/// Records logical decoding does not act on become [`WalEvent::Other`].
/// Errors name the record's LSN and resource manager.
pub fn interpret(record: &Record, major: PgMajor) -> Result<WalEvent, DecodeError> {
    match major {
        PgMajor::Pg15 | PgMajor::Pg16 | PgMajor::Pg17 | PgMajor::Pg18 => {
            pg15::interpret(record, major)
        }
    }
}
