//! Finding a table's creation in the archived WAL when there is no base
//! snapshot of it: a scan of the journal from a restart point before the
//! creating transaction began to the end of the archive.
//!
//! A full scan costs time in proportion to the WAL it reads, so it should
//! run once. The journal says where the table's files were first described
//! (`walfill.journal_files`), so the creation is near that LSN. What a
//! scan starting there lacks is a restart point before the creating
//! transaction began: a running-xacts record, which the server writes every
//! 15 s or so and at checkpoints. A short probe of the segments just before
//! the creation finds one (1, 4, 16 ... segments back), and the scan starts
//! there. Without that hint the scan starts at the archive's end and grows
//! backwards: a young table costs a short scan, and only a table older than
//! the archive costs a scan of all of it.

use tokio_postgres::Client;
use walfill_core::xid::precedes as xid_precedes;
use walfill_core::Lsn;
use walfill_replay::decode::Identity;
use walfill_replay::{archive::Archive, SegmentName, SegmentNo};

use super::scan::{scan_journal, Scan};
use super::ReplayStart;
use crate::error::Result;

/// The archive's contiguous run of segments and whose WAL it holds.
pub(super) struct Archived<'a> {
    pub archive: &'a Archive,
    /// Where segment summaries are kept, if anywhere.
    pub summaries: Option<&'a Archive>,
    pub database: u32,
    pub identity: &'a Identity,
    /// Every segment, sorted.
    pub segments: &'a [SegmentName],
    /// The index of the first segment of the run that ends with the newest.
    pub first: usize,
    /// The segment size in bytes.
    pub size: u64,
}

impl Archived<'_> {
    fn start_of(&self, index: usize) -> Lsn {
        self.segments[index].segno.start_lsn(self.size)
    }

    /// Where the newest segment ends.
    fn end(&self) -> Lsn {
        let last = self.segments.len() - 1;
        Lsn(self.start_of(last).0 + self.size)
    }

    /// The index of the segment holding `lsn` (or of the first after it),
    /// within the contiguous run.
    fn index_of(&self, lsn: Lsn) -> usize {
        let segno = SegmentNo::containing(lsn, self.size);
        self.segments
            .iter()
            .position(|s| s.segno >= segno)
            .unwrap_or(self.segments.len() - 1)
            .max(self.first)
    }

    async fn scan(&self, from: Lsn, to: Option<Lsn>) -> Result<Scan> {
        scan_journal(
            (self.archive, self.summaries),
            self.database,
            self.identity,
            None,
            from,
            to,
        )
        .await
    }
}

/// Scans the journal from before the creation of table `relid` (whose
/// oldest catalog row was written by `oldest_xid`) to the end of the
/// archive, or all of the contiguous archive when the creation is older.
pub(super) async fn scan_from_creation(
    archived: &Archived<'_>,
    source: &Client,
    relid: u32,
    oldest_xid: Option<u32>,
) -> Result<Scan> {
    let last = archived.segments.len() - 1;
    // A hint outside the archive (another cluster's archive, or a table
    // described before the archive's first segment) says nothing.
    let described = first_described(source, relid)
        .await
        .filter(|at| *at > archived.start_of(archived.first) && *at < archived.end());
    // Where the hint is, a probe for the restart point before it; the
    // window then grows by 4, 16, ... segments before the probed start,
    // not by a multiple of all the WAL written since.
    let probed = match described {
        Some(at) => {
            let accept = |next: u32| oldest_xid.is_none_or(|x| !xid_precedes(x, next));
            restart_before(archived, at, accept).await?
        }
        None => None,
    };
    let mut start = match (probed, described) {
        (Some(restart), _) => archived.index_of(restart),
        (None, Some(at)) => archived.index_of(at).saturating_sub(1).max(archived.first),
        (None, None) => last,
    };
    let mut step = 1;
    loop {
        let scan = archived.scan(archived.start_of(start), None).await?;
        // The window began before the oldest transaction that wrote the
        // table's catalog rows (its creation, unless every row was
        // rewritten since): looking further back finds nothing.
        let before_table = scan
            .restart_points
            .first()
            .is_some_and(|(_, next)| oldest_xid.is_some_and(|x| !xid_precedes(x, *next)));
        if start == archived.first || before_table || creation_start(&scan, relid).is_some() {
            return Ok(scan);
        }
        step *= 4;
        start = match described {
            Some(_) => start.saturating_sub(step),
            // From the end: the window itself grows fourfold.
            None => last.saturating_sub((last + 1 - start) * 4 - 1),
        }
        .max(archived.first);
    }
}

/// The newest restart point (running-xacts record) before `before` whose
/// next xid `accept` takes, found by reading 1, 4, 16 ... segments back from
/// it, each stretch once; `None` when the contiguous archive has none.
async fn restart_before(
    archived: &Archived<'_>,
    before: Lsn,
    accept: impl Fn(u32) -> bool,
) -> Result<Option<Lsn>> {
    let mut end = archived.index_of(before);
    let mut to = before;
    let mut count = 1;
    loop {
        let start = end.saturating_sub(count).max(archived.first);
        let scan = archived.scan(archived.start_of(start), Some(to)).await?;
        let found = scan
            .restart_points
            .iter()
            .rev()
            .find(|(lsn, next)| *lsn < before && accept(*next));
        if let Some((lsn, _)) = found {
            return Ok(Some(*lsn));
        }
        if start == archived.first {
            return Ok(None);
        }
        to = archived.start_of(start);
        end = start;
        count *= 4;
    }
}

/// The LSN at which the catalog journal first described the files of table
/// `relid` (`walfill.journal_files`), when that table can be read. Only a
/// hint: a wrong or missing one costs a longer search, never a wrong start.
async fn first_described(source: &Client, relid: u32) -> Option<Lsn> {
    source
        .query_one(
            "SELECT min(lsn) FROM walfill.journal_files WHERE relid = $1",
            &[&relid],
        )
        .await
        .ok()?
        .get(0)
}

/// Where a replay from the table's creation would start, if the scan saw
/// the creating transaction whole (from a restart point before it began).
pub(super) fn creation_start(scan: &Scan, relid: u32) -> Option<ReplayStart> {
    let created = scan.created.get(&relid)?;
    scan.restart_points
        .iter()
        .rev()
        .find(|(lsn, next)| *lsn <= created.commit_lsn && !xid_precedes(created.xid, *next))
        .map(|(lsn, _)| ReplayStart::Creation {
            restart: *lsn,
            from: created.commit_lsn,
        })
}
