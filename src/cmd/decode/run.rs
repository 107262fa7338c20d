//! The decoding thread: archive segments in, printed transactions out.

use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::time::Instant;

use walfill_replay::archive::{decode_segments, Archive, ReadOptions};
use walfill_replay::decode::{
    Catalog, DecodeOptions, DecodeStats, Decoder, LostRelation, Sink, Undescribed,
    UnsupportedColumn,
};
use walfill_replay::wal::RelFileLocator;
use walfill_replay::Lsn;

use super::format::{JsonLines, TestDecoding};
pub use crate::cli::DecodeFormat as Format;
use crate::error::{Error, Result};
use crate::pipeline::source::replay::READ_AHEAD;

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
}

/// What a run did.
pub struct Outcome {
    /// Decoder counters.
    pub stats: DecodeStats,
    /// Columns printed as markers.
    pub unsupported: BTreeSet<UnsupportedColumn>,
    /// Tables whose changes could not be followed past some point.
    pub lost: Vec<LostRelation>,
    /// Files written with row data that nothing describes.
    pub undescribed: Vec<(RelFileLocator, Undescribed)>,
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
        options: DecodeOptions,
    ) -> Result<Outcome> {
        let stdout = std::io::stdout();
        let out = Stdout {
            out: BufWriter::with_capacity(1 << 16, stdout.lock()),
            closed: false,
        };
        match self.format {
            Format::TestDecoding => {
                let mut sink = TestDecoding::new(out);
                let result = self.decode(runtime, catalog, options, &mut sink);
                finish(sink.into_inner(), result)
            }
            Format::Jsonl => {
                let mut sink = JsonLines::new(out);
                let result = self.decode(runtime, catalog, options, &mut sink);
                finish(sink.into_inner(), result)
            }
        }
    }

    fn decode(
        &self,
        runtime: &tokio::runtime::Handle,
        catalog: Catalog,
        options: DecodeOptions,
        sink: &mut dyn Sink,
    ) -> Result<Outcome> {
        let started = Instant::now();
        let segments = self.archive.read_blocking(
            runtime,
            self.restart_from,
            self.to,
            ReadOptions::default().with_read_ahead(READ_AHEAD),
        );
        let mut decoder = Decoder::new(catalog, options);
        let fed = decode_segments(segments, self.restart_from, self.to, &mut decoder, sink)
            .map_err(Error::from)?;
        Ok(Outcome {
            stats: decoder.stats(),
            unsupported: decoder.unsupported().clone(),
            lost: decoder.lost().to_vec(),
            undescribed: {
                let mut files: Vec<_> = decoder
                    .undescribed()
                    .iter()
                    .map(|(file, seen)| (*file, *seen))
                    .collect();
                files.sort_by_key(|(_, seen)| seen.first);
                files
            },
            wal_bytes: fed.wal_bytes,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Standard output, remembering whether its reader closed it.
struct Stdout<W: Write> {
    out: W,
    closed: bool,
}

impl<W: Write> Stdout<W> {
    fn note<T>(&mut self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result {
            self.closed |= e.kind() == std::io::ErrorKind::BrokenPipe;
        }
        result
    }
}

impl<W: Write> Write for Stdout<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(buf);
        self.note(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.out.flush();
        self.note(flushed)
    }
}

fn finish<W: Write>(mut out: Stdout<W>, result: Result<Outcome>) -> Result<Outcome> {
    // What was printed is whole transactions: flush it even on error.
    let flushed = out.flush();
    // A reader that stopped reading (`decode | head`) ends the command
    // quietly, whatever the decoder made of the failed write.
    if out.closed {
        return Err(Error::Output(std::io::ErrorKind::BrokenPipe.into()));
    }
    let outcome = result?;
    match flushed {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(outcome),
        Err(e) => Err(Error::Internal(format!("writing the output: {e}"))),
        Ok(()) => Ok(outcome),
    }
}
