//! Jobs: the backfill of a version (fill by replay or snapshot, catch up,
//! swap) and the live sync of built versions, as state machines over the
//! version's recorded phase.

mod backfill;
mod base;
mod compact;
mod copy_rows;
mod fence;
mod fill_chunked;
mod fill_copy;
mod fill_replay;
mod follow;
mod key_index;
mod path;
mod ranges;
mod refresh;
mod slot_wait;
mod swap;
mod sync;
mod throttle;
mod writers;

pub use backfill::{backfill, backfill_target, defines_same, verifies, BackfillOptions};
pub use compact::{compact, due as compaction_due, Compacted};
pub(crate) use follow::{catch_up, Follower};
pub use refresh::{refresh, Refreshed};
pub use swap::{rollback, swap};
pub use sync::{sync, SyncOptions};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// What every step of a job needs.
pub struct Context<'a> {
    /// The configuration.
    pub config: &'a Config,
    /// A session on the source.
    pub source: &'a Client,
    /// Stops the job at the next safe point.
    pub cancel: &'a CancellationToken,
}
