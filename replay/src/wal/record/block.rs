//! Block references: the pages a record touches, with full-page images.

use std::fmt;
use std::ops::Range;

/// Size of a data page (`BLCKSZ`), the size of a restored full-page image.
pub const BLCKSZ: u32 = 8192;
/// Highest block reference id (`XLR_MAX_BLOCK_ID`).
pub const MAX_BLOCK_ID: u8 = 32;

pub(super) const BKPBLOCK_FORK_MASK: u8 = 0x0F;
/// Block flag: a full-page image is included.
pub const BKPBLOCK_HAS_IMAGE: u8 = 0x10;
/// Block flag: block data is included.
pub const BKPBLOCK_HAS_DATA: u8 = 0x20;
/// Block flag: redo re-initialises the page.
pub const BKPBLOCK_WILL_INIT: u8 = 0x40;
/// Block flag: same relation as the previous block reference.
pub const BKPBLOCK_SAME_REL: u8 = 0x80;

/// Image flag: a hole of zeros was removed from the page.
pub const BKPIMAGE_HAS_HOLE: u8 = 0x01;
/// Image flag: redo must restore the image.
pub const BKPIMAGE_APPLY: u8 = 0x02;
/// Image flag: compressed with pglz.
pub const BKPIMAGE_COMPRESS_PGLZ: u8 = 0x04;
/// Image flag: compressed with LZ4 (block format).
pub const BKPIMAGE_COMPRESS_LZ4: u8 = 0x08;
/// Image flag: compressed with zstd.
pub const BKPIMAGE_COMPRESS_ZSTD: u8 = 0x10;
pub(super) const BKPIMAGE_COMPRESSED: u8 =
    BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD;

/// Identity of a relation's files (`RelFileNode` in 15, `RelFileLocator` in 16+).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct RelFileLocator {
    /// Tablespace OID (1663 `pg_default`, 1664 `pg_global`; never 0).
    pub spc: u32,
    /// Database OID; 0 for shared relations.
    pub db: u32,
    /// Relfilenode number.
    pub rel: u32,
}

impl fmt::Display for RelFileLocator {
    /// `spc/db/rel`, as `pg_waldump` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.spc, self.db, self.rel)
    }
}

/// A relation fork number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForkNumber(pub u8);

impl ForkNumber {
    /// The main fork: the table or index data.
    pub const MAIN: ForkNumber = ForkNumber(0);
    /// The free space map.
    pub const FSM: ForkNumber = ForkNumber(1);
    /// The visibility map.
    pub const VM: ForkNumber = ForkNumber(2);
    /// The init fork of unlogged relations.
    pub const INIT: ForkNumber = ForkNumber(3);

    /// The fork's name as PostgreSQL prints it (`main`, `fsm`, `vm`, `init`).
    pub fn name(self) -> Option<&'static str> {
        ["main", "fsm", "vm", "init"]
            .get(usize::from(self.0))
            .copied()
    }
}

impl fmt::Display for ForkNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "fork{}", self.0),
        }
    }
}

/// How a full-page image is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageCompression {
    /// Stored as is (minus the hole).
    None,
    /// pglz.
    Pglz,
    /// LZ4 block format.
    Lz4,
    /// zstd frame.
    Zstd,
}

/// A full-page image carried by a block reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockImage {
    /// Offset of the removed hole in the restored page.
    pub hole_offset: u16,
    /// Length of the removed hole.
    pub hole_length: u16,
    /// `bimg_info` flag bits (`BKPIMAGE_*`).
    pub info: u8,
    pub(super) bytes: Range<usize>,
}

impl BlockImage {
    /// How the stored bytes are compressed.
    pub fn compression(&self) -> ImageCompression {
        if self.info & BKPIMAGE_COMPRESS_PGLZ != 0 {
            ImageCompression::Pglz
        } else if self.info & BKPIMAGE_COMPRESS_LZ4 != 0 {
            ImageCompression::Lz4
        } else if self.info & BKPIMAGE_COMPRESS_ZSTD != 0 {
            ImageCompression::Zstd
        } else {
            ImageCompression::None
        }
    }

    /// Whether redo must restore the image (it is not only there for consistency checking).
    pub fn apply(&self) -> bool {
        self.info & BKPIMAGE_APPLY != 0
    }

    /// Bytes stored in the record (`bimg_len`).
    pub fn stored_len(&self) -> usize {
        self.bytes.len()
    }
}

/// A block reference: a page the record touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// Block reference id, 0..=32.
    pub id: u8,
    /// The relation.
    pub rel: RelFileLocator,
    /// The fork.
    pub fork: ForkNumber,
    /// The block number in the fork.
    pub block: u32,
    /// The high-nibble flags of `fork_flags` (`BKPBLOCK_*`).
    pub flags: u8,
    /// The full-page image, if any.
    pub image: Option<BlockImage>,
    pub(super) data: Range<usize>,
}

impl BlockRef {
    /// Whether a full-page image is included.
    pub fn has_image(&self) -> bool {
        self.image.is_some()
    }

    /// Whether block data is included.
    pub fn has_data(&self) -> bool {
        !self.data.is_empty()
    }

    /// Whether redo re-initialises the page.
    pub fn will_init(&self) -> bool {
        self.flags & BKPBLOCK_WILL_INIT != 0
    }
}
