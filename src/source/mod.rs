//! History sources: everything a version can be filled from, each yielding
//! the same [`Batch`](crate::apply::Batch)es for the one apply loop.
//!
//! - [`copy`]: a snapshot of the source table, in keyset chunks;
//! - [`chunked`]: the same chunks, each read in a snapshot of its own;
//! - [`base`]: a base snapshot in the archive, in parts;
//! - [`replay`]: archived WAL, decoded outside the server;
//! - [`live`]: the version's logical slot, which never ends.

pub mod base;
pub mod chunked;
pub mod copy;
pub mod live;
pub mod replay;
