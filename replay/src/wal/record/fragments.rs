//! Parsing the fragment headers of a record body and placing the payloads.
//!
//! This runs for every record, so it reads fixed-size groups of fields with
//! one bounds check each instead of field by field.

use std::ops::Range;

use super::super::error::DecodeErrorKind;
use super::block::{
    BlockImage, BlockRef, ForkNumber, RelFileLocator, BKPBLOCK_FORK_MASK, BKPBLOCK_HAS_DATA,
    BKPBLOCK_HAS_IMAGE, BKPBLOCK_SAME_REL, BKPIMAGE_COMPRESSED, BKPIMAGE_HAS_HOLE, BLCKSZ,
    MAX_BLOCK_ID,
};
use super::RECORD_HEADER_LEN;

const BLOCK_ID_DATA_SHORT: u8 = 255;
const BLOCK_ID_DATA_LONG: u8 = 254;
const BLOCK_ID_ORIGIN: u8 = 253;
const BLOCK_ID_TOPLEVEL_XID: u8 = 252;

/// What the fragment headers say, with payload ranges relative to the record start.
pub(super) struct Fragments {
    pub(super) blocks: Vec<BlockRef>,
    pub(super) toplevel_xid: Option<u32>,
    pub(super) origin: Option<u16>,
    pub(super) main_data: Range<usize>,
}

/// The next `N` bytes of `rest`, advancing it.
#[inline(always)]
fn take<'a, const N: usize>(
    rest: &mut &'a [u8],
    what: &'static str,
) -> Result<&'a [u8; N], DecodeErrorKind> {
    match rest.split_first_chunk::<N>() {
        Some((head, tail)) => {
            *rest = tail;
            Ok(head)
        }
        None => Err(truncated(what, N, rest.len())),
    }
}

#[cold]
#[inline(never)]
fn truncated(what: &'static str, need: usize, have: usize) -> DecodeErrorKind {
    DecodeErrorKind::Truncated { what, need, have }
}

fn u16_at(b: &[u8; 2]) -> u16 {
    u16::from_le_bytes(*b)
}

/// Parses the fragment headers of `body` (the record after its 24-byte header)
/// and assigns the payloads; `blocks` is an empty vector to fill, reused to
/// save an allocation.
pub(super) fn parse_fragments(
    body: &[u8],
    mut blocks: Vec<BlockRef>,
) -> Result<Fragments, DecodeErrorKind> {
    blocks.clear();
    let mut rest = body;
    let mut announced: u64 = 0;
    let mut toplevel_xid = None;
    let mut origin = None;
    let mut main_len: usize = 0;
    let mut last_rel: Option<RelFileLocator> = None;
    // Until the payloads are placed, a block's ranges hold only their lengths.
    while rest.len() as u64 > announced {
        let [id] = *take::<1>(&mut rest, "fragment id")?;
        match id {
            BLOCK_ID_DATA_SHORT => {
                let [len] = *take::<1>(&mut rest, "main data header")?;
                main_len = usize::from(len);
                announced += main_len as u64;
                break;
            }
            BLOCK_ID_DATA_LONG => {
                main_len = u32::from_le_bytes(*take::<4>(&mut rest, "main data header")?) as usize;
                announced += main_len as u64;
                break;
            }
            BLOCK_ID_ORIGIN => origin = Some(u16_at(take(&mut rest, "origin fragment")?)),
            BLOCK_ID_TOPLEVEL_XID => {
                toplevel_xid = Some(u32::from_le_bytes(*take::<4>(
                    &mut rest,
                    "top-level xid fragment",
                )?));
            }
            0..=MAX_BLOCK_ID => {
                if let Some(previous) = blocks.last().map(|b| b.id) {
                    if id <= previous {
                        return Err(DecodeErrorKind::OutOfOrderBlock { id, previous });
                    }
                }
                let block = parse_block_header(id, &mut rest, &mut last_rel)?;
                let image_len = block.image.as_ref().map_or(0, |i| i.bytes.len());
                announced += (image_len + block.data.len()) as u64;
                blocks.push(block);
            }
            _ => return Err(DecodeErrorKind::InvalidBlockId { id }),
        }
    }
    let actual = rest.len() as u64;
    if actual != announced {
        return Err(DecodeErrorKind::PayloadLengthMismatch { announced, actual });
    }
    // Payload offsets are relative to the record start (header included).
    let mut pos = RECORD_HEADER_LEN as usize + (body.len() - rest.len());
    for block in &mut blocks {
        if let Some(image) = block.image.as_mut() {
            let len = image.bytes.len();
            image.bytes = pos..pos + len;
            pos += len;
        }
        let len = block.data.len();
        block.data = pos..pos + len;
        pos += len;
    }
    Ok(Fragments {
        blocks,
        toplevel_xid,
        origin,
        main_data: pos..pos + main_len,
    })
}

/// Reads one block reference header after its id byte. The image and data
/// ranges of the result hold only their lengths (they start at 0).
fn parse_block_header(
    id: u8,
    rest: &mut &[u8],
    last_rel: &mut Option<RelFileLocator>,
) -> Result<BlockRef, DecodeErrorKind> {
    let invalid = |reason| DecodeErrorKind::InvalidBlock { id, reason };
    let [fork_flags, l0, l1] = *take::<3>(rest, "block header")?;
    let data_len = usize::from(u16::from_le_bytes([l0, l1]));
    let has_data = fork_flags & BKPBLOCK_HAS_DATA != 0;
    if has_data && data_len == 0 {
        return Err(invalid("BKPBLOCK_HAS_DATA set, but no data included"));
    }
    if !has_data && data_len != 0 {
        return Err(invalid(
            "BKPBLOCK_HAS_DATA not set, but data length is not zero",
        ));
    }
    let image = if fork_flags & BKPBLOCK_HAS_IMAGE != 0 {
        Some(parse_image_header(rest, id)?)
    } else {
        None
    };
    let (rel, block) = if fork_flags & BKPBLOCK_SAME_REL == 0 {
        let b = take::<16>(rest, "block relation")?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let rel = RelFileLocator {
            spc: word(0),
            db: word(4),
            rel: word(8),
        };
        (rel, word(12))
    } else {
        let rel = last_rel.ok_or(invalid(
            "BKPBLOCK_SAME_REL set on the first block reference",
        ))?;
        (rel, u32::from_le_bytes(*take::<4>(rest, "block number")?))
    };
    *last_rel = Some(rel);
    Ok(BlockRef {
        id,
        rel,
        fork: ForkNumber(fork_flags & BKPBLOCK_FORK_MASK),
        block,
        flags: fork_flags & !BKPBLOCK_FORK_MASK,
        image,
        data: 0..data_len,
    })
}

/// Reads an image header (`XLogRecordBlockImageHeader`, plus the hole length
/// of compressed images with a hole) and checks it as PostgreSQL's reader does.
fn parse_image_header(rest: &mut &[u8], id: u8) -> Result<BlockImage, DecodeErrorKind> {
    let invalid = |reason| DecodeErrorKind::InvalidBlock { id, reason };
    let [s0, s1, h0, h1, info] = *take::<5>(rest, "block image header")?;
    let stored = u16::from_le_bytes([s0, s1]);
    let hole_offset = u16::from_le_bytes([h0, h1]);
    let compressed = info & BKPIMAGE_COMPRESSED != 0;
    let has_hole = info & BKPIMAGE_HAS_HOLE != 0;
    let hole_length = if compressed {
        if has_hole {
            u16_at(take(rest, "block image hole length")?)
        } else {
            0
        }
    } else {
        u16::try_from(
            BLCKSZ
                .checked_sub(u32::from(stored))
                .ok_or(invalid("image longer than a page"))?,
        )
        .map_err(|_| invalid("image hole longer than a page"))?
    };
    if has_hole && (hole_offset == 0 || hole_length == 0 || u32::from(stored) == BLCKSZ) {
        return Err(invalid("image has a hole flag but no valid hole"));
    }
    if !has_hole && (hole_offset != 0 || hole_length != 0) {
        return Err(invalid("image has a hole but no hole flag"));
    }
    if u32::from(hole_offset) + u32::from(hole_length) > BLCKSZ {
        return Err(invalid("image hole extends past the page"));
    }
    if compressed && u32::from(stored) == BLCKSZ {
        return Err(invalid("compressed image is a whole page long"));
    }
    if !has_hole && !compressed && u32::from(stored) != BLCKSZ {
        return Err(invalid(
            "uncompressed image without hole is not a whole page",
        ));
    }
    Ok(BlockImage {
        hole_offset,
        hole_length,
        info,
        bytes: 0..usize::from(stored),
    })
}
