//! The one apply path: batches from any history source into a version's
//! table.
//!
//! - [`batch`]: what every source yields — row writes with their versions,
//!   an optional TRUNCATE, and the cursor to record;
//! - [`fold`]: row changes folded to one write per key, columns matched by
//!   attribute number;
//! - [`external`]: the same fold beyond memory, spilling sorted runs to
//!   disk and merging them, for a replay;
//! - [`store`]: a batch stored by the version rule;
//! - [`run`]: the one loop — store, record the cursor in the same
//!   destination transaction, commit, then confirm to the source; over one
//!   destination session or, for a fresh version's load, several (lanes);
//! - [`stream_desc`]: the attribute numbers of a logical stream's columns.

mod batch;
mod dead;
mod external;
mod fold;
mod letters;
mod run;
mod store;
mod stream_desc;

pub use batch::{Batch, ChunkSnapshot, Cursor, HistorySource, Letter, RecordProgress, Writes};
pub use dead::is_data_error;
pub use external::{ExternalFold, Merged, Spilled, WalRead};
pub use fold::{ColumnMap, Entry, Era, Fold, Folder, Op};
pub use run::{run, Applied, Lanes};
pub use store::{Store, Stored};
pub use stream_desc::{describe_relation, DescColumn, StreamDesc};
