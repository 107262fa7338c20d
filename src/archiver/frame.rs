//! The messages of a physical replication stream (the payloads of the
//! server's CopyData messages), and the positions they carry.
//!
//! ```text
//! 'w' XLogData:          start LSN (8) | server WAL end (8) | send time (8) | WAL bytes
//! 'k' primary keepalive: server WAL end (8) | send time (8) | reply requested (1)
//! ```
//!
//! Integers are big-endian. The server's WAL end is how far the server has
//! flushed WAL, which gives the archiver's lag.

use bytes::Bytes;
use walfill_replay::Lsn;

/// Length of the XLogData header before the WAL bytes.
const WAL_HEADER_LEN: usize = 1 + 8 + 8 + 8;
/// Length of a primary keepalive message.
const KEEPALIVE_LEN: usize = 1 + 8 + 8 + 1;

/// One message of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// WAL bytes from `start` on.
    Wal {
        /// The LSN of the first byte.
        start: Lsn,
        /// How far the server has WAL.
        server_end: Lsn,
        /// The WAL bytes.
        data: Bytes,
    },
    /// The server is alive; it may ask for a status update at once.
    Keepalive {
        /// How far the server has WAL.
        server_end: Lsn,
        /// Answer with a status update now (or the server times us out).
        reply_requested: bool,
    },
}

impl Frame {
    /// Parses a CopyData payload; the error says what was wrong with it.
    pub(crate) fn parse(message: &Bytes) -> Result<Frame, String> {
        match message.first() {
            Some(b'w') => {
                if message.len() < WAL_HEADER_LEN {
                    return Err(format!(
                        "XLogData message of {} bytes is shorter than its {WAL_HEADER_LEN}-byte header",
                        message.len()
                    ));
                }
                Ok(Frame::Wal {
                    start: Lsn(be_u64(message, 1)),
                    server_end: Lsn(be_u64(message, 9)),
                    data: message.slice(WAL_HEADER_LEN..),
                })
            }
            Some(b'k') => {
                if message.len() < KEEPALIVE_LEN {
                    return Err(format!(
                        "keepalive message of {} bytes, expected {KEEPALIVE_LEN}",
                        message.len()
                    ));
                }
                Ok(Frame::Keepalive {
                    server_end: Lsn(be_u64(message, 1)),
                    reply_requested: message[KEEPALIVE_LEN - 1] != 0,
                })
            }
            Some(other) => Err(format!(
                "unexpected message type {:?} in a physical replication stream",
                char::from(*other)
            )),
            None => Err("empty CopyData message".to_string()),
        }
    }
}

/// The big-endian u64 at `at`; the caller has checked the length.
fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal(start: u64, end: u64, data: &[u8]) -> Bytes {
        let mut m = vec![b'w'];
        m.extend_from_slice(&start.to_be_bytes());
        m.extend_from_slice(&end.to_be_bytes());
        m.extend_from_slice(&12345u64.to_be_bytes());
        m.extend_from_slice(data);
        Bytes::from(m)
    }

    #[test]
    fn wal_and_keepalive_frames() {
        let frame = Frame::parse(&wal(0x0100_0000, 0x0100_2000, b"abc")).unwrap();
        assert_eq!(
            frame,
            Frame::Wal {
                start: Lsn(0x0100_0000),
                server_end: Lsn(0x0100_2000),
                data: Bytes::from_static(b"abc"),
            }
        );
        let empty = Frame::parse(&wal(7, 9, b"")).unwrap();
        assert!(matches!(empty, Frame::Wal { data, .. } if data.is_empty()));

        let mut k = vec![b'k'];
        k.extend_from_slice(&0x0200_0000u64.to_be_bytes());
        k.extend_from_slice(&1u64.to_be_bytes());
        k.push(1);
        assert_eq!(
            Frame::parse(&Bytes::from(k.clone())).unwrap(),
            Frame::Keepalive {
                server_end: Lsn(0x0200_0000),
                reply_requested: true
            }
        );
        k[17] = 0;
        assert!(matches!(
            Frame::parse(&Bytes::from(k)).unwrap(),
            Frame::Keepalive {
                reply_requested: false,
                ..
            }
        ));
    }

    #[test]
    fn short_or_unknown_frames_are_errors() {
        let short = wal(1, 2, b"");
        let e = Frame::parse(&short.slice(..20)).unwrap_err();
        assert!(e.contains("shorter"), "{e}");
        let e = Frame::parse(&Bytes::from_static(b"k\0\0")).unwrap_err();
        assert!(e.contains("keepalive"), "{e}");
        let e = Frame::parse(&Bytes::from_static(b"x123")).unwrap_err();
        assert!(e.contains("'x'"), "{e}");
        assert!(Frame::parse(&Bytes::new()).is_err());
    }
}
