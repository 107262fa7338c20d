//! A chunk's rows on their way from the source to the destination, in COPY
//! format, text or binary, in bounded pieces.
//!
//! A chunk is never held whole: the reader sends its rows in pieces of
//! about [`PIECE_BYTES`] through a channel of [`PIECES_IN_FLIGHT`], so the
//! memory a chunk takes is bounded whatever its rows' width, and the
//! destination's `COPY ... FROM STDIN` runs while the source's `COPY ... TO
//! STDOUT` does. The last piece is followed by what the chunk read (its
//! rows and last key), which becomes the copy's cursor. The encodings
//! themselves are in [`crate::copy_data`].

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{pin_mut, SinkExt};
use tokio::sync::mpsc;
use tokio_postgres::CopyInSink;

use crate::copy_data::{CopyFormat, BINARY_HEADER};
use crate::error::SnapshotError;
use crate::suffix::RowSuffix;

/// Bytes of COPY data gathered into one piece.
pub const PIECE_BYTES: usize = 256 * 1024;

/// Pieces a reader may send ahead of the destination (a row larger than a
/// piece makes a piece of its own).
pub const PIECES_IN_FLIGHT: usize = 4;

/// What a chunk read produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkRead {
    /// Rows copied.
    pub rows: u64,
    /// Key of the last row in text form (the next cursor); `None` when the
    /// chunk was empty, which means the copy is complete.
    pub last_key: Option<Vec<String>>,
}

/// One message from a chunk's reader.
#[derive(Debug)]
pub enum Piece {
    /// Whole rows of COPY data, ready for `COPY ... FROM STDIN` in the
    /// chunk's format (the first binary piece starts with the header, the
    /// last ends with the trailer).
    Rows(Bytes),
    /// The chunk is complete.
    End(ChunkRead),
}

/// The sending side of a chunk: what the reader holds.
pub type RowsSender = mpsc::Sender<Result<Piece, SnapshotError>>;

/// A chunk's rows as they arrive.
#[derive(Debug)]
pub struct ChunkRows {
    format: CopyFormat,
    pieces: mpsc::Receiver<Result<Piece, SnapshotError>>,
}

impl ChunkRows {
    /// A new chunk in `format`, and the sender its reader fills.
    pub fn channel(format: CopyFormat) -> (RowsSender, ChunkRows) {
        let (tx, pieces) = mpsc::channel(PIECES_IN_FLIGHT);
        (tx, ChunkRows { format, pieces })
    }

    /// The rows' format.
    pub fn format(&self) -> CopyFormat {
        self.format
    }

    async fn next(&mut self) -> Result<Piece, SnapshotError> {
        match self.pieces.recv().await {
            Some(piece) => piece,
            None => Err(SnapshotError::Protocol(
                "the chunk's reader stopped before the chunk was complete".into(),
            )),
        }
    }

    /// Feeds every row into `sink` (a `COPY ... FROM STDIN` in this
    /// chunk's format), with `suffix`'s fields added to each, and finishes
    /// it; returns what the chunk read. An error leaves the `COPY`
    /// unfinished, which fails its transaction.
    pub async fn write_to(
        mut self,
        sink: CopyInSink<Bytes>,
        suffix: Option<&RowSuffix>,
    ) -> Result<ChunkRead, SnapshotError> {
        pin_mut!(sink);
        let sent = |e| SnapshotError::query("writing a chunk to the destination", e);
        let mut first = true;
        loop {
            match self.next().await? {
                Piece::Rows(bytes) => {
                    let bytes = match suffix {
                        Some(suffix) => {
                            let mut out = BytesMut::new();
                            suffix.apply(self.format, &bytes, first, &mut out)?;
                            out.freeze()
                        }
                        None => bytes,
                    };
                    first = false;
                    sink.feed(bytes).await.map_err(sent)?
                }
                Piece::End(read) => {
                    sink.as_mut().finish().await.map_err(sent)?;
                    return Ok(read);
                }
            }
        }
    }

    /// Reads the rest of the chunk and drops its rows (a chunk the version
    /// already holds newer rows for); returns what the chunk read.
    pub async fn discard(mut self) -> Result<ChunkRead, SnapshotError> {
        loop {
            if let Piece::End(read) = self.next().await? {
                return Ok(read);
            }
        }
    }

    /// Reads the whole chunk into memory: its pieces and what it read.
    pub async fn collect(mut self) -> Result<(Vec<Bytes>, ChunkRead), SnapshotError> {
        let mut pieces = Vec::new();
        loop {
            match self.next().await? {
                Piece::Rows(bytes) => pieces.push(bytes),
                Piece::End(read) => return Ok((pieces, read)),
            }
        }
    }
}

/// Gathers rows into pieces and sends them; in binary, adds the header and
/// the trailer.
pub(crate) struct PieceWriter<'a> {
    format: CopyFormat,
    out: &'a RowsSender,
    buffer: BytesMut,
    started: bool,
}

impl<'a> PieceWriter<'a> {
    pub(crate) fn new(format: CopyFormat, out: &'a RowsSender) -> PieceWriter<'a> {
        PieceWriter {
            format,
            out,
            buffer: BytesMut::with_capacity(PIECE_BYTES + 4096),
            started: false,
        }
    }

    /// The buffer to append the next row to.
    pub(crate) fn row_buffer(&mut self) -> &mut BytesMut {
        if !self.started {
            self.started = true;
            if self.format == CopyFormat::Binary {
                self.buffer.put_slice(BINARY_HEADER);
            }
        }
        &mut self.buffer
    }

    /// Sends the gathered rows once they make a piece.
    pub(crate) async fn flush_full(&mut self) -> Result<(), SnapshotError> {
        if self.buffer.len() >= PIECE_BYTES {
            self.send().await?;
        }
        Ok(())
    }

    async fn send(&mut self) -> Result<(), SnapshotError> {
        let piece = self.buffer.split().freeze();
        self.out
            .send(Ok(Piece::Rows(piece)))
            .await
            .map_err(|_| abandoned())
    }

    /// Sends the last rows (and the binary trailer) and the chunk's end.
    pub(crate) async fn finish(mut self, read: ChunkRead) -> Result<(), SnapshotError> {
        if self.started && self.format == CopyFormat::Binary {
            self.buffer.put_i16(-1);
        }
        if !self.buffer.is_empty() {
            self.send().await?;
        }
        self.out
            .send(Ok(Piece::End(read)))
            .await
            .map_err(|_| abandoned())
    }
}

/// The destination stopped taking the chunk's rows.
pub(crate) fn abandoned() -> SnapshotError {
    SnapshotError::Protocol("the chunk was abandoned by its destination".into())
}
