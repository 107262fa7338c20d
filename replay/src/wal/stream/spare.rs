//! Buffers of records given back by the caller, reused for later records.

use super::super::record::{BlockRef, Record};

/// Buffers of recycled records, reused for the next ones to save allocations.
#[derive(Debug, Default)]
pub(super) struct Spare {
    pub(super) bytes: Vec<Vec<u8>>,
    pub(super) blocks: Vec<Vec<BlockRef>>,
}

impl Spare {
    /// How many buffers of each kind are kept.
    pub(super) const KEEP: usize = 16;
    /// Larger record buffers are not kept.
    const MAX_KEPT_CAPACITY: usize = 64 * 1024;

    /// An empty byte buffer, with room for `capacity` bytes if it is new.
    pub(super) fn bytes(&mut self, capacity: usize) -> Vec<u8> {
        match self.bytes.pop() {
            Some(mut v) => {
                v.clear();
                v.reserve(capacity);
                v
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// An empty block list.
    pub(super) fn blocks(&mut self) -> Vec<BlockRef> {
        self.blocks.pop().unwrap_or_default()
    }

    pub(super) fn keep(&mut self, record: Record) {
        let (bytes, blocks) = record.into_buffers();
        if self.bytes.len() < Self::KEEP && bytes.capacity() <= Self::MAX_KEPT_CAPACITY {
            self.bytes.push(bytes);
        }
        if self.blocks.len() < Self::KEEP && blocks.capacity() > 0 {
            self.blocks.push(blocks);
        }
    }
}
