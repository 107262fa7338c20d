//! Following a timeline through the archive as recovery does.
//!
//! A timeline's history file (`TTTTTTTT.history`) lists the timelines before
//! it and where each ended (`parent<TAB>X/Y<TAB>reason` lines, oldest
//! first); each one began where the one before ended, and the file's own
//! timeline began where the last one ended. Recovery towards a target
//! timeline reads each segment from the newest timeline of that history
//! that had begun by the segment's start: the segment holding a switch
//! comes from the new timeline, whose copy has the old timeline's WAL up to
//! the switch and the new one's after it.

use object_store::ObjectStoreExt;

use crate::decode::Identity;
use crate::lsn::{SegmentNo, TimelineId};

use super::codec;
use super::error::ArchiveError;
use super::list::SegmentList;
use super::Archive;

/// A history file is a few lines per timeline; anything larger is not one.
const HISTORY_LIMIT: u64 = 1 << 20;

/// Which timeline each segment is read from: the timelines of a history
/// with the segment each began in, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TimelinePath {
    spans: Vec<(TimelineId, SegmentNo)>,
}

impl TimelinePath {
    /// The path of `target` whose history file says `text` (empty for
    /// timeline 1), with segments of `segment_size` bytes.
    pub(super) fn parse(
        target: TimelineId,
        text: &str,
        segment_size: u32,
    ) -> Result<TimelinePath, String> {
        let history = Identity::new(0, target.0, text)?.history;
        let size = u64::from(segment_size);
        let mut spans = Vec::with_capacity(history.len() + 1);
        let mut begin = SegmentNo(0);
        for (tli, end) in history {
            spans.push((TimelineId(tli), begin));
            begin = SegmentNo::containing(end, size);
        }
        spans.push((target, begin));
        if spans
            .windows(2)
            .any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1)
        {
            return Err(
                "its timelines or switch positions do not increase from line to line".to_string(),
            );
        }
        Ok(TimelinePath { spans })
    }

    /// The timeline segment `segno` is read from.
    pub(super) fn timeline_of(&self, segno: SegmentNo) -> TimelineId {
        self.spans
            .iter()
            .rev()
            .find(|(_, begin)| *begin <= segno)
            .or(self.spans.first())
            .map_or(TimelineId(1), |(tli, _)| *tli)
    }
}

impl Archive {
    /// The segments of `list` that recovery towards timeline `target` reads:
    /// of each segment number, only the file on the timeline `target`'s
    /// history puts it on. `None` when the archive has no history file of
    /// `target` (a timeline after 1).
    pub async fn follow(
        &self,
        list: &SegmentList,
        target: TimelineId,
    ) -> Result<Option<SegmentList>, ArchiveError> {
        let Some(path) = self.timeline_path(list, target).await? else {
            return Ok(None);
        };
        let mut followed = list.clone();
        followed
            .segments
            .retain(|s| s.name.timeline == path.timeline_of(s.name.segno));
        Ok(Some(followed))
    }

    /// The path to `target` that recovery would follow: timeline 1 alone,
    /// or from `target`'s history file in the listing; `None` when the
    /// archive has no history file of `target`.
    pub(super) async fn timeline_path(
        &self,
        list: &SegmentList,
        target: TimelineId,
    ) -> Result<Option<TimelinePath>, ArchiveError> {
        let Some(text) = self.history_text(list, target).await? else {
            return Ok(None);
        };
        let name = match list.history_files.iter().find(|h| h.timeline == target) {
            Some(file) => self.relative(&file.location),
            None => "(timeline 1)".to_string(),
        };
        TimelinePath::parse(target, &text, list.segment_size)
            .map(Some)
            .map_err(|reason| ArchiveError::History {
                url: self.url().to_string(),
                name,
                reason,
            })
    }

    /// The text of `target`'s history file in the listing (empty for
    /// timeline 1, which has none); `None` when the archive has no history
    /// file of `target`.
    pub async fn history_text(
        &self,
        list: &SegmentList,
        target: TimelineId,
    ) -> Result<Option<String>, ArchiveError> {
        if target == TimelineId(1) {
            return Ok(Some(String::new()));
        }
        let Some(file) = list.history_files.iter().find(|h| h.timeline == target) else {
            return Ok(None);
        };
        let name = self.relative(&file.location);
        let stored = match self.store().get(&file.location).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        }
        .map_err(|e| self.store_error("get", &file.location, e))?;
        let codec = file.codec;
        let unusable = |reason: String| ArchiveError::History {
            url: self.url().to_string(),
            name: name.clone(),
            reason,
        };
        let text =
            tokio::task::spawn_blocking(move || codec::small_file(&stored, codec, HISTORY_LIMIT))
                .await
                .map_err(|e| self.task_error(e))?
                .map_err(|damage| unusable(damage.reason))?;
        String::from_utf8(text)
            .map(Some)
            .map_err(|_| unusable("not text".to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_come_from_the_newest_timeline_begun() {
        let seg = 16 << 20;
        // Timeline 2 began at 0/5000028 (segment 5), timeline 3 at 0/8000000.
        let text = "1\t0/5000028\tno recovery target specified\n\n\
                    2\t0/8000000\tbefore 2000-01-01 00:00:00+00\n";
        let path = TimelinePath::parse(TimelineId(3), text, seg).unwrap();
        let on = |n| path.timeline_of(SegmentNo(n)).0;
        assert_eq!(
            [on(0), on(4), on(5), on(7), on(8), on(100)],
            [1, 1, 2, 2, 3, 3]
        );
        let first = TimelinePath::parse(TimelineId(1), "", seg).unwrap();
        assert_eq!(first.timeline_of(SegmentNo(9)), TimelineId(1));
        let e = TimelinePath::parse(TimelineId(3), "2\t0/5000000\tx\n1\t0/8000000\ty\n", seg)
            .unwrap_err();
        assert!(e.contains("do not increase"), "{e}");
        assert!(TimelinePath::parse(TimelineId(2), "garbage", seg).is_err());
    }
}
