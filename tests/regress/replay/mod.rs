//! Replay backfills (defects 1, 2, 3, 4 by replay, 17) and the archive
//! checks found by reading the code (c1, c3).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{archive_section, field, fill_docs, stderr, target, DOCS_SELECT};
use crate::archiver::LocalArchive;
use crate::support::cluster::{archive_url, replica_admin_url};
use crate::support::{assert_view_matches, TestDb, Walfill};

mod bases;
mod clusters;
mod defects;
