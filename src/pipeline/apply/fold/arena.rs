//! The fold's storage: each key's pending write as one [`record`] in
//! blocks of bytes, found through a hash table of record positions.
//!
//! A map of owned strings costs an allocation per value and several times
//! the values' size; here a key's write takes its record's bytes and about
//! nine bytes of table. A newer write of a key is appended and the older
//! record becomes garbage, which is dropped by copying the live records
//! to new blocks once it is more than half of what the blocks hold.

use std::hash::Hasher;

use hashbrown::hash_table::Entry as Slot;
use hashbrown::HashTable;

use super::record::{self, cmp_keys, key_len, read_varint};
use super::Entry;

/// Bytes a block holds (a larger record gets a block of its own).
const BLOCK: usize = 1 << 20;

/// Below this many bytes held, garbage is left alone.
const COMPACT_FROM: usize = 4 * BLOCK;

/// A record's position: its block (high 32 bits) and offset in it.
type At = u64;

/// Pending writes by key, as records.
#[derive(Debug, Default)]
pub(super) struct Arena {
    blocks: Vec<Vec<u8>>,
    /// Each record's position, with its key's hash (growing the table
    /// then reads no record).
    table: HashTable<(u64, At)>,
    /// Bytes of records in the blocks, garbage included.
    used: usize,
    /// Bytes of records a newer write of their key replaced.
    garbage: usize,
    scratch: Vec<u8>,
}

fn hash(key: &[u8]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(key);
    h.finish()
}

/// The record at `at`, without its length prefix.
fn record_in(blocks: &[Vec<u8>], at: At) -> &[u8] {
    let block = &blocks[(at >> 32) as usize];
    let start = (at & u64::from(u32::MAX)) as usize;
    let (len, prefix) = read_varint(&block[start..]).unwrap_or((0, 0));
    &block[start + prefix..start + prefix + len as usize]
}

/// The key bytes of the record at `at`.
fn key_in(blocks: &[Vec<u8>], at: At) -> &[u8] {
    let record = record_in(blocks, at);
    &record[..key_len(record).unwrap_or(record.len())]
}

/// Appends `record` (with its length) to `blocks`; where it went, and the
/// bytes it took.
fn push(blocks: &mut Vec<Vec<u8>>, record: &[u8]) -> (At, usize) {
    let need = record::varint_len(record.len() as u64) + record.len();
    if blocks.last().is_none_or(|b| b.capacity() - b.len() < need) {
        blocks.push(Vec::with_capacity(BLOCK.max(need)));
    }
    let index = blocks.len() - 1;
    let block = &mut blocks[index];
    let at = ((index as u64) << 32) | block.len() as u64;
    record::put_varint(block, record.len() as u64);
    block.extend_from_slice(record);
    (at, need)
}

impl Arena {
    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Memory the records and the table take.
    pub(super) fn bytes(&self) -> usize {
        self.used + self.table.capacity() * (std::mem::size_of::<(u64, At)>() + 1)
    }

    /// Stores `entry` as `key`'s pending write, unless the one held is of
    /// a newer version (which wins); whether it was stored.
    pub(super) fn insert(&mut self, key: &[String], entry: &Entry) -> bool {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        record::encode(&mut scratch, key, entry);
        let stored = self.insert_record(&scratch, entry.version);
        self.scratch = scratch;
        stored
    }

    fn insert_record(&mut self, record: &[u8], version: walfill_core::Version) -> bool {
        let key = &record[..key_len(record).unwrap_or(record.len())];
        let blocks = &self.blocks;
        let hashed = hash(key);
        let slot = self.table.entry(
            hashed,
            |&(h, at)| h == hashed && key_in(blocks, at) == key,
            |&(h, _)| h,
        );
        match slot {
            Slot::Occupied(mut held) => {
                let old = record_in(&self.blocks, held.get().1);
                if record::version(old).is_ok_and(|v| v > version) {
                    return false;
                }
                self.garbage += record::varint_len(old.len() as u64) + old.len();
                let (at, took) = push(&mut self.blocks, record);
                held.get_mut().1 = at;
                self.used += took;
            }
            Slot::Vacant(slot) => {
                let (at, took) = push(&mut self.blocks, record);
                slot.insert((hashed, at));
                self.used += took;
            }
        }
        if self.used >= COMPACT_FROM && self.garbage * 2 > self.used {
            self.compact();
        }
        true
    }

    /// The pending write of `key`.
    pub(super) fn get(&self, key: &[String]) -> Option<Entry> {
        let mut wanted = Vec::new();
        record::encode_key(&mut wanted, key);
        let hashed = hash(&wanted);
        let (_, at) = self.table.find(hashed, |&(h, at)| {
            h == hashed && key_in(&self.blocks, at) == wanted
        })?;
        Some(decoded(record_in(&self.blocks, *at)).1)
    }

    /// Copies the live records to new blocks, leaving the garbage.
    fn compact(&mut self) {
        let old = std::mem::take(&mut self.blocks);
        self.used = 0;
        self.garbage = 0;
        for (_, at) in self.table.iter_mut() {
            let (moved, took) = push(&mut self.blocks, record_in(&old, *at));
            *at = moved;
            self.used += took;
        }
    }

    /// Every pending write, in no order; the arena is left empty.
    pub(super) fn take(&mut self) -> impl Iterator<Item = (Vec<String>, Entry)> {
        let Arena { blocks, table, .. } = std::mem::take(self);
        table
            .into_iter()
            .map(move |(_, at)| decoded(record_in(&blocks, at)))
    }

    /// Every pending write in key order; the arena is left empty.
    pub(super) fn take_sorted(&mut self) -> Sorted {
        let Arena { blocks, table, .. } = std::mem::take(self);
        // Most comparisons are settled by the first bytes of the first
        // column, kept beside each position, without reading the records.
        let mut order: Vec<(u64, At)> = table
            .into_iter()
            .map(|(_, at)| (order_prefix(key_in(&blocks, at)), at))
            .collect();
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| cmp_keys(key_in(&blocks, a.1), key_in(&blocks, b.1)))
        });
        Sorted {
            blocks,
            order: order.into_iter().map(|(_, at)| at).collect(),
        }
    }
}

/// The first eight bytes of a key's first column, big-endian, padded
/// with zeros: ordered as the keys are, where it differs (text never holds
/// a zero byte, so a shorter column pads below any longer one).
fn order_prefix(key: &[u8]) -> u64 {
    let first = read_varint(key)
        .ok()
        .filter(|(columns, _)| *columns > 0)
        .and_then(|(_, at)| {
            let (len, len_bytes) = read_varint(&key[at..]).ok()?;
            let start = at + len_bytes;
            key.get(start..start + len as usize)
        })
        .unwrap_or_default();
    let mut bytes = [0u8; 8];
    let n = first.len().min(8);
    bytes[..n].copy_from_slice(&first[..n]);
    u64::from_be_bytes(bytes)
}

/// Decodes a record this arena encoded.
fn decoded(record: &[u8]) -> (Vec<String>, Entry) {
    record::decode(record).expect("the fold's arena holds only records it encoded")
}

/// A fold's pending writes in key order.
#[derive(Debug, Default)]
pub(crate) struct Sorted {
    blocks: Vec<Vec<u8>>,
    order: Vec<At>,
}

impl Sorted {
    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Their records, in key order.
    pub(crate) fn records(&self) -> impl Iterator<Item = &[u8]> {
        self.order.iter().map(|at| record_in(&self.blocks, *at))
    }

    /// The writes, decoded one at a time, in key order.
    pub(crate) fn into_entries(self) -> impl Iterator<Item = (Vec<String>, Entry)> {
        let Sorted { blocks, order } = self;
        order
            .into_iter()
            .map(move |at| decoded(record_in(&blocks, at)))
    }
}

#[cfg(test)]
mod tests {
    use walfill_core::{Datum, Lsn, Version};

    use super::*;
    use crate::pipeline::apply::fold::Op;

    fn entry(lsn: u64, value: &str) -> Entry {
        Entry {
            op: Op::Upsert,
            version: Version {
                commit_lsn: Lsn(lsn),
                seq: 1,
            },
            xid: None,
            values: vec![Datum::Text(value.into()), Datum::Null],
            fill_key: None,
        }
    }

    #[test]
    fn the_newest_write_of_each_key_survives_overwrites_and_compaction() {
        let mut arena = Arena::default();
        let keys = 5_000u64;
        let value = "v".repeat(200);
        for round in 1..=20u64 {
            for k in 0..keys {
                assert!(arena.insert(&[k.to_string()], &entry(round, &format!("{round}{value}"))));
            }
            // An older write of a key loses to the one held.
            assert!(!arena.insert(&["7".into()], &entry(round - 1, "old")));
        }
        assert_eq!(arena.len(), keys as usize);
        // Twenty rounds of ~1 MiB each: compaction kept the blocks near
        // what the live records need.
        assert!(arena.bytes() < 4 * COMPACT_FROM, "{}", arena.bytes());
        assert_eq!(
            arena.get(&["42".into()]),
            Some(entry(20, &format!("20{value}")))
        );
        assert_eq!(arena.get(&["nope".into()]), None);
        let sorted = arena.take_sorted();
        assert_eq!(arena.len(), 0);
        let read: Vec<_> = sorted.into_entries().collect();
        let mut want: Vec<_> = (0..keys)
            .map(|k| (vec![k.to_string()], entry(20, &format!("20{value}"))))
            .collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(read.len(), want.len());
        assert!(read == want);
    }

    #[test]
    fn a_record_larger_than_a_block_gets_its_own() {
        let mut arena = Arena::default();
        let big = "x".repeat(3 * BLOCK);
        arena.insert(&["a".into()], &entry(1, "small"));
        arena.insert(&["b".into()], &entry(1, &big));
        arena.insert(&["c".into()], &entry(1, "small"));
        let all: Vec<_> = arena.take().collect();
        assert_eq!(all.len(), 3);
        assert!(all.contains(&(vec!["b".into()], entry(1, &big))));
    }

    #[test]
    fn sorted_writes_follow_the_order_of_their_keys() {
        let mut keys: Vec<Vec<String>> = Vec::new();
        for a in [
            "",
            "a",
            "ab",
            "abcdefgh",
            "abcdefghi",
            "abcdefgh\u{1}",
            "é",
            "b",
        ] {
            keys.push(vec![a.into()]);
            for b in ["", "x", "abcdefghij"] {
                keys.push(vec![a.into(), b.into()]);
            }
        }
        keys.push(vec![]);
        let mut arena = Arena::default();
        for (n, key) in keys.iter().enumerate().rev() {
            arena.insert(key, &entry(n as u64, "v"));
        }
        let sorted: Vec<Vec<String>> = arena.take_sorted().into_entries().map(|(k, _)| k).collect();
        keys.sort();
        assert_eq!(sorted, keys);
    }
}
