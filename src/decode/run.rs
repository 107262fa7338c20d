//! The decoding thread: archive segments in, printed transactions out.

use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::time::Instant;

use walfill_replay::archive::{Archive, ReadOptions};
use walfill_replay::decode::{
    Catalog, DecodeOptions, DecodeStats, Decoder, Sink, UnsupportedColumn,
};
use walfill_replay::wal::{EndReason, Poll, WalDecoder};
use walfill_replay::Lsn;

use super::format::{JsonLines, TestDecoding};
use crate::error::{Error, Result};

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON object per line: a transaction with its changes.
    Jsonl,
    /// Exactly what PostgreSQL's test_decoding plugin prints.
    #[value(name = "test_decoding")]
    TestDecoding,
}

/// Segments fetched ahead of the decoder.
const READ_AHEAD: usize = 2;

/// One decoding run over a range of the archive.
pub struct DecodeRun {
    /// Where the segments are.
    pub archive: Archive,
    /// Where reading starts.
    pub restart_from: Lsn,
    /// Where it stops.
    pub to: Option<Lsn>,
    /// How to print.
    pub format: Format,
    /// Leave out transactions with no changes (when filtering a table).
    pub skip_empty: bool,
}

/// What a run did.
pub struct Outcome {
    /// Decoder counters.
    pub stats: DecodeStats,
    /// Columns printed as markers.
    pub unsupported: BTreeSet<UnsupportedColumn>,
    /// Bytes of WAL read.
    pub wal_bytes: u64,
    /// Wall time.
    pub seconds: f64,
}

impl DecodeRun {
    /// Decodes on the calling (blocking) thread, printing to stdout.
    pub fn run(
        self,
        runtime: &tokio::runtime::Handle,
        catalog: Catalog,
        mut options: DecodeOptions,
    ) -> Result<Outcome> {
        let stdout = std::io::stdout();
        let out = BufWriter::with_capacity(1 << 16, stdout.lock());
        match self.format {
            Format::TestDecoding => {
                let mut sink = TestDecoding::new(out);
                let result = self.decode(runtime, catalog, &mut options, &mut sink);
                finish(sink.into_inner(), result)
            }
            Format::Jsonl => {
                let mut sink = JsonLines::new(out);
                let result = self.decode(runtime, catalog, &mut options, &mut sink);
                finish(sink.into_inner(), result)
            }
        }
    }

    fn decode(
        &self,
        runtime: &tokio::runtime::Handle,
        catalog: Catalog,
        options: &mut DecodeOptions,
        sink: &mut dyn Sink,
    ) -> Result<Outcome> {
        let started = Instant::now();
        let segments = self.archive.read_blocking(
            runtime,
            self.restart_from,
            self.to,
            ReadOptions::default().with_read_ahead(READ_AHEAD),
        );
        let mut wal: Option<WalDecoder> = None;
        let mut decoder: Option<Decoder> = None;
        let mut catalog = Some(catalog);
        let mut wal_bytes = 0u64;
        'segments: for segment in segments {
            let segment = segment?;
            let segment_size = segment.bytes.len() as u64;
            if decoder.is_none() {
                // Segments in flight count against the memory bound too.
                let in_flight = (READ_AHEAD as u64 + 2) * segment_size;
                let budget = (options.memory_limit as u64).saturating_sub(in_flight);
                options.memory_limit = budget.max(16 << 20) as usize;
                decoder = Some(Decoder::new(
                    catalog.take().unwrap_or_default(),
                    options.clone(),
                ));
            }
            let wal =
                wal.get_or_insert_with(|| WalDecoder::new(self.restart_from, segment_size as u32));
            let skip = wal.input_start().checked_sub(segment.start).unwrap_or(0) as usize;
            wal_bytes += segment_size - skip as u64;
            let current_file = segment.file.clone();
            let current_partial = segment.partial;
            let current_end = segment.end();
            let mut bytes = segment.bytes;
            if skip > 0 {
                bytes.drain(..skip.min(bytes.len()));
            }
            wal.feed_owned(bytes);
            let decoder = decoder.as_mut().expect("created above");
            loop {
                match wal.poll() {
                    Ok(Poll::Record(record)) => {
                        if self.to.is_some_and(|to| record.lsn >= to) {
                            break 'segments;
                        }
                        let major = wal.pg_major().ok_or_else(|| {
                            Error::Decode("WAL page without a version magic".into())
                        })?;
                        decoder
                            .process(&record, major, sink)
                            .map_err(|e| in_segment(e.to_string(), &current_file))?;
                        wal.recycle(record);
                    }
                    Ok(Poll::NeedMore) => continue 'segments,
                    Ok(Poll::EndOfWal { lsn, reason }) => {
                        if !current_partial && lsn < current_end {
                            return Err(Error::Decode(format!(
                                "WAL ends at {lsn} inside the complete segment {current_file} \
                                 ({}): the file is damaged",
                                describe(&reason)
                            )));
                        }
                        break 'segments;
                    }
                    Err(e) => {
                        return Err(Error::Decode(
                            e.with_segment(current_file.clone()).to_string(),
                        ))
                    }
                }
            }
        }
        let decoder = decoder.ok_or_else(|| {
            Error::State(format!(
                "archive {} holds no WAL from {}",
                self.archive.url(),
                self.restart_from
            ))
        })?;
        Ok(Outcome {
            stats: decoder.stats(),
            unsupported: decoder.unsupported().clone(),
            wal_bytes,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

fn in_segment(message: String, file: &str) -> Error {
    Error::Decode(format!("{message} (in segment {file})"))
}

fn describe(reason: &EndReason) -> String {
    format!("{reason:?}")
}

fn finish<W: Write>(mut out: W, result: Result<Outcome>) -> Result<Outcome> {
    // What was printed is whole transactions: flush it even on error.
    let flushed = out.flush();
    let outcome = result?;
    match flushed {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(outcome),
        Err(e) => Err(Error::State(format!("writing the output: {e}"))),
        Ok(()) => Ok(outcome),
    }
}
