//! Test support: private databases on the test cluster, a walfill runner, and
//! comparisons of a target's view with its transform computed by PostgreSQL.

#![allow(dead_code, unreachable_pub)]

pub mod backrest;
pub mod cluster;
pub mod compare;
pub mod failover;
pub mod foreign;
pub mod role;
pub mod rss;
pub mod run;
pub mod server;
pub mod service;
pub mod workload;

pub use cluster::TestDb;
pub use compare::{assert_view_matches, assert_view_matches_in};
pub use run::Walfill;
