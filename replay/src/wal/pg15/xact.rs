//! Transaction records (XACT rmgr), layouts of `access/xact.h` and
//! `access/twophase.c`, PostgreSQL 15.

use crate::lsn::Lsn;

use super::super::error::DecodeErrorKind;
use super::super::event::{Abort, Commit, Prepare, TwoPhase, WalEvent, XactOrigin};
use super::super::page::PgMajor;
use super::super::record::{Record, RelFileLocator};
use super::{main_reader, other};

const XLOG_XACT_OPMASK: u8 = 0x70;
const XLOG_XACT_HAS_INFO: u8 = 0x80;
const XLOG_XACT_COMMIT: u8 = 0x00;
const XLOG_XACT_PREPARE: u8 = 0x10;
const XLOG_XACT_ABORT: u8 = 0x20;
const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
const XLOG_XACT_ASSIGNMENT: u8 = 0x50;
const XLOG_XACT_INVALIDATIONS: u8 = 0x60;

const XACT_XINFO_HAS_DBINFO: u32 = 1 << 0;
const XACT_XINFO_HAS_SUBXACTS: u32 = 1 << 1;
const XACT_XINFO_HAS_RELFILENODES: u32 = 1 << 2;
const XACT_XINFO_HAS_INVALS: u32 = 1 << 3;
const XACT_XINFO_HAS_TWOPHASE: u32 = 1 << 4;
const XACT_XINFO_HAS_ORIGIN: u32 = 1 << 5;
const XACT_XINFO_HAS_GID: u32 = 1 << 7;
const XACT_XINFO_HAS_DROPPED_STATS: u32 = 1 << 8;

/// Size of one `xl_xact_stats_item`: kind, dboid, objoid in 15-17; kind,
/// dboid and a 64-bit objid (two halves) from 18.
fn stats_item_len(major: PgMajor) -> usize {
    if major >= PgMajor::Pg18 {
        16
    } else {
        12
    }
}
/// Size of one `SharedInvalidationMessage`.
const INVAL_MSG_LEN: usize = 16;
/// `TWOPHASE_MAGIC` at the start of a prepare record's state data.
const TWOPHASE_MAGIC: u32 = 0x57F9_4534;
/// `MAXALIGN(sizeof(xl_xact_prepare))`.
const PREPARE_HEADER_LEN: usize = 72;

pub(super) fn interpret(record: &Record, major: PgMajor) -> Result<WalEvent, DecodeErrorKind> {
    let has_info = record.info & XLOG_XACT_HAS_INFO != 0;
    match record.info & XLOG_XACT_OPMASK {
        XLOG_XACT_COMMIT | XLOG_XACT_COMMIT_PREPARED => commit(record, major, has_info),
        XLOG_XACT_ABORT | XLOG_XACT_ABORT_PREPARED => abort(record, major, has_info),
        XLOG_XACT_PREPARE => prepare(record),
        XLOG_XACT_ASSIGNMENT => {
            // xl_xact_assignment: xtop, nsubxacts, xsub[].
            let mut r = main_reader(record);
            let top = r.u32("xl_xact_assignment")?;
            let n = r.count("xl_xact_assignment")?;
            let subxacts = r.u32_array(n, "xl_xact_assignment subxacts")?;
            r.finish("xl_xact_assignment")?;
            Ok(WalEvent::Assignment { top, subxacts })
        }
        XLOG_XACT_INVALIDATIONS => {
            // xl_xact_invals: nmsgs, msgs[].
            let mut r = main_reader(record);
            let n = r.count("xl_xact_invals")?;
            r.skip_items(n, INVAL_MSG_LEN, "xl_xact_invals messages")?;
            r.finish("xl_xact_invals")?;
            Ok(WalEvent::Invalidations { count: n as u32 })
        }
        _ => Ok(other(record)),
    }
}

/// The parts of a commit or abort record (`ParseCommitRecord`/`ParseAbortRecord` order).
struct Parsed {
    xact_time: i64,
    xinfo: u32,
    db: Option<(u32, u32)>,
    subxacts: Vec<u32>,
    rels: Vec<RelFileLocator>,
    invalidations: u32,
    twophase: Option<TwoPhase>,
    origin: Option<XactOrigin>,
}

/// Reads `xl_xact_commit`/`xl_xact_abort` and the optional parts `xinfo` announces.
/// Invalidation messages only exist in commits.
fn parse(
    record: &Record,
    major: PgMajor,
    has_info: bool,
    is_commit: bool,
) -> Result<Parsed, DecodeErrorKind> {
    let what = if is_commit {
        "xl_xact_commit"
    } else {
        "xl_xact_abort"
    };
    let mut r = main_reader(record);
    let xact_time = r.i64(what)?;
    let xinfo = if has_info { r.u32("xl_xact_xinfo")? } else { 0 };
    let db = if xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        Some((r.u32("xl_xact_dbinfo")?, r.u32("xl_xact_dbinfo")?))
    } else {
        None
    };
    let subxacts = if xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        let n = r.count("xl_xact_subxacts")?;
        r.u32_array(n, "xl_xact_subxacts")?
    } else {
        Vec::new()
    };
    let rels = if xinfo & XACT_XINFO_HAS_RELFILENODES != 0 {
        let n = r.count("xl_xact_relfilenodes")?;
        let raw = r.u32_array(n.saturating_mul(3), "xl_xact_relfilenodes")?;
        raw.chunks_exact(3)
            .map(|c| RelFileLocator {
                spc: c[0],
                db: c[1],
                rel: c[2],
            })
            .collect()
    } else {
        Vec::new()
    };
    if xinfo & XACT_XINFO_HAS_DROPPED_STATS != 0 {
        let n = r.count("xl_xact_stats_items")?;
        r.skip_items(n, stats_item_len(major), "xl_xact_stats_items")?;
    }
    let mut invalidations = 0;
    if is_commit && xinfo & XACT_XINFO_HAS_INVALS != 0 {
        let n = r.count("xl_xact_invals")?;
        r.skip_items(n, INVAL_MSG_LEN, "xl_xact_invals")?;
        invalidations = n as u32;
    }
    let twophase = if xinfo & XACT_XINFO_HAS_TWOPHASE != 0 {
        let xid = r.u32("xl_xact_twophase")?;
        let gid = if xinfo & XACT_XINFO_HAS_GID != 0 {
            Some(r.until_nul("two-phase gid")?.to_vec())
        } else {
            None
        };
        Some(TwoPhase { xid, gid })
    } else {
        None
    };
    let origin = if xinfo & XACT_XINFO_HAS_ORIGIN != 0 {
        Some(XactOrigin {
            lsn: Lsn(r.u64("xl_xact_origin")?),
            timestamp: r.i64("xl_xact_origin")?,
        })
    } else {
        None
    };
    r.finish(what)?;
    Ok(Parsed {
        xact_time,
        xinfo,
        db,
        subxacts,
        rels,
        invalidations,
        twophase,
        origin,
    })
}

fn commit(record: &Record, major: PgMajor, has_info: bool) -> Result<WalEvent, DecodeErrorKind> {
    let p = parse(record, major, has_info, true)?;
    let xid = p.twophase.as_ref().map_or(record.xid, |t| t.xid);
    Ok(WalEvent::Commit(Commit {
        xid,
        subxacts: p.subxacts,
        twophase: p.twophase,
        commit_time: p.origin.map_or(p.xact_time, |o| o.timestamp),
        xact_time: p.xact_time,
        db: p.db.map(|(db, _)| db),
        tablespace: p.db.map(|(_, ts)| ts),
        dropped_rels: p.rels,
        invalidations: p.invalidations,
        origin: p.origin,
        xinfo: p.xinfo,
    }))
}

fn abort(record: &Record, major: PgMajor, has_info: bool) -> Result<WalEvent, DecodeErrorKind> {
    let p = parse(record, major, has_info, false)?;
    let xid = p.twophase.as_ref().map_or(record.xid, |t| t.xid);
    Ok(WalEvent::Abort(Abort {
        xid,
        subxacts: p.subxacts,
        twophase: p.twophase,
        abort_time: p.xact_time,
        db: p.db.map(|(db, _)| db),
        dropped_rels: p.rels,
        origin: p.origin,
        xinfo: p.xinfo,
    }))
}

/// `xl_xact_prepare` (72 bytes), then the MAXALIGNed GID and subxact array;
/// the rest of the two-phase state (relations, stats, invalidations,
/// per-rmgr records) is not needed.
fn prepare(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_xact_prepare";
    let mut r = main_reader(record);
    let magic = r.u32(WHAT)?;
    if magic != TWOPHASE_MAGIC {
        return Err(DecodeErrorKind::Malformed {
            what: WHAT,
            detail: format!("magic 0x{magic:08X}, expected 0x{TWOPHASE_MAGIC:08X}"),
        });
    }
    let _total_len = r.u32(WHAT)?;
    let xid = r.u32(WHAT)?;
    let db = r.u32(WHAT)?;
    let prepared_at = r.i64(WHAT)?;
    let _owner = r.u32(WHAT)?;
    let nsubxacts = r.count(WHAT)?;
    r.skip(52 - 32, WHAT)?;
    let _initfileinval = r.u8(WHAT)?;
    r.skip(1, WHAT)?;
    let gidlen = usize::from(r.u16(WHAT)?);
    let origin_lsn = Lsn(r.u64(WHAT)?);
    let origin_timestamp = r.i64(WHAT)?;
    debug_assert_eq!(r.position(), PREPARE_HEADER_LEN);
    let gid_area = r.bytes(gidlen.next_multiple_of(8), "prepared gid")?;
    let gid = gid_area[..gidlen]
        .split(|&b| b == 0)
        .next()
        .unwrap_or(&[])
        .to_vec();
    let subxacts = r.u32_array(nsubxacts, "prepared subxacts")?;
    Ok(WalEvent::Prepare(Prepare {
        xid,
        gid,
        subxacts,
        prepared_at,
        db,
        origin: origin_lsn.is_valid().then_some(XactOrigin {
            lsn: origin_lsn,
            timestamp: origin_timestamp,
        }),
    }))
}
