//! Jobs: the backfill of a version (copy, catch up, swap) and the live sync
//! of built versions.

mod backfill;
mod base;
mod copy;
mod follow;
mod path;
mod replay;
mod source;
mod sync;

pub use backfill::{backfill, BackfillOptions};
pub use follow::{Follower, Stop};
pub use source::{current_wal_lsn, require_publication, slot_exists};
pub use sync::{sync, SyncOptions};
