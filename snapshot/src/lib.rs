//! Boundary-LSN snapshots of PostgreSQL tables and the live stream after them.
//!
//! - [`boundary`]: a logical slot created with an exported snapshot; its
//!   consistent point is the boundary LSN every copied row is versioned at.
//! - [`table`]: the source table's catalog: columns, identity, estimate.
//! - [`copy`]: keyset-ordered chunks read inside the snapshot, never OFFSET.
//! - [`rows`]: a chunk's rows on their way, in bounded pieces of COPY data.
//! - [`format`]: whether a table's rows may travel in binary.
//! - [`live`]: the slot's stream of committed transactions after the boundary.
//!
//! The crate knows nothing of targets or destinations: it reads the source.

pub mod boundary;
pub mod copy;
pub mod copy_data;
pub mod error;
pub mod format;
pub mod live;
pub mod rows;
pub mod sql;
pub mod suffix;
pub mod table;

pub use boundary::{Boundary, ReplicationConnection, ReplicationUrl};
pub use copy::{ChunkReading, KeysetChunk, Projection, RowTap};
pub use copy_data::CopyFormat;
pub use error::{SlotProblem, SnapshotError};
pub use live::{LiveStream, StreamEvent};
pub use rows::{ChunkRead, ChunkRows, Piece, RowsSender};
pub use suffix::RowSuffix;
pub use table::{ReplicaIdentity, SourceCollation, SourceTable, TableColumn, DEFAULT_COLLATION};
