//! Heap and Heap2 records, layouts of `access/heapam_xlog.h`, PostgreSQL 15.

use super::super::error::DecodeErrorKind;
use super::super::event::{
    Confirm, Delete, Insert, MultiInsert, Truncate, TupleFragment, Update, WalEvent,
};
use super::super::reader::ByteReader;
use super::super::record::Record;
use super::{main_reader, other, required_block};

/// Opcode bits of `xl_info` for Heap and Heap2 (`XLOG_HEAP_OPMASK`).
const XLOG_HEAP_OPMASK: u8 = 0x70;
/// `XLOG_HEAP_INIT_PAGE`: the target page was re-initialised.
const XLOG_HEAP_INIT_PAGE: u8 = 0x80;

const XLOG_HEAP_INSERT: u8 = 0x00;
const XLOG_HEAP_DELETE: u8 = 0x10;
const XLOG_HEAP_UPDATE: u8 = 0x20;
const XLOG_HEAP_TRUNCATE: u8 = 0x30;
const XLOG_HEAP_HOT_UPDATE: u8 = 0x40;
const XLOG_HEAP_CONFIRM: u8 = 0x50;
const XLOG_HEAP2_MULTI_INSERT: u8 = 0x50;

const XLH_TRUNCATE_CASCADE: u8 = 1 << 0;
const XLH_TRUNCATE_RESTART_SEQS: u8 = 1 << 1;

/// Size of `xl_heap_header` as written (`SizeOfHeapHeader`).
const HEAP_HEADER_LEN: usize = 5;

/// Heap rmgr: insert, delete, update, truncate, confirm.
pub(super) fn heap(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    match record.info & XLOG_HEAP_OPMASK {
        XLOG_HEAP_INSERT => insert(record),
        XLOG_HEAP_DELETE => delete(record),
        XLOG_HEAP_UPDATE => update(record, false),
        XLOG_HEAP_HOT_UPDATE => update(record, true),
        XLOG_HEAP_TRUNCATE => truncate(record),
        XLOG_HEAP_CONFIRM => confirm(record),
        _ => Ok(other(record)),
    }
}

/// Heap2 rmgr: multi-insert; the rest (pruning, freezing, visibility, new cid) is physical.
pub(super) fn heap2(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    match record.info & XLOG_HEAP_OPMASK {
        XLOG_HEAP2_MULTI_INSERT => multi_insert(record),
        _ => Ok(other(record)),
    }
}

/// An `xl_heap_header` followed by a tuple fragment.
fn tuple(bytes: &[u8], what: &'static str) -> Result<TupleFragment, DecodeErrorKind> {
    let mut r = ByteReader::new(bytes);
    let infomask2 = r.u16(what)?;
    let infomask = r.u16(what)?;
    let hoff = r.u8(what)?;
    Ok(TupleFragment {
        infomask2,
        infomask,
        hoff,
        data: r.rest().to_vec(),
    })
}

/// `xl_heap_insert` (3 bytes): offnum, flags. Block 0 data: header + tuple.
fn insert(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_heap_insert";
    let mut r = main_reader(record);
    let offnum = r.u16(WHAT)?;
    let flags = r.u8(WHAT)?;
    r.finish(WHAT)?;
    let block = required_block(record, 0)?;
    let tuple = if flags & Insert::CONTAINS_NEW_TUPLE != 0 {
        Some(new_tuple(record.block_data(block))?)
    } else {
        None
    };
    Ok(WalEvent::Insert(Insert {
        rel: block.rel,
        block: block.block,
        offnum,
        flags,
        init_page: record.info & XLOG_HEAP_INIT_PAGE != 0,
        tuple,
    }))
}

/// The new tuple of a block's data, which must be there when the record says so.
fn new_tuple(data: &[u8]) -> Result<TupleFragment, DecodeErrorKind> {
    if data.len() < HEAP_HEADER_LEN {
        return Err(DecodeErrorKind::Truncated {
            what: "new tuple",
            need: HEAP_HEADER_LEN,
            have: data.len(),
        });
    }
    tuple(data, "new tuple")
}

/// `xl_heap_delete` (8 bytes): xmax, offnum, infobits_set, flags; then the old tuple if logged.
fn delete(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_heap_delete";
    let mut r = main_reader(record);
    let xmax = r.u32(WHAT)?;
    let offnum = r.u16(WHAT)?;
    let _infobits = r.u8(WHAT)?;
    let flags = r.u8(WHAT)?;
    let old = old_tuple(
        &mut r,
        flags & (Delete::CONTAINS_OLD_TUPLE | Delete::CONTAINS_OLD_KEY) != 0,
    )?;
    let block = required_block(record, 0)?;
    Ok(WalEvent::Delete(Delete {
        rel: block.rel,
        block: block.block,
        offnum,
        xmax,
        flags,
        old,
    }))
}

/// The old-row image at the end of the main data, if the flags announce one.
fn old_tuple(
    r: &mut ByteReader<'_>,
    present: bool,
) -> Result<Option<TupleFragment>, DecodeErrorKind> {
    if !present {
        r.finish("heap record")?;
        return Ok(None);
    }
    if r.remaining() < HEAP_HEADER_LEN {
        return Err(DecodeErrorKind::Truncated {
            what: "old tuple",
            need: HEAP_HEADER_LEN,
            have: r.remaining(),
        });
    }
    tuple(r.rest(), "old tuple").map(Some)
}

/// `xl_heap_update` (14 bytes): old_xmax, old_offnum, old_infobits_set, flags,
/// new_xmax, new_offnum; then the old tuple if logged. Block 0 is the new
/// tuple's page (data: the new tuple), block 1 the old page when different.
fn update(record: &Record, hot: bool) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_heap_update";
    let mut r = main_reader(record);
    let old_xmax = r.u32(WHAT)?;
    let old_offnum = r.u16(WHAT)?;
    let _old_infobits = r.u8(WHAT)?;
    let flags = r.u8(WHAT)?;
    let _new_xmax = r.u32(WHAT)?;
    let new_offnum = r.u16(WHAT)?;
    let old = old_tuple(
        &mut r,
        flags & (Update::CONTAINS_OLD_TUPLE | Update::CONTAINS_OLD_KEY) != 0,
    )?;
    let new_block = required_block(record, 0)?;
    let old_block = record.block(1).unwrap_or(new_block);
    let new = if flags & Update::CONTAINS_NEW_TUPLE != 0 {
        if flags & (Update::PREFIX_FROM_OLD | Update::SUFFIX_FROM_OLD) != 0 {
            return Err(DecodeErrorKind::NotDecodable {
                reason: "the new tuple is prefix/suffix-compressed against the old one",
            });
        }
        Some(new_tuple(record.block_data(new_block))?)
    } else {
        None
    };
    Ok(WalEvent::Update(Update {
        rel: new_block.rel,
        hot,
        old_block: old_block.block,
        old_offnum,
        new_block: new_block.block,
        new_offnum,
        old_xmax,
        flags,
        old,
        new,
    }))
}

/// `xl_heap_truncate` (12 bytes + relids): dbId, nrelids, flags, relids[].
fn truncate(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_heap_truncate";
    let mut r = main_reader(record);
    let db = r.u32(WHAT)?;
    let nrelids = r.u32(WHAT)? as usize;
    let flags = r.u8(WHAT)?;
    r.skip(3, WHAT)?;
    let relids = r.u32_array(nrelids, "xl_heap_truncate relids")?;
    r.finish(WHAT)?;
    Ok(WalEvent::Truncate(Truncate {
        db,
        relids,
        cascade: flags & XLH_TRUNCATE_CASCADE != 0,
        restart_seqs: flags & XLH_TRUNCATE_RESTART_SEQS != 0,
    }))
}

/// `xl_heap_confirm` (2 bytes): offnum.
fn confirm(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_heap_confirm";
    let mut r = main_reader(record);
    let offnum = r.u16(WHAT)?;
    r.finish(WHAT)?;
    let block = required_block(record, 0)?;
    Ok(WalEvent::Confirm(Confirm {
        rel: block.rel,
        block: block.block,
        offnum,
    }))
}

/// `xl_heap_multi_insert` (4 bytes): flags, pad, ntuples, then offsets[]
/// unless the page was re-initialised. Block 0 data: per tuple, at an even
/// offset, `xl_multi_insert_tuple` (7 bytes: datalen, infomask2, infomask,
/// hoff) and `datalen` bytes of tuple fragment.
fn multi_insert(record: &Record) -> Result<WalEvent, DecodeErrorKind> {
    const WHAT: &str = "xl_heap_multi_insert";
    let mut r = main_reader(record);
    let flags = r.u8(WHAT)?;
    r.skip(1, WHAT)?;
    let ntuples = r.u16(WHAT)?;
    let init_page = record.info & XLOG_HEAP_INIT_PAGE != 0;
    let offsets = if init_page {
        (1..=ntuples).collect()
    } else {
        let raw = r.bytes(usize::from(ntuples) * 2, "xl_heap_multi_insert offsets")?;
        raw.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    };
    r.finish(WHAT)?;
    let block = required_block(record, 0)?;
    let mut tuples = Vec::new();
    if flags & Insert::CONTAINS_NEW_TUPLE != 0 {
        const TUPLE: &str = "xl_multi_insert_tuple";
        let mut d = ByteReader::new(record.block_data(block));
        tuples.reserve(usize::from(ntuples));
        for _ in 0..ntuples {
            d.align(2, TUPLE)?;
            let datalen = usize::from(d.u16(TUPLE)?);
            let infomask2 = d.u16(TUPLE)?;
            let infomask = d.u16(TUPLE)?;
            let hoff = d.u8(TUPLE)?;
            let data = d.bytes(datalen, "multi-insert tuple data")?.to_vec();
            tuples.push(TupleFragment {
                infomask2,
                infomask,
                hoff,
                data,
            });
        }
        d.finish("multi-insert block data")?;
    }
    Ok(WalEvent::MultiInsert(MultiInsert {
        rel: block.rel,
        block: block.block,
        flags,
        init_page,
        offsets,
        tuples,
    }))
}
