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

pub use run::{DecodeRun, Format};

use std::collections::BTreeSet;
use std::path::PathBuf;

use walfill_replay::archive::Archive;
use walfill_replay::decode::{Catalog, CatalogSnapshot, DecodeOptions};
use walfill_replay::wal::RelFileLocator;
use walfill_replay::Lsn;

use crate::cli::DecodeCommand;
use crate::config::{parse_identifier, parse_qualified, Config, PgUrl};
use crate::db::{self, Role};
use crate::error::{Error, Result};
use crate::pipeline::source::replay::{change_budget, start};
use crate::upstream::journal;

/// `walfill decode` as given on the command line, with the configuration
/// (when one was loaded) filling in the archive and the source.
pub async fn command(given: DecodeCommand, config: Option<&Config>) -> Result<u8> {
    let configured = config.filter(|_| given.archive.is_none());
    let layout = match given.layout {
        Some(layout) => layout.0,
        None => configured.and_then(|c| c.archive_settings.layout),
    };
    let archive = given
        .archive
        .or_else(|| config.and_then(|c| c.archive.clone()))
        .ok_or_else(|| {
            Error::refused(
                "no archive",
                "give --archive URL or [archive] url in the configuration",
            )
        })?;
    let catalog = match given.catalog {
        Some(path) => CatalogSource::File(path),
        None => CatalogSource::Database(crate::cli::source_url(given.source.as_deref(), config)?),
    };
    let args = DecodeArgs {
        archive,
        layout,
        catalog,
        from: given.from,
        restart_from: given.restart_from,
        to: given.to,
        table: given.table,
        exclude_schemas: given.exclude_schema,
        format: given.format,
        memory_mb: given.memory_limit,
        spill_dir: given.spill_dir,
    };
    decode(args).await
}

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
    /// What the catalog journal recorded in the source database: `None`
    /// for a catalog file, or when the journal is not installed.
    pub async fn journal(&self) -> Result<Option<journal::Recorded>> {
        match self {
            CatalogSource::Database(url) => {
                let client = db::connect(url, Role::Source).await?;
                journal::recorded(&client).await
            }
            CatalogSource::File(_) => Ok(None),
        }
    }

    /// Reads the catalog.
    pub async fn load(&self) -> Result<Catalog> {
        match self {
            CatalogSource::Database(url) => {
                let client = db::connect(url, Role::Source).await?;
                crate::upstream::catalog::load(&client).await
            }
            CatalogSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::refused_no_fix(format!(
                        "cannot read catalog file {}: {e}",
                        path.display()
                    ))
                })?;
                let snapshot: CatalogSnapshot = serde_json::from_str(&text).map_err(|e| {
                    Error::refused_no_fix(format!(
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
                .map_err(|m| Error::refused_no_fix(format!("--exclude-schema {name:?}: {m}")))
        })
        .collect::<Result<BTreeSet<String>>>()?;
    let catalog = args.catalog.load().await?;
    let only = match &args.table {
        None => None,
        Some(name) => {
            let wanted = parse_qualified(name)
                .map_err(|m| Error::refused_no_fix(format!("--table {name:?}: {m}")))?;
            let oid = catalog
                .relations()
                .find(|r| r.relation.schema == wanted.schema && r.relation.name == wanted.name)
                .map(|r| r.spec.oid)
                .ok_or_else(|| {
                    Error::refused_no_fix(format!(
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
    let recorded = args.catalog.journal().await?;
    let journal_start = match &recorded {
        Some(recorded) => journal_start(&archive, recorded, from, restart_from).await?,
        None => {
            if matches!(args.catalog, CatalogSource::Database(_)) {
                eprintln!(
                    "note: the source has no catalog journal (`walfill setup` installs it): \
                     tables are described as they are now, so changes of tables dropped, \
                     truncated or rewritten since cannot be decoded"
                );
            }
            None
        }
    };
    let known_files = recorded
        .iter()
        .flat_map(|r| r.files.iter())
        .map(|f| {
            let file = RelFileLocator {
                spc: f.spc,
                db: catalog.database,
                rel: f.relfilenode,
            };
            (file, f.relid)
        })
        .collect();
    // Reading the journal from its install on, the source's tables as they
    // are now only describe what the journal never did: their files may
    // have held other rows (or another description) at the time.
    let (catalog, fallback) = match journal_start {
        Some(_) => (
            Catalog::new(catalog.database),
            Some(std::sync::Arc::new(catalog)),
        ),
        None => (catalog, None),
    };
    let options = DecodeOptions {
        emit_from: from,
        changes_from: restart_from,
        known_files,
        fallback,
        memory_limit: change_budget(args.memory_mb.saturating_mul(1024 * 1024), segment_size),
        spill_dir: args.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
        only,
        exclude_schemas,
        strict_types: false,
        unsupported_as_null: false,
        ..DecodeOptions::default()
    };
    let run = DecodeRun {
        archive,
        restart_from: journal_start.map_or(restart_from, |s| s.min(restart_from)),
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
    // A column whose stored values changed without row changes (a default
    // existing rows take, a rewrite) matters to a replay's copy of the
    // table, not to the changes printed; nor does anything before --from.
    let lost: Vec<_> = outcome
        .lost
        .iter()
        .filter(|l| l.column.is_none() && l.lsn >= from)
        .collect();
    for lost in &lost {
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
    if args.table.is_none() {
        for (file, seen) in &outcome.undescribed {
            eprintln!(
                "warning: {} change(s) of relation file {}/{}/{} (the first at {}) were not \
                 decoded: neither the catalog journal in the archive, the files it recorded, \
                 nor the source's tables describe it (a table dropped or rewritten before the \
                 archive's journal starts, or since a journal install the archive does not \
                 hold); fix: archive WAL from the journal's install on, or decode from a later \
                 --from",
                seen.records, file.spc, file.db, file.rel, seen.first
            );
        }
    }
    for column in &outcome.unsupported {
        eprintln!(
            "warning: column {}.{} has type {}, which walfill cannot decode; its values are \
             printed as \"<unsupported type {}>\"",
            column.relation, column.column, column.type_name, column.type_name
        );
    }
    Ok(
        if outcome.unsupported.is_empty()
            && lost.is_empty()
            && (args.table.is_some() || outcome.undescribed.is_empty())
        {
            0
        } else {
            3
        },
    )
}

/// Where to start reading so that the catalog journal describes every table
/// at `restart_from`: the restart point of the last journal anchor (an
/// install) at or before `from`. `None`, with a note, when there is none or
/// the archive does not reach back to it: tables are then described as the
/// source has them now.
async fn journal_start(
    archive: &Archive,
    recorded: &journal::Recorded,
    from: Lsn,
    restart_from: Lsn,
) -> Result<Option<Lsn>> {
    let Some(anchor) = recorded.anchors.iter().rev().find(|a| **a <= from).copied() else {
        if let Some(first) = recorded.anchors.first() {
            eprintln!(
                "note: the catalog journal was installed at {first}, after --from: tables \
                 are described as the source has them now"
            );
        }
        return Ok(None);
    };
    if anchor >= restart_from {
        // The install's messages are read anyway.
        return Ok(Some(restart_from));
    }
    let found = {
        let archive = archive.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || start::find(&archive, &runtime, anchor))
            .await
            .map_err(|e| Error::Internal(format!("the scanning thread failed: {e}")))?
    };
    match found {
        Ok(start) => {
            tracing::debug!(anchor = %anchor, read_from = %start.restart, "reading the catalog journal from its install");
            Ok(Some(start.restart))
        }
        Err(e) => {
            eprintln!(
                "note: the archive does not reach back to the catalog journal's install at \
                 {anchor} ({e}): tables are described as the source has them now, so changes \
                 of tables dropped, truncated or rewritten since cannot be decoded"
            );
            Ok(None)
        }
    }
}
