//! A summary's stored form: `WFSUM1` and two zero bytes, the CRC-32C of the
//! content, then the content compressed with zstd. The content is
//! little-endian: the objects it was made from, the segment's identity,
//! then the events.

use crate::lsn::Lsn;
use crate::wal::RelFileLocator;

use super::{ObjectId, SegmentSummary, SummaryEvent};

const MAGIC: &[u8; 8] = b"WFSUM1\0\0";
const KEPT: u8 = 1;
const TOUCH: u8 = 2;
const LINK: u8 = 3;

/// Why a stored summary cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SummaryError {
    /// Not a summary, or of a format this version does not read.
    #[error("not a segment summary of this format")]
    Format,
    /// Its content does not match its checksum: it was changed or damaged.
    #[error("its content does not match its checksum")]
    Checksum,
    /// The content ends early or has an unknown entry.
    #[error("its content is malformed: {0}")]
    Malformed(&'static str),
}

impl SegmentSummary {
    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(64 + self.events.len() * 24);
        put_object(&mut body, &self.object);
        match &self.next {
            Some(next) => {
                body.push(1);
                put_object(&mut body, next);
            }
            None => body.push(0),
        }
        body.extend_from_slice(&self.system_id.to_le_bytes());
        body.extend_from_slice(&self.timeline.to_le_bytes());
        body.extend_from_slice(&self.magic.to_le_bytes());
        body.extend_from_slice(&self.start.0.to_le_bytes());
        body.extend_from_slice(&self.last_end.0.to_le_bytes());
        body.extend_from_slice(&(self.events.len() as u64).to_le_bytes());
        for event in &self.events {
            match event {
                SummaryEvent::Kept {
                    lsn,
                    end,
                    db,
                    rmid,
                    bytes,
                } => {
                    body.push(KEPT);
                    body.extend_from_slice(&lsn.0.to_le_bytes());
                    body.extend_from_slice(&end.0.to_le_bytes());
                    body.extend_from_slice(&db.to_le_bytes());
                    body.push(*rmid);
                    body.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    body.extend_from_slice(bytes);
                }
                SummaryEvent::Touch {
                    lsn,
                    xid,
                    file,
                    kind,
                } => {
                    body.push(TOUCH);
                    body.extend_from_slice(&lsn.0.to_le_bytes());
                    body.extend_from_slice(&xid.to_le_bytes());
                    for part in [file.spc, file.db, file.rel] {
                        body.extend_from_slice(&part.to_le_bytes());
                    }
                    body.push(*kind);
                }
                SummaryEvent::Link { lsn, sub, top } => {
                    body.push(LINK);
                    body.extend_from_slice(&lsn.0.to_le_bytes());
                    body.extend_from_slice(&sub.to_le_bytes());
                    body.extend_from_slice(&top.to_le_bytes());
                }
            }
        }
        let mut out = Vec::with_capacity(body.len() / 3 + 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        let compressed = zstd::bulk::compress(&body, 3).unwrap_or_default();
        out.extend_from_slice(&compressed);
        out
    }

    /// Reads a stored summary, checking its checksum.
    pub fn decode(stored: &[u8]) -> Result<SegmentSummary, SummaryError> {
        if stored.len() < 12 || &stored[..8] != MAGIC {
            return Err(SummaryError::Format);
        }
        let crc = u32::from_le_bytes([stored[8], stored[9], stored[10], stored[11]]);
        let body = zstd::stream::decode_all(&stored[12..]).map_err(|_| SummaryError::Checksum)?;
        if crc32c::crc32c(&body) != crc {
            return Err(SummaryError::Checksum);
        }
        let mut r = Reader { buf: &body };
        let object = r.object()?;
        let next = match r.u8()? {
            0 => None,
            1 => Some(r.object()?),
            _ => return Err(SummaryError::Malformed("next object flag")),
        };
        let system_id = r.u64()?;
        let timeline = r.u32()?;
        let magic = r.u16()?;
        let start = Lsn(r.u64()?);
        let last_end = Lsn(r.u64()?);
        let count = r.u64()?;
        let mut events = Vec::with_capacity(count.min(1 << 20) as usize);
        for _ in 0..count {
            let event = match r.u8()? {
                KEPT => {
                    let lsn = Lsn(r.u64()?);
                    let end = Lsn(r.u64()?);
                    let db = r.u32()?;
                    let rmid = r.u8()?;
                    let len = r.u32()? as usize;
                    SummaryEvent::Kept {
                        lsn,
                        end,
                        db,
                        rmid,
                        bytes: r.take(len)?.to_vec(),
                    }
                }
                TOUCH => SummaryEvent::Touch {
                    lsn: Lsn(r.u64()?),
                    xid: r.u32()?,
                    file: RelFileLocator {
                        spc: r.u32()?,
                        db: r.u32()?,
                        rel: r.u32()?,
                    },
                    kind: r.u8()?,
                },
                LINK => SummaryEvent::Link {
                    lsn: Lsn(r.u64()?),
                    sub: r.u32()?,
                    top: r.u32()?,
                },
                _ => return Err(SummaryError::Malformed("unknown entry")),
            };
            events.push(event);
        }
        if !r.buf.is_empty() {
            return Err(SummaryError::Malformed("bytes after the last entry"));
        }
        Ok(SegmentSummary {
            object,
            next,
            system_id,
            timeline,
            magic,
            start,
            last_end,
            events,
        })
    }
}

fn put_object(body: &mut Vec<u8>, object: &ObjectId) {
    body.extend_from_slice(&(object.name.len() as u32).to_le_bytes());
    body.extend_from_slice(object.name.as_bytes());
    body.extend_from_slice(&object.size.to_le_bytes());
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SummaryError> {
        if self.buf.len() < n {
            return Err(SummaryError::Malformed("it ends early"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, SummaryError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, SummaryError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, SummaryError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, SummaryError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn object(&mut self) -> Result<ObjectId, SummaryError> {
        let len = self.u32()? as usize;
        let name = std::str::from_utf8(self.take(len)?)
            .map_err(|_| SummaryError::Malformed("object name"))?
            .to_string();
        Ok(ObjectId {
            name,
            size: self.u64()?,
        })
    }
}
