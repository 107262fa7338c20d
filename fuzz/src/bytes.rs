//! Reading fuzzer input as a sequence of small fields.
//!
//! Fuzz inputs start with a few parameter bytes followed by the payload. A
//! [`Input`] hands out fields front to back and reads missing bytes as zero,
//! so every input, however short, maps to *some* parameters and the fuzzer
//! never wastes executions on inputs rejected for being short.

/// Front-to-back reader over fuzzer input; reads past the end yield zeros.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { rest: data }
    }

    /// The next byte, 0 past the end.
    pub fn u8(&mut self) -> u8 {
        let [b] = self.array::<1>();
        b
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// The next `n` bytes, or fewer if the input ends first.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = tail;
        head
    }

    /// Everything not read yet.
    pub fn rest(self) -> &'a [u8] {
        self.rest
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let src = self.take(N);
        out[..src.len()].copy_from_slice(src);
        out
    }
}

/// A tiny deterministic generator (xorshift32) for choices derived from a
/// seed in the input, such as where to split a byte stream.
#[derive(Clone, Debug)]
pub struct Rng(u32);

impl Rng {
    /// A generator seeded with `seed` (0 is replaced, xorshift needs a non-zero state).
    pub fn new(seed: u32) -> Rng {
        Rng(if seed == 0 { 0x9E37_79B9 } else { seed })
    }

    /// The next pseudo-random value.
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    /// A value in `1..=max` (`max` at least 1).
    pub fn between_1_and(&mut self, max: usize) -> usize {
        1 + (self.next_u32() as usize) % max.max(1)
    }
}
