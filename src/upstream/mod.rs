//! The source database, asked small questions: its WAL position and the
//! archive's progress behind it, its replication slots, its publication.
//!
//! Nothing here knows of jobs, versions or their state: the planner, the
//! jobs and the commands above all ask through these functions, and
//! nothing here calls back up.

pub mod catalog;
pub mod journal;
pub mod publication;
pub mod slots;
pub mod wal;

pub use publication::{publication_problems, require_publication};
pub use slots::{drop_slot, drop_slot_when_free, slot_exists, slot_health, SlotHealth};
pub use wal::{can_switch_wal, current_wal_lsn, explain_slow_archive, wait_for_archive};
