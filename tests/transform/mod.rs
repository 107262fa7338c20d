//! What a transform means: what the same `SELECT` means when run on the
//! source table itself, with the columns' own collations and walfill's
//! pinned settings (parse-time ones included), on every path. Rows the
//! filter rejects never reach the select list; a row the transform fails on
//! is a dead letter, never a stopped stream.

use std::time::Duration;

use crate::support::service::verify_followed as verify;
use crate::support::service::{wait_for, Service};
use crate::support::{assert_view_matches, assert_view_matches_in, TestDb, Walfill};

mod collation;
mod poison;
mod settings;

fn target(name: &str, source: &str, select: &str, filter: Option<&str>) -> String {
    format!(
        "[[target]]\nname = \"{name}\"\nsource = \"{source}\"\nselect = \"{select}\"\n{}\
         version = \"v1\"\n",
        filter
            .map(|f| format!("where = \"{f}\"\n"))
            .unwrap_or_default()
    )
}
