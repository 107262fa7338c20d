//! Deciding and recording: which path a version takes ([`route`]), the jobs
//! that run it ([`job`]), and the state schema that records every phase
//! ([`state`]). Control drives the pipeline and asks the source through
//! `upstream`; neither calls back up.

pub mod dependents;
pub mod job;
pub mod retire;
pub mod route;
pub mod state;
pub mod status;
pub mod verify;
