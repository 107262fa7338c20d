//! The configured archive as found: its URL and the layout it is read in,
//! for `walfill plan` and `walfill status`.

use serde::Serialize;

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
        })
    }

    /// `file:///srv/wal (layout flat, detected)`, for a line of output.
    pub fn describe(&self) -> String {
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
