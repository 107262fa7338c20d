//! WAL segments, pages and records.
