//! Checked little-endian reads from a byte slice.
//!
//! Every read names what it reads, so a short buffer becomes
//! [`DecodeErrorKind::Truncated`] saying which structure ended early.

use super::error::DecodeErrorKind;

/// A cursor over a byte slice; reads never panic.
#[derive(Clone, Debug)]
pub(crate) struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    /// A reader at the start of `buf`.
    #[inline]
    pub(crate) fn new(buf: &'a [u8]) -> ByteReader<'a> {
        ByteReader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Offset of the next byte to read.
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes.
    #[inline]
    pub(crate) fn bytes(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [u8], DecodeErrorKind> {
        match self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
        {
            Some(out) => {
                self.pos += n;
                Ok(out)
            }
            None => Err(truncated(what, n, self.remaining())),
        }
    }

    /// Everything not read yet.
    #[inline]
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// A NUL-terminated string, returned without its NUL (which is consumed).
    #[inline]
    pub(crate) fn until_nul(&mut self, what: &'static str) -> Result<&'a [u8], DecodeErrorKind> {
        let rest = &self.buf[self.pos..];
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeErrorKind::Malformed {
                what,
                detail: "no terminating NUL".to_string(),
            })?;
        self.pos += len + 1;
        Ok(&rest[..len])
    }

    /// Skips `n` bytes.
    #[inline]
    pub(crate) fn skip(&mut self, n: usize, what: &'static str) -> Result<(), DecodeErrorKind> {
        self.bytes(n, what).map(|_| ())
    }

    /// Skips to the next multiple of `align` counted from the start of the buffer.
    #[inline]
    pub(crate) fn align(
        &mut self,
        align: usize,
        what: &'static str,
    ) -> Result<(), DecodeErrorKind> {
        let pad = (align - self.pos % align) % align;
        self.skip(pad, what)
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeErrorKind> {
        let bytes = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// One byte.
    #[inline]
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeErrorKind> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A little-endian `u16`.
    #[inline]
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeErrorKind> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// A little-endian `u32`.
    #[inline]
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeErrorKind> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian `i32`.
    #[inline]
    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, DecodeErrorKind> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian `u64`.
    #[inline]
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeErrorKind> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A little-endian `i64`.
    #[inline]
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeErrorKind> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    /// A count stored as a signed 32-bit integer; negative counts are malformed.
    #[inline]
    pub(crate) fn count(&mut self, what: &'static str) -> Result<usize, DecodeErrorKind> {
        let n = self.i32(what)?;
        usize::try_from(n).map_err(|_| DecodeErrorKind::Malformed {
            what,
            detail: format!("negative count {n}"),
        })
    }

    /// `n` little-endian `u32`s.
    #[inline]
    pub(crate) fn u32_array(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<Vec<u32>, DecodeErrorKind> {
        let need = n.checked_mul(4).ok_or(DecodeErrorKind::Truncated {
            what,
            need: usize::MAX,
            have: self.remaining(),
        })?;
        let bytes = self.bytes(need, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Skips `n` items of `size` bytes.
    #[inline]
    pub(crate) fn skip_items(
        &mut self,
        n: usize,
        size: usize,
        what: &'static str,
    ) -> Result<(), DecodeErrorKind> {
        let need = n.checked_mul(size).ok_or(DecodeErrorKind::Truncated {
            what,
            need: usize::MAX,
            have: self.remaining(),
        })?;
        self.skip(need, what)
    }

    /// Fails unless every byte was read.
    #[inline]
    pub(crate) fn finish(&self, what: &'static str) -> Result<(), DecodeErrorKind> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeErrorKind::Malformed {
                what,
                detail: format!("{extra} unexpected trailing bytes"),
            }),
        }
    }
}

/// The error for a read past the end; kept out of line so reads stay small.
#[cold]
#[inline(never)]
fn truncated(what: &'static str, need: usize, have: usize) -> DecodeErrorKind {
    DecodeErrorKind::Truncated { what, need, have }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_truncation() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7];
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.u16("b").unwrap(), 0x0302);
        assert_eq!(r.u32("c").unwrap(), 0x0706_0504);
        assert_eq!(
            r.u8("d"),
            Err(DecodeErrorKind::Truncated {
                what: "d",
                need: 1,
                have: 0
            })
        );
        let mut r = ByteReader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            r.count("n"),
            Err(DecodeErrorKind::Malformed { .. })
        ));
        let mut r = ByteReader::new(&[1, 0]);
        r.skip(1, "x").unwrap();
        r.align(2, "pad").unwrap();
        assert_eq!(r.position(), 2);
        assert!(r.u32_array(usize::MAX / 2, "big").is_err());
    }
}
