//! Transaction ids: 32 bits, compared in PostgreSQL's circular order.

/// `a` precedes `b` in PostgreSQL's circular xid order (as
/// `TransactionIdPrecedes` in `transam.c`, for normal xids).
pub fn precedes(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The first normal transaction id; lower ones are special
/// (invalid, bootstrap, frozen).
pub const FIRST_NORMAL: u32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_wraps_around() {
        assert!(precedes(3, 4));
        assert!(!precedes(4, 3));
        assert!(!precedes(5, 5));
        // Across the wraparound, the xid just before 2^32 precedes small ones.
        assert!(precedes(u32::MAX - 10, 20));
        assert!(!precedes(20, u32::MAX - 10));
    }
}
