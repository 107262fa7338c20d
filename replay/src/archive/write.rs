//! Writing WAL files into the archive, in walfill's own layout only: every
//! write fails with [`ArchiveError::ReadOnly`] on an archive of another
//! layout (named, or detected).
//!
//! Every file is written with a single put, which object stores make
//! atomic: a reader sees the old object or the new one, never part of it.
//! That is also how a `.partial` file grows: it is overwritten. Once a
//! segment is complete, its complete file is written first and the
//! `.partial` ones deleted after, so the segment is never absent.

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload};

use crate::lsn::SegmentName;

use super::codec;
use super::error::ArchiveError;
use super::name::SegmentFile;
use super::Archive;

impl Archive {
    /// Stores a segment: `bytes` is its whole content (its length is the
    /// segment size, which must agree with the archive's). Compressed with
    /// zstd (level [`ZSTD_LEVEL`](super::ZSTD_LEVEL), on a blocking thread)
    /// when `compress`; written as `.partial` when `partial`, replacing the
    /// previous `.partial` file. Returns the object name written.
    pub async fn put_segment(
        &self,
        name: SegmentName,
        bytes: impl Into<Bytes>,
        compress: bool,
        partial: bool,
    ) -> Result<String, ArchiveError> {
        self.check_writable().await?;
        let bytes: Bytes = bytes.into();
        let what = "the length of the segment to store";
        let size = self.check_segment_size(bytes.len() as u64, what)?;
        self.remember_segment_size(size, what)?;
        let file = SegmentFile {
            name,
            partial,
            compressed: compress,
        };
        let location = self.wal_object(&file.file_name(size));
        let payload = if compress {
            let packed = tokio::task::spawn_blocking(move || codec::compress(&bytes))
                .await
                .map_err(|e| self.task_error(e))?;
            Bytes::from(packed.map_err(|source| ArchiveError::Compress {
                url: self.url().to_string(),
                name: self.relative(&location),
                source,
            })?)
        } else {
            bytes
        };
        self.store()
            .put(&location, PutPayload::from(payload))
            .await
            .map_err(|e| self.store_error("put", &location, e))?;
        Ok(location.to_string())
    }

    /// Stores the unfinished tail: [`put_segment`](Archive::put_segment)
    /// with `partial` set. `bytes` is a whole segment, zero after the WAL.
    pub async fn put_partial(
        &self,
        name: SegmentName,
        bytes: impl Into<Bytes>,
        compress: bool,
    ) -> Result<String, ArchiveError> {
        self.put_segment(name, bytes, compress, true).await
    }

    /// Deletes the `.partial` files of a segment (plain and compressed),
    /// typically after its complete file was stored. Absent files are fine.
    /// Needs the segment size (stated, learned, or from a put).
    pub async fn delete_partials(&self, name: SegmentName) -> Result<(), ArchiveError> {
        self.check_writable().await?;
        let size = self.segment_size().await?;
        for compressed in [false, true] {
            let file = SegmentFile {
                name,
                partial: true,
                compressed,
            };
            self.delete(self.wal_object(&file.file_name(size)).as_ref())
                .await?;
        }
        Ok(())
    }

    /// Deletes an object, by its full name as in
    /// [`ArchivedSegment::file`](super::ArchivedSegment::file). An absent
    /// object is fine.
    pub async fn delete(&self, file: &str) -> Result<(), ArchiveError> {
        self.check_writable().await?;
        let location = object_store::path::Path::parse(file).map_err(|e| ArchiveError::Store {
            url: self.url().to_string(),
            operation: "delete",
            name: file.to_string(),
            source: Box::new(e.into()),
        })?;
        match self.store().delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.store_error("delete", &location, e)),
        }
    }
}
