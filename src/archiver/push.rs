//! `walfill wal-push PATH`: one file from PostgreSQL's `archive_command`
//! into the archive.
//!
//! PostgreSQL runs the command in its data directory with the file's path
//! (`%p`, relative to it) and retries until the command exits 0, so a push
//! must be idempotent and exit 0 only once the object store has the bytes:
//!
//! - a segment (`24 hex digits`) or unfinished segment (`.partial`, written
//!   at a promotion) is checked (its size is a segment size, its first page
//!   header is at the LSN its name says) and stored zstd-compressed under its
//!   own name, as `walfill archive` stores segments;
//! - a timeline history file (`.history`) or backup history file
//!   (`.backup`) is stored as it is.
//!
//! If the archive already has the file, the content is compared (segments
//! decompressed, as a reader sees them): the same bytes are a success
//! without writing, other bytes an error, and the stored file is never
//! replaced. A complete segment replaces a `.partial` of the same segment
//! (whose files are deleted after, as `walfill archive` does). No database
//! is contacted.

use std::path::Path;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use walfill_replay::archive::{Archive, ArchiveError, ReadOptions};
use walfill_replay::wal::{is_valid_segment_size, PageHeader};
use walfill_replay::{Lsn, SegmentName};

use crate::config::Config;

use super::error::ArchiverError;

/// What a push did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// The file was written; the object's name.
    Stored(String),
    /// The archive already had the same content under this name.
    AlreadyArchived(String),
}

/// The kinds of files `archive_command` is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PushFile<'a> {
    /// A WAL segment: its 24-digit name, and whether it is a `.partial` one.
    Segment { stem: &'a str, partial: bool },
    /// A timeline history or backup history file, stored as it is.
    Verbatim,
}

impl<'a> PushFile<'a> {
    fn parse(file_name: &'a str) -> Option<PushFile<'a>> {
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        if let Some(tli) = file_name.strip_suffix(".history") {
            return hex(tli, 8).then_some(PushFile::Verbatim);
        }
        if let Some(label) = file_name.strip_suffix(".backup") {
            let (segment, offset) = label.split_once('.')?;
            return (hex(segment, 24) && hex(offset, 8)).then_some(PushFile::Verbatim);
        }
        let (stem, partial) = match file_name.strip_suffix(".partial") {
            Some(stem) => (stem, true),
            None => (file_name, false),
        };
        hex(stem, 24).then_some(PushFile::Segment { stem, partial })
    }
}

/// Stores the WAL file at `path` in the configured archive.
pub async fn wal_push(config: &Config, path: &Path) -> Result<PushOutcome, ArchiverError> {
    let url = super::archive_url(config, "wal-push")?;
    let not_wal = |reason: String| ArchiverError::NotWal {
        path: path.to_path_buf(),
        reason,
    };
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| not_wal("not a file name".to_string()))?;
    let kind = PushFile::parse(file_name).ok_or_else(|| {
        not_wal(
            "not a WAL file name: expected a segment (24 hexadecimal digits, optionally \
             .partial), a timeline history file (TTTTTTTT.history) or a backup history file"
                .to_string(),
        )
    })?;
    let bytes = std::fs::read(path).map_err(|source| ArchiverError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    let archive = config.open_archive(&url)?;
    archive.check_writable().await?;
    let outcome = match kind {
        PushFile::Segment { stem, partial } => {
            let (name, size) = check_segment(stem, &bytes).map_err(not_wal)?;
            let archive = archive.with_segment_size(size)?;
            let stored = Bytes::from(bytes);
            let outcome = push_segment(&archive, name, size, partial, stored.clone()).await?;
            if !partial {
                summarize_before(config, &archive, name, stored).await;
            }
            outcome
        }
        PushFile::Verbatim => push_verbatim(&archive, file_name, bytes).await?,
    };
    match &outcome {
        PushOutcome::Stored(object) => tracing::info!(object = %object, "WAL file archived"),
        PushOutcome::AlreadyArchived(object) => {
            tracing::info!(object = %object, "WAL file already archived with the same content")
        }
    }
    Ok(outcome)
}

/// The segment a file holds, checked against its name: its size is a
/// segment size and its first page is a segment's first page at the LSN
/// the name says.
fn check_segment(stem: &str, bytes: &[u8]) -> Result<(SegmentName, u32), String> {
    let size = u32::try_from(bytes.len())
        .ok()
        .filter(|s| is_valid_segment_size(*s))
        .ok_or_else(|| {
            format!(
                "is {} bytes, which is not a WAL segment size (a power of two from 1 MiB to 1 GiB)",
                bytes.len()
            )
        })?;
    let name = SegmentName::parse(stem, u64::from(size))
        .ok_or_else(|| format!("its name is not a segment name for {size}-byte segments"))?;
    let header = PageHeader::parse(bytes)
        .map_err(|e| format!("its first page header is unreadable: {e}"))?;
    let long = header
        .long
        .ok_or("its first page has no long header: not the start of a WAL segment")?;
    if long.segment_size != size {
        return Err(format!(
            "its first page header says the segment size is {}, but the file has {size} bytes",
            long.segment_size
        ));
    }
    let start: Lsn = name.segno.start_lsn(u64::from(size));
    if header.page_addr != start {
        return Err(format!(
            "its first page is WAL at {}, but its name says {start}",
            header.page_addr
        ));
    }
    Ok((name, size))
}

/// Stores a segment unless the archive has it already.
async fn push_segment(
    archive: &Archive,
    name: SegmentName,
    size: u32,
    partial: bool,
    bytes: Bytes,
) -> Result<PushOutcome, ArchiverError> {
    let start = name.segno.start_lsn(u64::from(size));
    let list = archive.segments_from(start, Some(name.timeline)).await?;
    if let Some(existing) = list.get(name) {
        // A complete segment supersedes an unfinished one; anything else is compared.
        let supersedes = existing.partial && !partial;
        if !supersedes {
            let stored = read_segment(archive, name, size).await?;
            return if stored == bytes {
                Ok(PushOutcome::AlreadyArchived(existing.file.clone()))
            } else {
                Err(ArchiverError::Conflict {
                    url: archive.url().to_string(),
                    name: existing.file.clone(),
                })
            };
        }
    }
    let object = archive.put_segment(name, bytes, true, partial).await?;
    if !partial {
        archive.delete_partials(name).await?;
    }
    Ok(PushOutcome::Stored(object))
}

/// Summarizes the segment before `name` (just stored), beside the bases
/// (`[archive] bases_url`, else the archive): with both stored, its last
/// record is complete. A segment left without a summary is read whole by
/// replays, so a failure here is only reported.
async fn summarize_before(config: &Config, archive: &Archive, name: SegmentName, bytes: Bytes) {
    let store = match config.archive_settings.bases_url {
        Some(_) => match config.open_bases().transpose() {
            Ok(Some(store)) => store,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "no segment summary: the store of bases cannot be opened");
                return;
            }
        },
        None => archive.clone(),
    };
    if let Err(e) = archive.summarize_before(&store, name, bytes, None).await {
        tracing::warn!(error = %e, "could not summarize the segment before this one");
    }
}

/// The content of a segment as a reader of the archive sees it.
async fn read_segment(
    archive: &Archive,
    name: SegmentName,
    size: u32,
) -> Result<Vec<u8>, ArchiverError> {
    let start = name.segno.start_lsn(u64::from(size));
    let options = ReadOptions::default()
        .with_timeline(name.timeline)
        .with_segment_size(size)
        .with_read_ahead(1);
    let mut segments = Box::pin(archive.read(start, Some(start.advance(u64::from(size))), options));
    match segments.next().await {
        Some(segment) => Ok(segment?.bytes),
        None => Err(ArchiverError::Archive(ArchiveError::MissingSegment {
            url: archive.url().to_string(),
            name: name.file_name(u64::from(size)),
            lsn: start,
        })),
    }
}

/// Stores a history or backup file as it is, unless the archive has it.
///
/// The archive layer has no call for these files, so the object store is
/// used directly (through the archive's store handle).
async fn push_verbatim(
    archive: &Archive,
    file_name: &str,
    bytes: Vec<u8>,
) -> Result<PushOutcome, ArchiverError> {
    let location = archive.wal_prefix().clone().join(file_name);
    let store = archive.store();
    let store_error = |operation: &'static str, source| {
        ArchiverError::Archive(ArchiveError::Store {
            url: archive.url().to_string(),
            operation,
            name: archive.relative(&location),
            source: Box::new(source),
        })
    };
    // Whether it exists: a listing of wal/ (these files are rare, and a
    // listing needs no error-kind matching on a missing object).
    let mut listing = store.list(Some(archive.wal_prefix()));
    let mut exists = false;
    while let Some(meta) = listing
        .try_next()
        .await
        .map_err(|e| store_error("list", e))?
    {
        if meta.location == location {
            exists = true;
            break;
        }
    }
    drop(listing);
    if exists {
        let stored = store
            .get_opts(&location, Default::default())
            .await
            .map_err(|e| store_error("get", e))?
            .bytes()
            .await
            .map_err(|e| store_error("get", e))?;
        return if stored[..] == bytes[..] {
            Ok(PushOutcome::AlreadyArchived(archive.relative(&location)))
        } else {
            Err(ArchiverError::Conflict {
                url: archive.url().to_string(),
                name: archive.relative(&location),
            })
        };
    }
    store
        .put_opts(&location, Bytes::from(bytes).into(), Default::default())
        .await
        .map_err(|e| store_error("put", e))?;
    Ok(PushOutcome::Stored(archive.relative(&location)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_postgres_archives() {
        assert_eq!(
            PushFile::parse("000000010000000000000003"),
            Some(PushFile::Segment {
                stem: "000000010000000000000003",
                partial: false
            })
        );
        assert_eq!(
            PushFile::parse("0000000100000000000000A3.partial"),
            Some(PushFile::Segment {
                stem: "0000000100000000000000A3",
                partial: true
            })
        );
        assert_eq!(
            PushFile::parse("00000002.history"),
            Some(PushFile::Verbatim)
        );
        assert_eq!(
            PushFile::parse("000000010000000000000002.00000028.backup"),
            Some(PushFile::Verbatim)
        );
        for other in [
            "00000001000000000000000",
            "000000010000000000000003.zst",
            "000000010000000000000003.partial.zst",
            "0000002.history",
            "000000010000000000000002.backup",
            "postgresql.conf",
            "",
        ] {
            assert_eq!(PushFile::parse(other), None, "{other}");
        }
    }

    /// A segment whose first page has a long header at `start`.
    fn segment(size: u32, start: u64, stated_size: u32) -> Vec<u8> {
        let mut s = Vec::with_capacity(size as usize);
        s.extend_from_slice(&0xD110u16.to_le_bytes());
        s.extend_from_slice(&2u16.to_le_bytes()); // XLP_LONG_HEADER
        s.extend_from_slice(&1u32.to_le_bytes());
        s.extend_from_slice(&start.to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes());
        s.extend_from_slice(&7u64.to_le_bytes());
        s.extend_from_slice(&stated_size.to_le_bytes());
        s.extend_from_slice(&8192u32.to_le_bytes());
        s.resize(size as usize, 0);
        s
    }

    #[test]
    fn segment_content_must_match_its_name() {
        const MIB: u32 = 1 << 20;
        let good = segment(MIB, 3 * u64::from(MIB), MIB);
        let (name, size) = check_segment("000000010000000000000003", &good).unwrap();
        assert_eq!((name.segno.0, size), (3, MIB));
        let e = check_segment("000000010000000000000004", &good).unwrap_err();
        assert!(e.contains("0/400000") && e.contains("0/300000"), "{e}");
        let e = check_segment("000000010000000000000003", &good[..1000]).unwrap_err();
        assert!(e.contains("1000 bytes"), "{e}");
        let lying = segment(MIB, 3 * u64::from(MIB), 2 * MIB);
        let e = check_segment("000000010000000000000003", &lying).unwrap_err();
        assert!(e.contains("2097152"), "{e}");
        let zeros = vec![0u8; MIB as usize];
        let e = check_segment("000000010000000000000003", &zeros).unwrap_err();
        assert!(e.contains("no long header"), "{e}");
        // 1 MiB segments: 4096 per high part, so ...00000FFF is a name, ...00001000 is not.
        let e = check_segment("000000010000000000001000", &good).unwrap_err();
        assert!(e.contains("not a segment name"), "{e}");
    }
}
