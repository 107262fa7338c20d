//! Finding an archive's layout and its WAL folder.
//!
//! Detection lists the URL's top level once (folders and files) and decides
//! by what is there, in this order:
//!
//! 1. a `wal/` folder: walfill's own;
//! 2. a `wal_005/` folder: WAL-G;
//! 3. an `archive.info` file: pgBackRest (the URL is a stanza's archive folder);
//! 4. WAL files (segments or timeline history files): flat;
//! 5. only `basebackups_005/`: WAL-G without WAL yet; only `base/`: walfill's.
//!
//! A pgBackRest repository's root (holding `archive/` and `backup/`) is
//! refused with the URL to give instead. An archive with none of these is
//! empty: readers find no segments, writers start walfill's own layout. A
//! layout once found is kept for the life of the [`Archive`]; an empty
//! archive is looked at again next time.
//!
//! pgBackRest keeps the WAL of each PostgreSQL version and system (each
//! `stanza-upgrade`) in a folder `<version>-<id>`; the current one is the
//! `[db]` section of `archive.info`.

use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::archive::error::ArchiveError;
use crate::archive::Archive;

use super::Layout;

/// walfill's WAL folder.
const WALFILL_DIR: &str = "wal";
/// WAL-G's WAL folder.
const WAL_G_DIR: &str = "wal_005";
/// WAL-G's base backups folder.
const WAL_G_BASE_DIR: &str = "basebackups_005";
/// walfill's base snapshots folder.
const WALFILL_BASE_DIR: &str = "base";
/// pgBackRest's description of a stanza's archive, and its copy.
const ARCHIVE_INFO: [&str; 2] = ["archive.info", "archive.info.copy"];

/// An archive's layout and the folder its WAL files are listed under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::archive) struct Located {
    /// The layout.
    pub(in crate::archive) layout: Layout,
    /// The WAL folder.
    pub(in crate::archive) wal: Path,
}

impl Archive {
    /// The archive's layout and WAL folder: the named layout, or the one
    /// detected; walfill's own for an empty archive (not kept: it may be
    /// filled by another tool yet).
    pub(in crate::archive) async fn locate(&self) -> Result<Located, ArchiveError> {
        if let Some(located) = self.inner.located.get() {
            return Ok(located.clone());
        }
        let layout = match self.inner.layout {
            Some(layout) => layout,
            None => match self.detect().await? {
                Some(layout) => layout,
                None => {
                    return Ok(Located {
                        layout: Layout::Walfill,
                        wal: self.wal_prefix().clone(),
                    })
                }
            },
        };
        let wal = match layout {
            Layout::Walfill => self.wal_prefix().clone(),
            Layout::Flat => self.prefix().clone(),
            Layout::WalG => self.prefix().clone().join(WAL_G_DIR),
            Layout::PgBackRest => self.prefix().clone().join(self.pgbackrest_folder().await?),
        };
        let located = Located { layout, wal };
        Ok(self.inner.located.get_or_init(|| located).clone())
    }

    /// The layout the archive is read in: named, or detected (walfill's own
    /// while the archive is empty).
    pub async fn layout(&self) -> Result<Layout, ArchiveError> {
        Ok(self.locate().await?.layout)
    }

    /// Fails unless walfill may write into this archive: its layout is
    /// walfill's own, or it is empty.
    pub async fn check_writable(&self) -> Result<(), ArchiveError> {
        let layout = self.locate().await?.layout;
        if layout.is_writable() {
            return Ok(());
        }
        Err(ArchiveError::ReadOnly {
            url: self.url().to_string(),
            layout,
        })
    }

    /// What the URL's top level holds: its folders and files.
    async fn top_level(&self) -> Result<object_store::ListResult, ArchiveError> {
        let prefix = self.prefix();
        self.store()
            .list_with_delimiter(Some(prefix))
            .await
            .map_err(|e| self.store_error("list", prefix, e))
    }

    /// The layout what the URL's top level holds shows; `None` when empty.
    async fn detect(&self) -> Result<Option<Layout>, ArchiveError> {
        let listing = self.top_level().await?;
        let last = |p: &Path| p.filename().unwrap_or_default().to_string();
        let folders: Vec<String> = listing.common_prefixes.iter().map(last).collect();
        let files: Vec<String> = listing.objects.iter().map(|m| last(&m.location)).collect();
        let folder = |name: &str| folders.iter().any(|f| f == name);
        let file = |name: &str| files.iter().any(|f| f == name);
        if folder(WALFILL_DIR) {
            return Ok(Some(Layout::Walfill));
        }
        if folder(WAL_G_DIR) {
            return Ok(Some(Layout::WalG));
        }
        if ARCHIVE_INFO.iter().any(|f| file(f)) {
            return Ok(Some(Layout::PgBackRest));
        }
        if files.iter().any(|f| Layout::Flat.parse_name(f).is_some()) {
            return Ok(Some(Layout::Flat));
        }
        if folder(WAL_G_BASE_DIR) {
            return Ok(Some(Layout::WalG));
        }
        if folder(WALFILL_BASE_DIR) {
            return Ok(Some(Layout::Walfill));
        }
        if folder("archive") && folder("backup") {
            return Err(ArchiveError::Layout {
                url: self.url().to_string(),
                reason: "this is the root of a pgBackRest repository: give the archive folder \
                         of the stanza instead, <url>/archive/<stanza>"
                    .to_string(),
            });
        }
        Ok(None)
    }

    /// The `<version>-<id>` folder of a pgBackRest stanza's current WAL:
    /// from `archive.info` (or its copy), else the folder of that form with
    /// the highest id.
    async fn pgbackrest_folder(&self) -> Result<String, ArchiveError> {
        for info in ARCHIVE_INFO {
            let path = self.prefix().clone().join(info);
            let text = match self.store().get(&path).await {
                Ok(got) => got
                    .bytes()
                    .await
                    .map_err(|e| self.store_error("get", &path, e))?,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.store_error("get", &path, e)),
            };
            return current_folder(&String::from_utf8_lossy(&text)).ok_or_else(|| {
                ArchiveError::Layout {
                    url: self.url().to_string(),
                    reason: format!(
                        "{info} has no [db] section with db-id and db-version: not a \
                         pgBackRest archive.info"
                    ),
                }
            });
        }
        let listing = self.top_level().await?;
        let newest = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .filter_map(|name| Some((folder_id(&name)?, name)))
            .max();
        newest
            .map(|(_, name)| name)
            .ok_or_else(|| ArchiveError::Layout {
                url: self.url().to_string(),
                reason: "no archive.info and no <version>-<id> folder: not a pgBackRest stanza's \
                     archive folder (.../archive/<stanza>)"
                    .to_string(),
            })
    }
}

/// The id of a `<version>-<id>` folder name (`15-1`).
fn folder_id(name: &str) -> Option<u32> {
    let (version, id) = name.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(version) || version.contains('.')).then_some(())?;
    digits(id).then(|| id.parse().ok())?
}

/// The current `<version>-<id>` folder named by an `archive.info` text:
/// `db-version` and `db-id` of its `[db]` section.
fn current_folder(text: &str) -> Option<String> {
    let mut in_db = false;
    let (mut id, mut version) = (None, None);
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_db = line == "[db]";
            continue;
        }
        let Some((key, value)) = line.split_once('=').filter(|_| in_db) else {
            continue;
        };
        let value = value.trim().trim_matches('"');
        match key.trim() {
            "db-id" => id = value.parse::<u32>().ok(),
            "db-version" => version = Some(value.to_string()),
            _ => {}
        }
    }
    Some(format!("{}-{}", version?, id?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_info_names_the_current_folder() {
        let info = "[backrest]\nbackrest-format=5\nbackrest-version=\"2.45\"\n\n[db]\n\
                    db-id=2\ndb-system-id=7301234567890123456\ndb-version=\"15\"\n\n\
                    [db:history]\n1={\"db-id\":7201234567890123456,\"db-version\":\"14\"}\n\
                    2={\"db-id\":7301234567890123456,\"db-version\":\"15\"}\n";
        assert_eq!(current_folder(info).as_deref(), Some("15-2"));
        assert_eq!(current_folder("[db]\ndb-id=1\n"), None);
        assert_eq!(current_folder("db-id=1\ndb-version=\"15\"\n"), None);
        assert_eq!(folder_id("15-3"), Some(3));
        assert_eq!(folder_id("9.6-1"), Some(1));
        assert_eq!(folder_id("0000000100000000"), None);
        assert_eq!(folder_id("x-1"), None);
    }
}
