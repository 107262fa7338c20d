//! walfill rebuilds derived tables from a PostgreSQL database's history.
//!
//! A *target* is a source table passed through a transform. Each *version* of
//! a target is filled into its own staging table from a history source (a
//! snapshot at a recorded boundary LSN), kept in step with the live logical
//! stream, and published by an atomic view swap. Data flows one way:
//!
//! history source ([`source`]: a snapshot copy, a base snapshot, WAL
//! replay, the live stream) → batches → [`apply`] (the transform, a
//! versioned upsert into the version's table, the cursor recorded in the
//! same transaction) → the view swap ([`job::swap`]).
//!
//! Every row change carries the version `(commit LSN, position in its
//! transaction)`; snapshot rows carry `(boundary, 0)`. The apply lets only a
//! newer version win and keeps deletes as versioned tombstones, so history
//! sources may overlap and arrive in any interleaving with the same result.

pub mod archiver;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod control;
pub mod db;
pub mod error;
pub mod failpoint;
pub mod output;
pub mod pipeline;
pub mod progress;
pub mod retry;
pub mod serve;
pub mod telemetry;
pub mod upstream;
