//! Sorted runs of folded writes on local disk.
//!
//! A run is a file of entries in key order, each a length-prefixed record
//! (key, operation, version, xid, values, fill key), with every
//! [`INDEX_EVERY`]th key kept in memory so that one key can be looked up
//! without reading the whole run. The file is anonymous (unlinked on
//! creation): it goes when the run is dropped or the process dies.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use walfill_core::Version;

use crate::pipeline::apply::fold::record;
use crate::pipeline::apply::fold::Entry;

/// Every this many entries, a run's key and offset stay in memory.
const INDEX_EVERY: usize = 64;

/// Bytes a sequential reader reads at a time.
const READ_BYTES: usize = 256 * 1024;

/// One sorted run on disk.
#[derive(Debug)]
pub(super) struct Run {
    file: File,
    /// Key and offset of every [`INDEX_EVERY`]th entry.
    index: Vec<(Vec<String>, u64)>,
    /// The file's length.
    len: u64,
    /// The newest version of its entries.
    newest: Version,
}

impl Run {
    /// Writes `records` (in key order) as a run in `dir`.
    pub(super) fn write<'a>(
        dir: &Path,
        records: impl Iterator<Item = &'a [u8]>,
    ) -> io::Result<Run> {
        let file = tempfile::tempfile_in(dir)?;
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        let mut index = Vec::new();
        let mut offset = 0u64;
        let mut newest = Version::default();
        for (i, record) in records.enumerate() {
            if i % INDEX_EVERY == 0 {
                index.push((record::decode_key(record)?, offset));
            }
            newest = newest.max(record::version(record)?);
            out.write_all(&(record.len() as u32).to_le_bytes())?;
            out.write_all(record)?;
            offset += 4 + record.len() as u64;
        }
        out.flush()?;
        drop(out);
        Ok(Run {
            file,
            index,
            len: offset,
            newest,
        })
    }

    /// The newest version of the run's entries.
    pub(super) fn newest(&self) -> Version {
        self.newest
    }

    /// Bytes the run takes on disk.
    pub(super) fn bytes(&self) -> u64 {
        self.len
    }

    /// The run's entries in key order.
    pub(super) fn reader(&self) -> RunReader<'_> {
        RunReader {
            run: self,
            offset: 0,
            buffer: Vec::new(),
            at: 0,
        }
    }

    /// The entry for `key`, if the run has one.
    pub(super) fn lookup(&self, key: &[String]) -> io::Result<Option<Entry>> {
        let start = match self.index.partition_point(|(k, _)| k.as_slice() <= key) {
            0 => return Ok(None),
            n => self.index[n - 1].1,
        };
        let mut reader = RunReader {
            run: self,
            offset: start,
            buffer: Vec::new(),
            at: 0,
        };
        for _ in 0..INDEX_EVERY {
            match reader.next_entry()? {
                Some((k, entry)) if k.as_slice() == key => return Ok(Some(entry)),
                Some((k, _)) if k.as_slice() > key => return Ok(None),
                Some(_) => {}
                None => return Ok(None),
            }
        }
        Ok(None)
    }
}

/// Reads a run's entries in order.
pub(super) struct RunReader<'a> {
    run: &'a Run,
    /// File offset of `buffer`'s end.
    offset: u64,
    buffer: Vec<u8>,
    /// Read position in `buffer`.
    at: usize,
}

impl RunReader<'_> {
    /// Makes at least `n` unread bytes available in the buffer (fewer at
    /// the end of the file).
    fn fill(&mut self, n: usize) -> io::Result<()> {
        if self.buffer.len() - self.at >= n {
            return Ok(());
        }
        self.buffer.drain(..self.at);
        self.at = 0;
        while self.buffer.len() < n && self.offset < self.run.len {
            let want = READ_BYTES.max(n - self.buffer.len());
            let want = want.min((self.run.len - self.offset) as usize);
            let old = self.buffer.len();
            self.buffer.resize(old + want, 0);
            self.run
                .file
                .read_exact_at(&mut self.buffer[old..], self.offset)?;
            self.offset += want as u64;
        }
        Ok(())
    }

    /// The next entry, or `None` at the end of the run.
    pub(super) fn next_entry(&mut self) -> io::Result<Option<(Vec<String>, Entry)>> {
        self.fill(4)?;
        if self.buffer.len() - self.at < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes(
            self.buffer[self.at..self.at + 4]
                .try_into()
                .unwrap_or([0; 4]),
        );
        let len = len as usize;
        self.fill(4 + len)?;
        if self.buffer.len() - self.at < 4 + len {
            return Err(record::corrupt());
        }
        let record = &self.buffer[self.at + 4..self.at + 4 + len];
        let decoded = record::decode(record)?;
        self.at += 4 + len;
        Ok(Some(decoded))
    }
}

#[cfg(test)]
mod tests {
    use walfill_core::Datum;

    use super::*;
    use crate::pipeline::apply::fold::record::testing::entry;

    #[test]
    fn a_run_reads_back_in_order_and_looks_keys_up() {
        let entries: Vec<(Vec<String>, Entry)> = (0..1000u64)
            .map(|n| {
                let values = match n % 4 {
                    0 => Vec::new(),
                    1 => vec![Datum::Null, Datum::Text(format!("ü{n}\t\n"))],
                    2 => vec![Datum::Unchanged, Datum::Text(String::new())],
                    _ => vec![Datum::Text("x".repeat(n as usize))],
                };
                (vec![format!("{n:05}"), "b".into()], entry(n, values))
            })
            .collect();
        let records: Vec<Vec<u8>> = entries
            .iter()
            .map(|(key, entry)| {
                let mut record = Vec::new();
                record::encode(&mut record, key, entry);
                record
            })
            .collect();
        let run = Run::write(&std::env::temp_dir(), records.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(run.newest(), entries[999].1.version);
        let mut reader = run.reader();
        let mut read = Vec::new();
        while let Some(e) = reader.next_entry().unwrap() {
            read.push(e);
        }
        assert_eq!(read, entries);
        for (key, e) in entries.iter().step_by(37) {
            assert_eq!(run.lookup(key).unwrap().as_ref(), Some(e));
        }
        assert_eq!(run.lookup(&["00000".into(), "a".into()]).unwrap(), None);
        assert_eq!(run.lookup(&["00500".into(), "c".into()]).unwrap(), None);
        assert_eq!(run.lookup(&["99999".into()]).unwrap(), None);
        assert!(run.bytes() > 0);
    }
}
