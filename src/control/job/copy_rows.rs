//! How a copy's rows reach the version's table: straight in, transformed
//! by the source, or through the transform in the destination. Shared by
//! the copy in one snapshot and the chunked copy.

use tokio_postgres::Client;
use walfill_snapshot::CopyFormat;

use super::Context;
use crate::error::Result;
use crate::pipeline::version_sql::Plan;

/// The transform for the source to evaluate over the copy's chunks, when
/// the version is `loading` (nothing else writes it) and that gives the
/// same values (see [`crate::pipeline::source::evaluate`]).
pub(super) async fn projection(
    cx: &Context<'_>,
    dest: &Client,
    plan: &Plan,
    loading: bool,
    format: CopyFormat,
) -> Result<Option<walfill_snapshot::Projection>> {
    if !loading {
        return Ok(None);
    }
    let on = cx.config.backfill.transform_on;
    crate::pipeline::source::evaluate::projection(on, format, cx.source, dest, plan).await
}

/// How a copy's rows reach the version's table, for its log line.
pub(super) fn rows_label(direct: bool, projected: bool) -> &'static str {
    match (direct, projected) {
        (true, _) => "copied straight in (identity transform)",
        (false, true) => "transformed on the source and copied straight in",
        (false, false) => "through the transform",
    }
}
