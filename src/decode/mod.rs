//! `walfill decode`: the committed row changes in archived WAL, printed.
//!
//! Segments come from the archive with read-ahead on the async runtime; the
//! decoding itself (framing, records, tuples, reorder buffer) runs on one
//! blocking thread and writes to stdout. A transaction is printed only when
//! its commit is decoded, so output stops at the last good transaction when
//! the WAL turns out to be damaged.

mod format;
mod keywords;
mod run;
mod start;

pub use run::{change_budget, DecodeRun, Format, READ_AHEAD};

use std::collections::BTreeSet;
use std::path::PathBuf;

use walfill_replay::archive::Archive;
use walfill_replay::decode::{Catalog, CatalogSnapshot, DecodeOptions};
use walfill_replay::Lsn;

use crate::config::{parse_identifier, parse_qualified, PgUrl};
use crate::db::{self, Role};
use crate::error::{Error, Result};

/// What to decode.
#[derive(Clone, Debug)]
pub struct DecodeArgs {
    /// The archive's URL.
    pub archive: String,
    /// Its layout (`None`: detected).
    pub layout: Option<walfill_replay::archive::Layout>,
    /// Where the relations' descriptions come from.
    pub catalog: CatalogSource,
    /// Emit transactions committing at or after this LSN.
    pub from: Lsn,
    /// Start reading here (a restart point at or before `from`).
    pub restart_from: Option<Lsn>,
    /// Stop before the first record at or after this LSN.
    pub to: Option<Lsn>,
    /// Only this table (`schema.name`).
    pub table: Option<String>,
    /// Leave out tables in these schemas (names as SQL reads them: folded
    /// to lower case unless quoted).
    pub exclude_schemas: Vec<String>,
    /// Output format.
    pub format: Format,
    /// Memory bound in MiB for segments in flight and buffered changes.
    pub memory_mb: usize,
    /// Where large transactions spill.
    pub spill_dir: Option<PathBuf>,
}

/// Where the decoder's catalog comes from.
#[derive(Clone, Debug)]
pub enum CatalogSource {
    /// The live catalog of this database.
    Database(PgUrl),
    /// A file written by `walfill catalog`.
    File(PathBuf),
}

impl CatalogSource {
    /// Reads the catalog.
    pub async fn load(&self) -> Result<Catalog> {
        match self {
            CatalogSource::Database(url) => {
                let client = db::connect(url, Role::Source).await?;
                crate::catalog::load(&client).await
            }
            CatalogSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Request(format!("cannot read catalog file {}: {e}", path.display()))
                })?;
                let snapshot: CatalogSnapshot = serde_json::from_str(&text).map_err(|e| {
                    Error::Request(format!(
                        "catalog file {} is not a walfill catalog: {e}",
                        path.display()
                    ))
                })?;
                Ok(Catalog::from_snapshot(snapshot))
            }
        }
    }
}

/// Decodes and prints; returns the exit status the command should end with.
pub async fn decode(args: DecodeArgs) -> Result<u8> {
    let exclude_schemas = args
        .exclude_schemas
        .iter()
        .map(|name| {
            parse_identifier(name)
                .map_err(|m| Error::Request(format!("--exclude-schema {name:?}: {m}")))
        })
        .collect::<Result<BTreeSet<String>>>()?;
    let catalog = args.catalog.load().await?;
    let only = match &args.table {
        None => None,
        Some(name) => {
            let wanted = parse_qualified(name)
                .map_err(|m| Error::Request(format!("--table {name:?}: {m}")))?;
            let oid = catalog
                .relations()
                .find(|r| r.relation.schema == wanted.schema && r.relation.name == wanted.name)
                .map(|r| r.spec.oid)
                .ok_or_else(|| {
                    Error::Request(format!(
                        "--table {name}: no such permanent table in the source database"
                    ))
                })?;
            Some(BTreeSet::from([oid]))
        }
    };
    let archive = Archive::open(&args.archive)?.with_layout(args.layout);
    let segment_size = archive.segment_size().await?;
    let (restart_from, from) = match args.restart_from {
        Some(restart) => (restart, args.from),
        None => {
            let found = {
                let archive = archive.clone();
                let runtime = tokio::runtime::Handle::current();
                let from = args.from;
                tokio::task::spawn_blocking(move || start::find(&archive, &runtime, from))
                    .await
                    .map_err(|e| Error::Internal(format!("the scanning thread failed: {e}")))??
            };
            if found.first_record != args.from {
                tracing::info!(
                    "--from {} is not the start of a WAL record: decoding from the first \
                     record after it, {} ({} bytes later)",
                    args.from,
                    found.first_record,
                    found.first_record.0 - args.from.0
                );
            }
            tracing::debug!(restart = %found.restart, "reading from the running-transactions record before --from");
            (found.restart, found.first_record)
        }
    };
    let options = DecodeOptions {
        emit_from: from,
        memory_limit: run::change_budget(args.memory_mb.saturating_mul(1024 * 1024), segment_size),
        spill_dir: args.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
        only,
        exclude_schemas,
        strict_types: false,
        unsupported_as_null: false,
        ..DecodeOptions::default()
    };
    let run = DecodeRun {
        archive,
        restart_from,
        to: args.to,
        format: args.format,
    };
    let runtime = tokio::runtime::Handle::current();
    let outcome = tokio::task::spawn_blocking(move || run.run(&runtime, catalog, options))
        .await
        .map_err(|e| Error::Internal(format!("the decoding thread failed: {e}")))??;
    let stats = outcome.stats;
    tracing::info!(
        records = stats.records,
        transactions = stats.transactions,
        changes = stats.changes,
        spilled = stats.spilled_transactions,
        wal_mb = format!("{:.1}", outcome.wal_bytes as f64 / 1048576.0),
        seconds = format!("{:.2}", outcome.seconds),
        "decoded"
    );
    if stats.unknown_relation_records > 0 {
        tracing::debug!(
            records = stats.unknown_relation_records,
            "skipped changes of relation files the catalog does not know (system catalogs, \
             or tables dropped since)"
        );
    }
    for lost in &outcome.lost {
        eprintln!(
            "warning: changes of {} after {} were not decoded: {}",
            if lost.name.is_empty() {
                "some table"
            } else {
                &lost.name
            },
            lost.lsn,
            lost.reason
        );
    }
    for column in &outcome.unsupported {
        eprintln!(
            "warning: column {}.{} has type {}, which walfill cannot decode; its values are \
             printed as \"<unsupported type {}>\"",
            column.relation, column.column, column.type_name, column.type_name
        );
    }
    Ok(
        if outcome.unsupported.is_empty() && outcome.lost.is_empty() {
            0
        } else {
            3
        },
    )
}
