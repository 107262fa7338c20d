//! The configured archive as found: its URL and the layout it is read in,
//! for `walfill plan` and `walfill status`.

use std::time::SystemTime;

use serde::Serialize;
use walfill_core::Lsn;

use super::Config;

/// The configured archive and its layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArchiveFound {
    /// The archive's URL.
    pub url: String,
    /// The layout it is read in (`walfill`, `flat`, `wal-g`, `pgbackrest`);
    /// `None` when it could not be told (see `problem`).
    pub layout: Option<String>,
    /// The layout was detected from what the URL holds, not named by
    /// `[archive] layout`.
    pub detected: bool,
    /// Why the layout could not be told.
    pub problem: Option<String>,
    /// The complete segment written last (see [`ArchiveFound::read_last_segment`]).
    pub last_segment: Option<String>,
    /// How long ago it was written, in seconds.
    pub last_segment_age_seconds: Option<u64>,
}

impl ArchiveFound {
    /// Opens the configured archive, if there is one, and finds its layout.
    pub async fn find(config: &Config) -> Option<ArchiveFound> {
        let url = config.archive.as_deref()?;
        let detected = config.archive_settings.layout.is_none();
        let layout = match config.open_archive(url) {
            Ok(archive) => archive.layout().await,
            Err(e) => Err(e),
        };
        let (layout, problem) = match layout {
            Ok(layout) => (Some(layout.to_string()), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Some(ArchiveFound {
            url: url.to_string(),
            layout,
            detected,
            problem,
            last_segment: None,
            last_segment_age_seconds: None,
        })
    }

    /// Finds the complete segment written last, and its age: how far
    /// archiving is behind. Lists from 1 GiB of WAL before `near` (the
    /// source's position, when known), or the whole archive when nothing
    /// is there.
    pub async fn read_last_segment(&mut self, config: &Config, near: Option<Lsn>) {
        let Ok(archive) = config.open_archive(&self.url) else {
            return;
        };
        let from = near.map(|n| Lsn(n.0.saturating_sub(1 << 30)));
        let mut listed = match from {
            Some(from) => archive.segments_from(from, None).await.ok(),
            None => None,
        };
        if listed.as_ref().is_none_or(|l| l.segments.is_empty()) {
            listed = archive.segments(None).await.ok();
        }
        let newest = listed.and_then(|l| {
            let size = u64::from(l.segment_size);
            l.segments
                .into_iter()
                .filter(|s| !s.partial)
                .max_by_key(|s| s.modified)
                .map(|s| (s.name.file_name(size), s.modified))
        });
        if let Some((name, modified)) = newest {
            self.last_segment = Some(name);
            self.last_segment_age_seconds = Some(
                SystemTime::now()
                    .duration_since(modified)
                    .map_or(0, |d| d.as_secs()),
            );
        }
    }

    /// `file:///srv/wal (layout flat, detected)`, for a line of output,
    /// with the last segment when it was read.
    pub fn describe(&self) -> String {
        let found = self.describe_layout();
        match (&self.last_segment, self.last_segment_age_seconds) {
            (Some(name), Some(age)) => format!("{found}; last segment {name}, written {age} s ago"),
            _ => found,
        }
    }

    fn describe_layout(&self) -> String {
        match (&self.layout, &self.problem) {
            (Some(layout), _) => {
                let how = if self.detected {
                    "detected"
                } else {
                    "as configured"
                };
                format!("{} (layout {layout}, {how})", self.url)
            }
            (None, problem) => format!(
                "{} (layout unknown: {})",
                self.url,
                problem.as_deref().unwrap_or("not found")
            ),
        }
    }
}
