//! History in, the version's table out: a history source yields batches of
//! row changes, and the apply writes them to a version's table with its
//! cursor, in one transaction per batch.
//!
//! Nothing here knows of jobs, requests or the phases of a version: progress
//! is recorded through [`apply::RecordProgress`], which the control wing
//! implements. The pipeline asks the source database only through
//! [`crate::upstream`].

pub mod apply;
pub mod base;
pub mod enum_labels;
pub mod source;
pub mod version_sql;
