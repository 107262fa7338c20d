//! XLOG, SMGR, Standby and LogicalMessage records, PostgreSQL 15 layouts
//! (`catalog/pg_control.h`, `access/xlog_internal.h`,
//! `catalog/storage_xlog.h`, `storage/standbydefs.h`,
//! `replication/message.h`).

use crate::lsn::Lsn;

use super::super::error::DecodeErrorKind;
use super::super::event::{Checkpoint, LogicalMessage, RunningXacts, WalEvent};
use super::super::page::PgMajor;
use super::super::record::{ForkNumber, Record, RelFileLocator};
use super::{main_reader, other};

const XLOG_CHECKPOINT_SHUTDOWN: u8 = 0x00;
const XLOG_SWITCH: u8 = 0x40;
const XLOG_PARAMETER_CHANGE: u8 = 0x60;
const XLOG_END_OF_RECOVERY: u8 = 0x90;
const XLOG_SMGR_CREATE: u8 = 0x10;
const XLOG_RUNNING_XACTS: u8 = 0x10;
const XLOG_LOGICAL_MESSAGE: u8 = 0x00;

/// XLOG rmgr: checkpoints, segment switch, parameter change, end of recovery.
pub(super) fn xlog(record: &Record, major: PgMajor) -> Result<WalEvent, DecodeErrorKind> {
    match record.rmgr_info() {
        XLOG_CHECKPOINT_SHUTDOWN => {
            // CheckPoint (88 bytes): redo 0, ThisTimeLineID 8, PrevTimeLineID 12,
            // fullPageWrites 16, nextXid 24, ..., oldestActiveXid 80.
            const WHAT: &str = "CheckPoint";
            let mut r = main_reader(record);
            let redo = Lsn(r.u64(WHAT)?);
            let timeline = r.u32(WHAT)?;
            r.skip(24 - 12, WHAT)?;
            let next_full_xid = r.u64(WHAT)?;
            r.skip(80 - 32, WHAT)?;
            let oldest_active_xid = r.u32(WHAT)?;
            r.skip(4, WHAT)?;
            r.finish(WHAT)?;
            Ok(WalEvent::CheckpointShutdown(Checkpoint {
                redo,
                timeline,
                next_full_xid,
                oldest_active_xid,
            }))
        }
        XLOG_SWITCH => Ok(WalEvent::Switch),
        XLOG_PARAMETER_CHANGE => {
            // xl_parameter_change (28 bytes): wal_level at 20.
            const WHAT: &str = "xl_parameter_change";
            let mut r = main_reader(record);
            r.skip(20, WHAT)?;
            let wal_level = r.i32(WHAT)?;
            r.skip(4, WHAT)?;
            r.finish(WHAT)?;
            Ok(WalEvent::ParameterChange { wal_level })
        }
        XLOG_END_OF_RECOVERY => {
            // xl_end_of_recovery (16 bytes): end_time, ThisTimeLineID,
            // PrevTimeLineID; from 17 (24 bytes) then wal_level and padding.
            const WHAT: &str = "xl_end_of_recovery";
            let mut r = main_reader(record);
            let _end_time = r.i64(WHAT)?;
            let timeline = r.u32(WHAT)?;
            let prev_timeline = r.u32(WHAT)?;
            if major >= PgMajor::Pg17 {
                let _wal_level = r.i32(WHAT)?;
                r.skip(4, WHAT)?;
            }
            r.finish(WHAT)?;
            Ok(WalEvent::EndOfRecovery {
                timeline,
                prev_timeline,
            })
        }
        _ => Ok(other(record)),
    }
}

/// SMGR rmgr: relation file creation.
pub(super) fn smgr(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    if record.rmgr_info() != XLOG_SMGR_CREATE {
        return Ok(other(record));
    }
    // xl_smgr_create (16 bytes): RelFileNode, ForkNumber (int32).
    const WHAT: &str = "xl_smgr_create";
    let mut r = main_reader(record);
    let rel = RelFileLocator {
        spc: r.u32(WHAT)?,
        db: r.u32(WHAT)?,
        rel: r.u32(WHAT)?,
    };
    let fork = r.u32(WHAT)?;
    r.finish(WHAT)?;
    let fork = u8::try_from(fork).map_err(|_| DecodeErrorKind::Malformed {
        what: WHAT,
        detail: format!("fork number {fork}"),
    })?;
    Ok(WalEvent::SmgrCreate {
        rel,
        fork: ForkNumber(fork),
    })
}

/// Standby rmgr: the running-transactions snapshot.
pub(super) fn standby(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    if record.rmgr_info() != XLOG_RUNNING_XACTS {
        return Ok(other(record));
    }
    // xl_running_xacts: xcnt 0, subxcnt 4, subxid_overflow 8, nextXid 12,
    // oldestRunningXid 16, latestCompletedXid 20, xids[] 24.
    const WHAT: &str = "xl_running_xacts";
    let mut r = main_reader(record);
    let xcnt = r.count(WHAT)?;
    let subxcnt = r.count(WHAT)?;
    let subxid_overflow = r.u8(WHAT)? != 0;
    r.skip(3, WHAT)?;
    let next_xid = r.u32(WHAT)?;
    let oldest_running_xid = r.u32(WHAT)?;
    let latest_completed_xid = r.u32(WHAT)?;
    let xids = r.u32_array(xcnt, "xl_running_xacts xids")?;
    let subxids = r.u32_array(subxcnt, "xl_running_xacts subxids")?;
    r.finish(WHAT)?;
    Ok(WalEvent::RunningXacts(RunningXacts {
        next_xid,
        oldest_running_xid,
        latest_completed_xid,
        xids,
        subxids,
        subxid_overflow,
    }))
}

/// LogicalMessage rmgr.
pub(super) fn logical_message(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    if record.rmgr_info() != XLOG_LOGICAL_MESSAGE {
        return Ok(other(record));
    }
    // xl_logical_message: dbId 0, transactional 4, prefix_size 8, message_size 16,
    // then the NUL-terminated prefix and the payload.
    const WHAT: &str = "xl_logical_message";
    let mut r = main_reader(record);
    let db = r.u32(WHAT)?;
    let transactional = r.u8(WHAT)? != 0;
    r.skip(3, WHAT)?;
    let prefix_size = r.u64(WHAT)?;
    let message_size = r.u64(WHAT)?;
    let too_long = |n: u64| DecodeErrorKind::Truncated {
        what: WHAT,
        need: usize::try_from(n).unwrap_or(usize::MAX),
        have: 0,
    };
    let prefix_len = usize::try_from(prefix_size).map_err(|_| too_long(prefix_size))?;
    let message_len = usize::try_from(message_size).map_err(|_| too_long(message_size))?;
    let prefix = r.bytes(prefix_len, "logical message prefix")?;
    let Some((&0, prefix)) = prefix.split_last() else {
        return Err(DecodeErrorKind::Malformed {
            what: WHAT,
            detail: "prefix is not NUL-terminated".to_string(),
        });
    };
    let payload = r.bytes(message_len, "logical message payload")?;
    r.finish(WHAT)?;
    Ok(WalEvent::LogicalMessage(LogicalMessage {
        db,
        transactional,
        prefix: prefix.to_vec(),
        payload: payload.to_vec(),
    }))
}
