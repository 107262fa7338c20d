//! The powers of five Ryu scales by, to fixed precision.
//!
//! For double precision: `5^i` truncated to its 121 most significant bits,
//! and `⌊2^(bits(5^q) − 1 + 122) / 5^q⌋ + 1` (a 122-bit reciprocal, rounded
//! up); for single precision the same with 61 and 59 bits. The algorithm's
//! correctness proof depends on exactly these values, so they are computed
//! exactly with a small bignum the first time a float is printed.

use std::sync::OnceLock;

// Bit counts of the scaled powers of five (double and single precision).
pub(super) const D_INV_BITS: u32 = 122;
pub(super) const D_BITS: u32 = 121;
pub(super) const F_INV_BITS: u32 = 59;
pub(super) const F_BITS: u32 = 61;

/// Scaled powers of five for Ryu, computed exactly once.
pub(super) struct Tables {
    /// ⌊2^(bits(5^q) − 1 + 122) / 5^q⌋ + 1, q < 292.
    pub(super) d_inv: Vec<u128>,
    /// 5^i to 121 significant bits, i < 326.
    pub(super) d_pow: Vec<u128>,
    /// ⌊2^(bits(5^q) − 1 + 59) / 5^q⌋ + 1, q < 31.
    pub(super) f_inv: Vec<u64>,
    /// 5^i to 61 significant bits, i < 48.
    pub(super) f_pow: Vec<u64>,
}

/// The tables, built on first use.
pub(super) fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut t = Tables {
            d_inv: Vec::with_capacity(292),
            d_pow: Vec::with_capacity(326),
            f_inv: Vec::with_capacity(31),
            f_pow: Vec::with_capacity(48),
        };
        let mut p = Big::one();
        for i in 0..326u32 {
            if i < 292 {
                t.d_inv.push(p.inverse(D_INV_BITS) + 1);
            }
            t.d_pow.push(p.top_bits(D_BITS));
            if i < 31 {
                t.f_inv.push((p.inverse(F_INV_BITS) + 1) as u64);
            }
            if i < 48 {
                t.f_pow.push(p.top_bits(F_BITS) as u64);
            }
            p.mul_small(5);
        }
        t
    })
}

/// A non-negative integer as little-endian 64-bit limbs (enough for 5^325).
struct Big(Vec<u64>);

impl Big {
    fn one() -> Big {
        Big(vec![1])
    }

    fn mul_small(&mut self, m: u64) {
        let mut carry = 0u128;
        for limb in &mut self.0 {
            let v = u128::from(*limb) * u128::from(m) + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
        if carry != 0 {
            self.0.push(carry as u64);
        }
    }

    fn bit_len(&self) -> u32 {
        let top = self.0.len() as u32 - 1;
        64 * top + (64 - self.0[top as usize].leading_zeros())
    }

    fn bit(&self, i: u32) -> u128 {
        u128::from((self.0[(i / 64) as usize] >> (i % 64)) & 1)
    }

    /// The `n` most significant bits (padded with zeros when shorter).
    fn top_bits(&self, n: u32) -> u128 {
        let len = self.bit_len();
        if len <= n {
            let mut v = 0u128;
            for i in (0..len).rev() {
                v = (v << 1) | self.bit(i);
            }
            v << (n - len)
        } else {
            (len - n..len)
                .rev()
                .fold(0u128, |v, i| (v << 1) | self.bit(i))
        }
    }

    /// ⌊2^(bits(self) − 1 + extra) / self⌋, by shift-and-subtract.
    fn inverse(&self, extra: u32) -> u128 {
        let mut rem = Big(vec![0; self.0.len() + 1]);
        let top = self.bit_len() - 1;
        rem.0[(top / 64) as usize] = 1 << (top % 64);
        let mut quotient = 0u128;
        for step in 0..=extra {
            if step > 0 {
                rem.shl1();
            }
            quotient <<= 1;
            if !rem.less_than(self) {
                rem.sub(self);
                quotient |= 1;
            }
        }
        quotient
    }

    fn shl1(&mut self) {
        let mut carry = 0;
        for limb in &mut self.0 {
            let next = *limb >> 63;
            *limb = (*limb << 1) | carry;
            carry = next;
        }
    }

    fn limb(&self, i: usize) -> u64 {
        self.0.get(i).copied().unwrap_or(0)
    }

    fn less_than(&self, other: &Big) -> bool {
        let n = self.0.len().max(other.0.len());
        for i in (0..n).rev() {
            let (a, b) = (self.limb(i), other.limb(i));
            if a != b {
                return a < b;
            }
        }
        false
    }

    fn sub(&mut self, other: &Big) {
        let mut borrow = 0u64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let (v, b1) = limb.overflowing_sub(other.limb(i));
            let (v, b2) = v.overflowing_sub(borrow);
            *limb = v;
            borrow = u64::from(b1 || b2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_hold_the_defining_values() {
        let t = tables();
        assert_eq!(t.d_inv[0], (1u128 << 122) + 1);
        assert_eq!(t.d_pow[0], 1u128 << 120);
        assert_eq!(t.d_pow[1], 5u128 << 118);
        assert_eq!(t.f_inv[1], (1u64 << 61) / 5 + 1);
        assert_eq!(t.f_pow[1], 5u64 << 58);
        // 5^55 has 128 bits: its top 121 bits drop the low 7.
        assert_eq!(t.d_pow[55], 5u128.pow(55) >> 7);
    }
}
