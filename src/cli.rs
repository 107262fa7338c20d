//! Command-line interface.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// walfill rebuilds derived tables from a PostgreSQL database's history.
///
/// A target is a source table passed through a transform (a SQL select list
/// and an optional filter). Each version of a target is filled into its own
/// table (a snapshot read at a recorded boundary LSN), kept in step with the
/// live logical stream from that boundary, and published by swapping the
/// target's view in one transaction. The previous version stays for rollback.
///
/// Typical use:
///   walfill setup                    check the databases, create publication and state
///   walfill backfill orders_summary  build the configured version and swap it in
///   walfill sync                     keep built versions current (Ctrl-C to stop)
///   walfill status                   what every target is doing
#[derive(Debug, Parser)]
#[command(name = "walfill", version, verbatim_doc_comment)]
pub struct Cli {
    /// Configuration file (TOML).
    #[arg(
        short,
        long,
        global = true,
        env = "WALFILL_CONFIG",
        default_value = "walfill.toml"
    )]
    pub config: PathBuf,

    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WALFILL_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// More detail in logs (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the source and destination, then create the publication and the
    /// state schema `walfill`.
    ///
    /// Checks wal_level, replication slots and senders, the REPLICATION
    /// attribute, every target's table (key or replica identity, privileges)
    /// and transform. Every problem is reported with its fix, and nothing is
    /// written unless all checks pass. Run it again after adding targets.
    Setup,

    /// Build the configured version of a target and publish it.
    ///
    /// Creates the version's slot with an exported snapshot (its consistent
    /// point is the boundary), copies the table in keyset chunks into
    /// SCHEMA.TARGET__VERSION, applies the live stream until caught up, and
    /// swaps the view. Interrupt it or kill it at any time: running it again
    /// resumes from the saved cursor and slot position.
    Backfill {
        /// The target to build.
        target: String,
        /// Stop once caught up, without swapping the view (see `walfill swap`).
        #[arg(long)]
        no_swap: bool,
    },

    /// Show every target: active version, versions in flight, phase, rows
    /// copied, rate, ETA, slot lag and last error.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Publish a caught-up version: replace the target's view in one transaction.
    Swap {
        /// The target.
        target: String,
        /// The version to publish.
        version: String,
    },

    /// Publish the previous version again, in one transaction.
    Rollback {
        /// The target.
        target: String,
    },

    /// Apply the live stream to every built version (active, previous for
    /// rollback, and ready) until interrupted.
    ///
    /// Ctrl-C (or SIGTERM) finishes the current batch, saves the position and
    /// exits 0.
    Sync {
        /// Targets to sync (default: all).
        targets: Vec<String>,
        /// Apply everything committed up to now, then exit.
        #[arg(long)]
        once: bool,
    },

    /// Drop a version that is not active: its slot and its table.
    Retire {
        /// The target.
        target: String,
        /// The version to drop.
        version: String,
    },
}
