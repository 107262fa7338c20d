//! Key ranges for a chunked copy made by several workers: cut from the
//! histogram PostgreSQL keeps of the key's first column (never a count of
//! the table), recorded in the destination so that each range resumes
//! after its own last stored key.

use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::pipeline::source::chunked::KeyRange;
use crate::pipeline::version_sql::Plan;

/// A range still to copy, and where it resumes.
pub(super) struct Pending {
    /// The range.
    pub range: KeyRange,
    /// Its last stored key, if any.
    pub cursor: Option<Vec<String>>,
    /// Rows stored so far.
    pub rows: i64,
}

/// Whether the version's copy was cut into ranges, and those not done.
pub(super) async fn load(dest: &Client, plan: &Plan) -> Result<Option<Vec<Pending>>> {
    let rows = dest
        .query(
            "SELECT range_no, above, up_to, cursor, rows_copied, done FROM walfill.chunk_ranges
              WHERE version_table = $1 ORDER BY range_no",
            &[&plan.staging_table()],
        )
        .await
        .map_err(|e| Error::destination("reading the copy's key ranges", e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        rows.iter()
            .filter(|r| !r.get::<_, bool>(5))
            .map(|r| Pending {
                range: KeyRange {
                    no: r.get(0),
                    above: r.get(1),
                    up_to: r.get(2),
                },
                cursor: r.get(3),
                rows: r.get(4),
            })
            .collect(),
    ))
}

/// Cuts the table into up to `workers` ranges of about as many rows, from
/// the histogram of its key's first column, and records them. Fewer (one)
/// when the table has no histogram yet (never analyzed, or too small).
pub(super) async fn plan(
    source: &Client,
    dest: &Client,
    plan: &Plan,
    workers: u32,
) -> Result<Vec<Pending>> {
    let first = plan.source.key.first().cloned().unwrap_or_default();
    let bounds: Vec<String> = source
        .query(
            "SELECT u.b FROM pg_stats s,
                    unnest(s.histogram_bounds::text::text[]) WITH ORDINALITY AS u(b, i)
              WHERE s.schemaname = $1 AND s.tablename = $2 AND s.attname = $3
                AND NOT s.inherited
              ORDER BY u.i",
            &[&plan.source.schema, &plan.source.name, &first],
        )
        .await
        .map_err(|e| Error::source_query("reading the key's histogram", e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let workers = workers.max(1) as usize;
    let mut cuts: Vec<String> = (1..workers)
        .filter_map(|j| bounds.get(j * bounds.len() / workers).cloned())
        .collect();
    cuts.dedup();
    if cuts.is_empty() && workers > 1 {
        tracing::warn!(
            table = %plan.source,
            "the key has no histogram (ANALYZE the table for one): the copy runs as one range"
        );
    }
    let mut ranges = Vec::new();
    let mut above: Option<String> = None;
    for (no, up_to) in cuts
        .into_iter()
        .map(Some)
        .chain(std::iter::once(None))
        .enumerate()
    {
        ranges.push(Pending {
            range: KeyRange {
                no: no as i32,
                above: above.clone(),
                up_to: up_to.clone(),
            },
            cursor: None,
            rows: 0,
        });
        above = up_to;
    }
    for pending in &ranges {
        let r = &pending.range;
        dest.execute(
            "INSERT INTO walfill.chunk_ranges (version_table, range_no, above, up_to)
             VALUES ($1, $2, $3, $4)",
            &[&plan.staging_table(), &r.no, &r.above, &r.up_to],
        )
        .await
        .map_err(|e| Error::destination("recording the copy's key ranges", e))?;
    }
    Ok(ranges)
}

/// Records that range `no` is copied whole.
pub(super) async fn done(dest: &Client, plan: &Plan, no: i32) -> Result<()> {
    dest.execute(
        "UPDATE walfill.chunk_ranges SET done = true WHERE version_table = $1 AND range_no = $2",
        &[&plan.staging_table(), &no],
    )
    .await
    .map_err(|e| Error::destination("recording a finished key range", e))?;
    Ok(())
}
