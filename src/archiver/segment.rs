//! Cutting the streamed WAL into segment files.
//!
//! The archiver streams from the start of a segment, so every byte it
//! receives has a fixed place in the segment being filled. A
//! [`SegmentAssembler`] holds that segment in memory (one segment size,
//! zero after the WAL received so far), hands out each segment once it is
//! full, and a copy of the unfinished one ([`SegmentAssembler::tail`]) for
//! the `.partial` file. WAL must arrive without gaps: a frame that does not
//! start where the previous one ended is refused.

use walfill_replay::{Lsn, SegmentName, SegmentNo, TimelineId};

/// A segment's bytes, whole (for a complete segment) or zero after `end`
/// (for the unfinished tail).
pub(crate) struct SegmentBytes {
    /// The segment.
    pub(crate) name: SegmentName,
    /// Its content: exactly one segment size.
    pub(crate) bytes: Vec<u8>,
    /// The LSN just after the last WAL byte in it.
    pub(crate) end: Lsn,
}

impl std::fmt::Debug for SegmentBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentBytes")
            .field("name", &self.name)
            .field("end", &self.end)
            .finish()
    }
}

/// The segment being filled from the stream.
pub(crate) struct SegmentAssembler {
    timeline: TimelineId,
    segment_size: u32,
    segno: SegmentNo,
    buffer: Vec<u8>,
    filled: usize,
}

impl SegmentAssembler {
    /// Starts filling the segment that begins at `start`, which must be a
    /// segment boundary.
    pub(crate) fn new(
        timeline: TimelineId,
        segment_size: u32,
        start: Lsn,
    ) -> Result<SegmentAssembler, String> {
        let size = u64::from(segment_size);
        if start.segment_offset(size) != 0 {
            return Err(format!(
                "streaming must start at a segment boundary, not at {start}"
            ));
        }
        Ok(SegmentAssembler {
            timeline,
            segment_size,
            segno: SegmentNo::containing(start, size),
            buffer: vec![0; segment_size as usize],
            filled: 0,
        })
    }

    /// The LSN the next WAL byte must have: everything before it was received.
    pub(crate) fn position(&self) -> Lsn {
        self.segment_start().advance(self.filled as u64)
    }

    /// The first LSN of the segment being filled.
    pub(crate) fn segment_start(&self) -> Lsn {
        self.segno.start_lsn(u64::from(self.segment_size))
    }

    /// Takes WAL bytes starting at `start`; returns the segments they
    /// completed, in order. Fails, taking nothing, unless `start` is
    /// [`position`](SegmentAssembler::position).
    pub(crate) fn push(
        &mut self,
        start: Lsn,
        mut data: &[u8],
    ) -> Result<Vec<SegmentBytes>, String> {
        if start != self.position() {
            return Err(format!(
                "WAL starting at {start} arrived where {} was expected",
                self.position()
            ));
        }
        let size = self.segment_size as usize;
        let mut completed = Vec::new();
        while !data.is_empty() {
            let n = (size - self.filled).min(data.len());
            let (now, later) = data.split_at(n);
            self.buffer[self.filled..self.filled + n].copy_from_slice(now);
            self.filled += n;
            data = later;
            if self.filled == size {
                let bytes = std::mem::replace(&mut self.buffer, vec![0; size]);
                let name = self.name();
                self.segno = self.segno.next();
                self.filled = 0;
                completed.push(SegmentBytes {
                    name,
                    bytes,
                    end: self.segment_start(),
                });
            }
        }
        Ok(completed)
    }

    /// A copy of the unfinished segment, zero after the WAL received; `None`
    /// when nothing of it was received yet.
    pub(crate) fn tail(&self) -> Option<SegmentBytes> {
        (self.filled > 0).then(|| SegmentBytes {
            name: self.name(),
            bytes: self.buffer.clone(),
            end: self.position(),
        })
    }

    fn name(&self) -> SegmentName {
        SegmentName {
            timeline: self.timeline,
            segno: self.segno,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u32 = 1 << 20;

    fn assembler(start: u64) -> SegmentAssembler {
        SegmentAssembler::new(TimelineId(1), SIZE, Lsn(start)).unwrap()
    }

    /// A recognisable byte for each LSN.
    fn byte_at(lsn: u64) -> u8 {
        (lsn % 251) as u8
    }

    fn wal(from: u64, len: usize) -> Vec<u8> {
        (from..from + len as u64).map(byte_at).collect()
    }

    #[test]
    fn frames_of_any_size_make_the_same_segments() {
        let start = 3 * u64::from(SIZE);
        let total = 2 * SIZE as usize + 5000;
        for frame in [1usize, 999, 8192, 131_072, SIZE as usize, total] {
            let mut a = assembler(start);
            let mut done = Vec::new();
            let mut at = start;
            let end = start + total as u64;
            while at < end {
                let n = frame.min((end - at) as usize);
                done.extend(a.push(Lsn(at), &wal(at, n)).unwrap());
                at += n as u64;
            }
            assert_eq!(done.len(), 2, "frame size {frame}");
            for (i, seg) in done.iter().enumerate() {
                let seg_start = start + i as u64 * u64::from(SIZE);
                assert_eq!(seg.name.segno, SegmentNo(3 + i as u64));
                assert_eq!(seg.end, Lsn(seg_start + u64::from(SIZE)));
                assert!(
                    seg.bytes == wal(seg_start, SIZE as usize),
                    "frame size {frame}"
                );
            }
            assert_eq!(a.position(), Lsn(end));
            assert_eq!(a.segment_start(), Lsn(start + 2 * u64::from(SIZE)));
            let tail = a.tail().unwrap();
            assert_eq!(tail.name.segno, SegmentNo(5));
            assert_eq!(tail.end, Lsn(end));
            assert_eq!(tail.bytes.len(), SIZE as usize);
            assert!(tail.bytes[..5000] == wal(a.segment_start().0, 5000)[..]);
            assert!(tail.bytes[5000..].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn gaps_and_misaligned_starts_are_refused() {
        assert!(SegmentAssembler::new(TimelineId(1), SIZE, Lsn(100)).is_err());
        let mut a = assembler(0);
        assert!(a.tail().is_none());
        a.push(Lsn(0), &wal(0, 100)).unwrap();
        let e = a.push(Lsn(200), &wal(200, 10)).unwrap_err();
        assert!(e.contains("0/C8") && e.contains("0/64"), "{e}");
        // Nothing was taken from the refused frame.
        assert_eq!(a.position(), Lsn(100));
        // An empty frame at the right place is fine.
        assert!(a.push(Lsn(100), &[]).unwrap().is_empty());
    }
}
