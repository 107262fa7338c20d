//! A fresh version's load over several destination sessions (see
//! [`crate::pipeline::apply::run`]): the job's own session and
//! `backfill.writers - 1` more, each with a work table of its own.

use tokio_postgres::Client;

use super::Context;
use crate::control::state::VersionState;
use crate::db::{self, Role};
use crate::error::Result;
use crate::pipeline::apply::{run, Applied, HistorySource, Store};
use crate::pipeline::version_sql::Plan;

/// Stores every batch of `source` into the version, on `dest` and the
/// configured number of further writer sessions. The batches must be
/// those of a load: each with its cursor, no two touching the same key.
pub(super) async fn load<S: HistorySource>(
    cx: &Context<'_>,
    dest: &mut Client,
    (plan, store): (&Plan, &Store),
    state: &mut VersionState,
    source: &mut S,
    failpoint_prefix: &str,
) -> Result<Applied> {
    let mut extra = Vec::new();
    for _ in 1..cx.config.backfill.writers {
        let session = db::connect(&cx.config.destination, Role::Destination).await?;
        crate::pipeline::version_sql::create_work_table(&session, plan).await?;
        extra.push(session);
    }
    let mut lanes = vec![dest];
    lanes.extend(extra.iter_mut());
    run(lanes, store, state, source, cx.cancel, failpoint_prefix).await
}
