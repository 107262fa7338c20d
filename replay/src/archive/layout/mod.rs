//! Archive layouts: where WAL files are under the archive's URL and how they
//! are named.
//!
//! walfill reads four layouts and writes only its own:
//!
//! ```text
//! walfill     <url>/wal/000000010000000000000007.zst        (plain or .zst)
//! flat        <url>/000000010000000000000007.gz             (archive_command = 'cp %p <dir>/%f',
//!                                                             plain, .gz, .zst, .lz4, .bz2, .br, .lzma)
//! wal-g       <url>/wal_005/000000010000000000000007.lz4    (.lz4, .zst, .br, .lzma, .gz, plain)
//! pgbackrest  <url>/15-1/0000000100000000/000000010000000000000007-<sha1>.gz
//!             (<url> is the stanza's archive folder, .../archive/<stanza>;
//!              .gz, .lz4, .zst, .bz2 or plain; the SHA-1 is of the
//!              uncompressed segment and is checked on every read)
//! ```
//!
//! Timeline history files (`TTTTTTTT.history`, compressed like segments in
//! the layouts that compress them) sit beside the segments (for pgBackRest,
//! directly in the `<version>-<id>` folder).
//!
//! A layout is named ([`Archive::with_layout`](super::Archive::with_layout))
//! or detected from what the URL holds (see [`detect`]).

mod detect;
mod name;

use std::fmt;
use std::str::FromStr;

pub(super) use detect::Located;
pub(super) use name::RawName;

/// How an archive's WAL files are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// walfill's own: `wal/` under the URL, plain or zstd.
    Walfill,
    /// Segment files directly under the URL, as an `archive_command`
    /// copying (and perhaps compressing) them into a folder leaves them.
    Flat,
    /// WAL-G's: `wal_005/` under the URL.
    WalG,
    /// pgBackRest's: the URL is a stanza's archive folder.
    PgBackRest,
}

impl Layout {
    /// Every layout, in the order they are listed in messages.
    pub const ALL: [Layout; 4] = [
        Layout::Walfill,
        Layout::Flat,
        Layout::WalG,
        Layout::PgBackRest,
    ];

    /// The name used in the configuration, on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Walfill => "walfill",
            Layout::Flat => "flat",
            Layout::WalG => "wal-g",
            Layout::PgBackRest => "pgbackrest",
        }
    }

    /// Whether walfill writes into archives of this layout (only its own).
    pub fn is_writable(self) -> bool {
        self == Layout::Walfill
    }

    /// Reads a layout setting: `auto` (detect: `None`) or a layout's name.
    /// The error lists the accepted values.
    pub fn parse_setting(text: &str) -> Result<Option<Layout>, String> {
        if text == "auto" {
            return Ok(None);
        }
        text.parse().map(Some)
    }

    /// The accepted setting values, for messages: `auto, walfill, ...`.
    pub fn settings() -> String {
        let mut out = String::from("auto");
        for layout in Layout::ALL {
            out.push_str(", ");
            out.push_str(layout.name());
        }
        out
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = String;

    fn from_str(text: &str) -> Result<Layout, String> {
        Layout::ALL
            .into_iter()
            .find(|l| l.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown archive layout {text:?}: expected one of {}",
                    Layout::settings()
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_a_layout_or_auto() {
        assert_eq!(Layout::parse_setting("auto"), Ok(None));
        for layout in Layout::ALL {
            assert_eq!(Layout::parse_setting(layout.name()), Ok(Some(layout)));
            assert_eq!(layout.to_string(), layout.name());
        }
        let e = Layout::parse_setting("walg").unwrap_err();
        assert!(e.contains("\"walg\""), "{e}");
        assert!(e.contains("auto, walfill, flat, wal-g, pgbackrest"), "{e}");
        assert!(Layout::Walfill.is_writable());
        assert!(!Layout::PgBackRest.is_writable());
    }
}
