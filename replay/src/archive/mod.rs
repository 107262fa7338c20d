//! Archived WAL in object storage.
