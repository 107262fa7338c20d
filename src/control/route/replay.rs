//! Whether the archive can serve a replay of a table, and from where: the
//! checks a replay must pass, in order, each refusing with the reason the
//! snapshot it falls back to carries.

use tokio_postgres::Client;
use walfill_core::Lsn;
use walfill_replay::archive::{Archive, ArchiveError, Layout, ReadOptions};
use walfill_replay::decode::{changed_without_rows, is_supported, Identity, NewRelation};
use walfill_replay::{SegmentName, SegmentNo, TimelineId};

use super::creation::{self, creation_start};
use super::scan::{scan_journal, Scan};
use super::{source_identity, Decision, ReplayStart};
use crate::config::Config;
use crate::control::state::Path;
use crate::error::{Error, Result};
use crate::pipeline::base::{find_bases, summary_store};
use crate::pipeline::version_sql::Plan;

/// Why a check did not let the replay go on.
enum Refusal {
    /// A failure to report as such.
    Failed(Error),
    /// No replay: a snapshot for this reason. `until_archived`: WAL the
    /// archive does not hold yet could change that.
    NoReplay {
        reason: String,
        until_archived: bool,
    },
}

impl<E: Into<Error>> From<E> for Refusal {
    fn from(e: E) -> Refusal {
        Refusal::Failed(e.into())
    }
}

/// No replay, for `reason`.
fn no_replay<T>(reason: impl Into<String>) -> std::result::Result<T, Refusal> {
    Err(Refusal::NoReplay {
        reason: reason.into(),
        until_archived: false,
    })
}

/// No replay yet, for `reason`: WAL not archived yet could change that.
fn not_yet<T>(reason: impl Into<String>) -> std::result::Result<T, Refusal> {
    Err(Refusal::NoReplay {
        reason: reason.into(),
        until_archived: true,
    })
}

type Checked<T> = std::result::Result<T, Refusal>;

/// The source's database, its WAL position, and whether the catalog
/// journal is installed in it.
struct Position {
    database: u32,
    lsn: Lsn,
    journal: bool,
}

/// The archive's segments a replay would read: the contiguous run of
/// segments that ends with the newest, on the source's timeline (or the
/// ones recovery towards it would follow).
struct Covered {
    /// Every segment of the followed timelines, sorted.
    segments: Vec<SegmentName>,
    /// The index of the first segment of the run that ends with the newest.
    first: usize,
    /// The segment size in bytes.
    size: u64,
    /// Where the run begins.
    from: Lsn,
    /// The segment missing before the run, when one is: its file name and
    /// where its WAL begins.
    gap: Option<(String, Lsn)>,
}

/// Decides whether the version of `plan` can be built by replay now: a
/// replay decision with its start, or a snapshot with the reason.
pub(super) async fn decide_replay(
    config: &Config,
    source: &Client,
    plan: &Plan,
) -> Result<Decision> {
    let at = position(source).await?;
    let rows = plan.source.estimated_rows.max(0);
    match replay_start(config, source, plan, &at).await {
        Ok((start, wal_bytes, summarized_bytes)) => {
            let estimated = match &start {
                ReplayStart::Snapshot { manifest } => manifest.rows as i64,
                ReplayStart::Creation { .. } => rows,
            };
            let mut decision = Decision::snapshot(
                format!(
                    "the archive covers {} from {} to now",
                    plan.source,
                    start.describe()
                ),
                estimated.max(rows),
                at.lsn,
            );
            decision.path = Path::Replay;
            decision.start = Some(start);
            decision.wal_bytes = wal_bytes;
            decision.summarized_bytes = summarized_bytes;
            Ok(decision)
        }
        Err(Refusal::NoReplay {
            reason,
            until_archived,
        }) => {
            let decision = Decision::snapshot(reason, rows, at.lsn);
            Ok(match until_archived {
                true => decision.until_archived(),
                false => decision,
            })
        }
        Err(Refusal::Failed(e)) => Err(e),
    }
}

/// Where the replay starts, the WAL it reads to the source's position, and
/// how much of that segment summaries serve.
async fn replay_start(
    config: &Config,
    source: &Client,
    plan: &Plan,
    at: &Position,
) -> Checked<(ReplayStart, u64, u64)> {
    let Some(url) = &config.archive else {
        return no_replay(
            "no archive is configured ([archive] url), so there is no history to replay",
        );
    };
    if !at.journal {
        return no_replay(
            "the catalog journal is not installed in the source: run `walfill setup`",
        );
    }
    let archive = config.open_archive(url)?;
    let identity = source_identity(config).await?;
    let bases = config.open_bases().and_then(|b| b.ok());
    let summaries = summary_store(&archive, bases.as_ref()).await;
    let covered = covered(&archive, &identity).await?;
    let archived = creation::Archived {
        archive: &archive,
        summaries: summaries.as_ref(),
        database: at.database,
        identity: &identity,
        segments: &covered.segments,
        first: covered.first,
        size: covered.size,
    };
    let (start, scan) = find_start(config, source, plan, &archived, &covered).await?;
    let relation = replayable(source, plan, &start, &scan).await?;
    supported(plan, &relation)?;
    let wal_bytes = at.lsn.checked_sub(start.restart()).unwrap_or(0);
    let summarized = summarized_wal(
        (&archive, summaries.as_ref()),
        start.restart(),
        at.database,
        TimelineId(identity.timeline),
    )
    .await;
    Ok((start, wal_bytes, summarized))
}

async fn position(source: &Client) -> Result<Position> {
    let row = source
        .query_one(
            "SELECT d.oid, pg_current_wal_lsn(),
                    EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname LIKE 'walfill%')
               FROM pg_database d WHERE d.datname = current_database()",
            &[],
        )
        .await
        .map_err(|e| Error::source_query("reading the source's position", e))?;
    Ok(Position {
        database: row.get(0),
        lsn: row.get(1),
        journal: row.get(2),
    })
}

/// The segments the archive holds of the source's timeline (and those
/// before it), and the contiguous run a replay can read.
async fn covered(archive: &Archive, identity: &Identity) -> Checked<Covered> {
    let list = match archive.segments(None).await {
        Ok(list) => list,
        Err(ArchiveError::NoSegments { .. }) => return not_yet("the archive holds no WAL"),
        Err(e) => return Err(e.into()),
    };
    // The segments recovery towards the source's timeline would read
    // (several timelines' when it went through a switch).
    let followed = archive.follow(&list, TimelineId(identity.timeline)).await?;
    let timelines = list
        .timelines()
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let list = match followed {
        Some(followed) => followed,
        None if list.timelines().len() > 1 => {
            return no_replay(format!(
                "the archive holds WAL of several timelines ({timelines}) but no history file of \
                 the source's timeline {}, which says which one to replay where",
                identity.timeline
            ))
        }
        None => list,
    };
    if list.segments.is_empty() {
        return no_replay(format!(
            "the archive holds no WAL of the source's timeline {} or the timelines before it \
             (only of timelines {timelines})",
            identity.timeline,
        ));
    }
    let size = u64::from(list.segment_size);
    let mut segments: Vec<_> = list.segments.iter().map(|s| s.name).collect();
    segments.sort();
    let mut first = segments.len() - 1;
    while first > 0 && segments[first - 1].segno.next() == segments[first].segno {
        first -= 1;
    }
    let gap = (first > 0).then(|| {
        let missing = segments[first - 1].segno.next();
        let name = SegmentName {
            timeline: segments[first].timeline,
            segno: missing,
        };
        (name.file_name(size), missing.start_lsn(size))
    });
    Ok(Covered {
        from: segments[first].segno.start_lsn(size),
        segments,
        first,
        size,
        gap,
    })
}

/// The newest start the archive offers (a base snapshot it covers, or the
/// table's creation), with the scan of the journal from there.
async fn find_start(
    config: &Config,
    source: &Client,
    plan: &Plan,
    archived: &creation::Archived<'_>,
    covered: &Covered,
) -> Checked<(ReplayStart, Scan)> {
    let relid = plan.source.oid;
    let oldest_xid = oldest_catalog_xid(source, relid).await?;
    let bases = match config.open_bases() {
        Some(store) => find_bases(&store?, archived.database, relid).await?,
        None => Vec::new(),
    };
    let base = bases.into_iter().find(|m| m.restart_lsn >= covered.from);
    // With a base, only what follows it matters (a later creation of the
    // same OID included). Without one, the scan starts before the table's
    // creation (see `creation`).
    let newest = covered.segments[covered.segments.len() - 1].segno;
    let scan = match &base {
        // The base is newer than the archived WAL: nothing to scan yet.
        Some(b) if SegmentNo::containing(b.restart_lsn, covered.size) > newest => {
            Scan::nothing(archived.database, Some(&b.relation), b.restart_lsn)
        }
        Some(b) => {
            let store = (archived.archive, archived.summaries);
            let relation = Some(&b.relation);
            let (database, identity) = (archived.database, archived.identity);
            scan_journal(store, database, identity, relation, b.restart_lsn, None).await?
        }
        None => creation::scan_from_creation(archived, source, relid, oldest_xid).await?,
    };
    let creation = creation_start(&scan, relid);
    let base = base.map(|m| ReplayStart::Snapshot {
        manifest: Box::new(m),
    });
    let start = match (creation, base) {
        (Some(c), Some(b)) => Some(if b.restart() > c.restart() { b } else { c }),
        (c, b) => c.or(b),
    };
    match start {
        Some(start) => Ok((start, scan)),
        None => not_yet(no_start(config, plan, archived.archive, covered).await),
    }
}

/// Why there is no base to replay from, and what would give one.
async fn no_start(config: &Config, plan: &Plan, archive: &Archive, covered: &Covered) -> String {
    // Whether a snapshot backfill will leave a base here: only into an
    // archive of walfill's own layout, with base snapshots on.
    let writes_bases = match archive.layout().await {
        _ if !config.archive_settings.base_snapshots => {
            "[archive] base_snapshots = false, so no snapshot backfill writes one".to_string()
        }
        _ if config.archive_settings.bases_url.is_some() => {
            "the first snapshot backfill writes one into [archive] bases_url".to_string()
        }
        Ok(Layout::Walfill) => "the first snapshot backfill writes one".to_string(),
        Ok(layout) => format!(
            "walfill writes nothing into an archive of the {layout} layout, so a table older \
             than this archive can never replay here; set [archive] bases_url to a location \
             beside it, and the first snapshot backfill keeps a base there"
        ),
        Err(_) => "the archive's layout could not be told".to_string(),
    };
    let mut reason = format!(
        "no base to replay {} from: the archive does not cover its creation and holds no \
         base snapshot of it ({writes_bases})",
        plan.source
    );
    if let Some((file, lsn)) = &covered.gap {
        reason.push_str(&format!(
            "; the archive is contiguous only from {}: segment {file} (WAL from {lsn}) is missing",
            covered.from
        ));
    }
    reason
}

/// The table as the archive last describes it, when the archive can follow
/// it from `start` and nothing the archive does not hold yet changed what
/// the replay would read.
async fn replayable(
    source: &Client,
    plan: &Plan,
    start: &ReplayStart,
    scan: &Scan,
) -> Checked<NewRelation> {
    if let Some(lost) = plan.blocking_loss(&scan.lost, start.from()) {
        return no_replay(format!(
            "{} cannot be followed through the archive from {}: {}",
            plan.source, lost.lsn, lost.reason
        ));
    }
    let relid = plan.source.oid;
    let relation = scan
        .catalog
        .by_oid(relid)
        .map(|r| r.spec.clone())
        .or_else(|| match start {
            ReplayStart::Snapshot { manifest } => Some(manifest.relation.clone()),
            ReplayStart::Creation { .. } => None,
        });
    let Some(relation) = relation else {
        return no_replay(format!(
            "the catalog journal has no schema for {}",
            plan.source
        ));
    };
    // WAL not archived yet may hold a schema change that rewrote values the
    // replay would need: compare the archive's last description with the
    // catalog's current one.
    if let Some(now) = crate::upstream::catalog::describe(source, relid).await? {
        let changed: Vec<_> = changed_without_rows(&relation, &now)
            .into_iter()
            .filter(|(attnum, _, _)| plan.reads_attnum(*attnum))
            .collect();
        if let Some((_, column, why)) = changed.first() {
            return not_yet(format!(
                "{}: column {column} {why} in WAL the archive does not hold yet (it ends at \
                 {}), so its values were never written as row changes",
                plan.source, scan.end
            ));
        }
        if now.file != relation.file {
            return not_yet(format!(
                "{} was rewritten (VACUUM FULL, CLUSTER or a schema change) in WAL the \
                 archive does not hold yet (it ends at {})",
                plan.source, scan.end
            ));
        }
    }
    Ok(relation)
}

/// Every column the transform reads has a type the decoder knows.
fn supported(plan: &Plan, relation: &NewRelation) -> Checked<()> {
    let columns = relation
        .attrs
        .attrs
        .iter()
        .zip(&relation.types)
        .zip(&relation.type_names);
    for ((attr, ty), type_name) in columns {
        let read = plan.reads_attnum(attr.attnum);
        if !attr.dropped && read && !ty.as_ref().is_some_and(is_supported) {
            return no_replay(format!(
                "column {}.{} has type {type_name}, which walfill cannot decode from WAL",
                plan.source, attr.name
            ));
        }
    }
    Ok(())
}

/// Bytes of the archived WAL from `restart` on that a replay of a table of
/// `database` would take from segment summaries (0 without a store of
/// summaries, or when they cannot be read: the estimate then counts it all).
async fn summarized_wal(
    (archive, store): (&Archive, Option<&Archive>),
    restart: Lsn,
    database: u32,
    timeline: TimelineId,
) -> u64 {
    let Some(store) = store else {
        return 0;
    };
    let options = ReadOptions::default().following(timeline);
    match archive
        .survey_summaries(store, restart, options, database)
        .await
    {
        Ok(survey) => survey.summarized_bytes,
        Err(e) => {
            tracing::debug!(error = %e, "segment summaries not surveyed");
            0
        }
    }
}

/// The oldest transaction that wrote one of the table's catalog rows
/// (`pg_class`, its row type, its columns): the creating one, unless all of
/// them were rewritten since.
async fn oldest_catalog_xid(source: &Client, relid: u32) -> Result<Option<u32>> {
    let row = source
        .query_one(
            "SELECT x::text FROM (
                 SELECT xmin AS x FROM pg_class WHERE oid = $1
                 UNION ALL
                 SELECT t.xmin FROM pg_type t JOIN pg_class c ON c.reltype = t.oid
                  WHERE c.oid = $1
                 UNION ALL
                 SELECT xmin FROM pg_attribute WHERE attrelid = $1 AND attnum > 0
             ) s ORDER BY age(x) DESC LIMIT 1",
            &[&relid],
        )
        .await
        .map_err(|e| Error::source_query("reading the table's catalog rows", e))?;
    Ok(row
        .get::<_, Option<String>>(0)
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|x| *x >= 3))
}
