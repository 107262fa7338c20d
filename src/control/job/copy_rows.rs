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
async fn projection(
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

/// How a copy reads its rows and how they reach the version's table:
/// straight into a table being loaded (`loading`) when the transform is the
/// identity and no base snapshot keeps the source's rows (`keeps_base`),
/// else through the transform, evaluated where `transform_on` says.
/// Returns whether they go straight in, the COPY format, and the transform
/// evaluated on the source, if it is.
pub(super) async fn route(
    cx: &Context<'_>,
    dest: &Client,
    plan: &Plan,
    loading: bool,
    keeps_base: bool,
) -> Result<(bool, CopyFormat, Option<walfill_snapshot::Projection>)> {
    let direct = loading && plan.is_identity() && !keeps_base;
    let format = crate::pipeline::source::copy_format(
        cx.config.backfill.copy_format,
        cx.source,
        dest,
        plan,
        keeps_base,
    )
    .await?;
    let projection = projection(cx, dest, plan, loading && !direct, format).await?;
    Ok((direct, format, projection))
}

/// How a copy's rows reach the version's table, for its log line.
pub(super) fn rows_label(direct: bool, projected: bool) -> &'static str {
    match (direct, projected) {
        (true, _) => "copied straight in (identity transform)",
        (false, true) => "transformed on the source and copied straight in",
        (false, false) => "through the transform",
    }
}
