//! The one apply path: batches from any history source into a version's
//! table.
//!
//! - [`batch`]: what every source yields — row writes with their versions,
//!   an optional TRUNCATE, and the cursor to record;
//! - [`fold`]: row changes folded to one write per key, columns matched by
//!   attribute number;
//! - [`store`]: a batch stored by the version rule;
//! - [`run`]: the loop — store, record the cursor in the same destination
//!   transaction, commit, then confirm to the source;
//! - [`stream_desc`]: the attribute numbers of a logical stream's columns.

mod batch;
mod dead;
mod fold;
mod run;
mod store;
mod stream_desc;

pub use batch::{Batch, ChunkSnapshot, Cursor, HistorySource, Writes};
pub use dead::is_data_error;
pub use fold::{ColumnMap, Entry, Era, Fold, Folder, Op};
pub use run::{run, Applied};
pub use store::{Store, Stored};
pub use stream_desc::{describe_relation, DescColumn, StreamDesc};
