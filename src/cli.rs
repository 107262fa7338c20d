//! Command-line interface.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use walfill_replay::archive::Layout;
use walfill_replay::Lsn;

use crate::config::{Config, PgUrl};
use crate::control::route::PathChoice;
use crate::error::{Error, Refusal, Result};

/// `--layout`: an archive layout, or `auto` (`None`: detect it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutArg(pub Option<Layout>);

fn parse_layout(text: &str) -> Result<LayoutArg, String> {
    Layout::parse_setting(text).map(LayoutArg)
}

fn parse_lsn(text: &str) -> Result<Lsn, String> {
    text.parse()
        .map_err(|e: walfill_replay::ParseLsnError| e.to_string())
}

/// walfill rebuilds derived tables from a PostgreSQL database's history.
///
/// A target is a source table passed through a transform (a SQL select list
/// and an optional filter). Each version of a target is filled into its own
/// table up to a recorded boundary LSN, by replaying archived WAL (decoded
/// here, without reading the table) when the archive covers it, or else from
/// a snapshot of the table; it is then kept in step with the live logical
/// stream from that boundary, and published by swapping the target's view in
/// one transaction. The previous version stays for rollback.
///
/// Typical use:
///   walfill setup                    check the databases, create publication and state
///   walfill plan orders_summary      say whether a backfill would replay or copy, and why
///   walfill backfill orders_summary  build the configured version and swap it in
///   walfill sync                     keep built versions current (Ctrl-C to stop)
///   walfill status                   what every target is doing
///   walfill archive                  keep the WAL archive filled (or use wal-push)
///   walfill serve --listen 127.0.0.1:8089
///                                    run it all as a service: sync, archiver,
///                                    requested, scheduled and needed backfills
///   walfill request orders_summary   ask the service for a backfill
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

    /// Remove the catalog journal (event triggers and functions in schema
    /// `walfill`) from the source. Versions already
    /// built keep working; replays of WAL written afterwards cannot follow
    /// schema changes, so backfills take snapshots until `setup` runs again.
    /// Needs a superuser.
    Teardown,

    /// Build the configured version of a target and publish it.
    ///
    /// Creates the version's slot (its consistent point is the boundary) and
    /// fills SCHEMA.TARGET__VERSION up to it: by replaying the archived WAL
    /// from the table's creation or a base snapshot, when the archive covers
    /// it, or else by copying a snapshot of the table in keyset chunks (and
    /// storing those rows in the archive as a base snapshot). Then applies
    /// the live stream until caught up and swaps the view. Interrupt it or
    /// kill it at any time: running it again resumes where it stopped.
    Backfill {
        /// The target to build.
        target: String,
        /// Stop once caught up, without swapping the view (see `walfill swap`).
        #[arg(long)]
        no_swap: bool,
        /// How to fill the version: `replay` decodes archived WAL and never
        /// reads the source table; `snapshot` copies the table; `auto`
        /// replays when the archive covers the table (see `walfill plan`)
        /// and copies otherwise, also when a replay finds the archive
        /// cannot serve it.
        #[arg(long, value_enum, default_value_t = PathChoice::Auto)]
        path: PathChoice,
    },

    /// Say how `walfill backfill TARGET` would fill the target's version
    /// now, and why: replay from the archive (from the table's creation or
    /// from a base snapshot), or a snapshot of the table. Reads only the
    /// catalog and the archive.
    Plan {
        /// The target.
        target: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },

    /// Show every target: active version, versions in flight, phase, rows
    /// copied, rate, ETA, slot lag and last error.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Publish a caught-up version: replace the target's view in one transaction.
    ///
    /// The version is followed up to the source first (within
    /// swap_max_lag_bytes, and at least as far as the active version); one
    /// that cannot follow its source (a column it reads was dropped, its
    /// slot is gone) is refused.
    Swap {
        /// The target.
        target: String,
        /// The version to publish.
        version: String,
        /// Publish a version that cannot follow its source all the same; the
        /// view is marked stale (status, /status and the
        /// walfill_view_stale metric) until a version that follows is
        /// published.
        #[arg(long)]
        force: bool,
    },

    /// Publish the previous version again, in one transaction.
    ///
    /// As for swap, the previous version is followed up to the source first,
    /// and refused when it cannot follow it.
    Rollback {
        /// The target.
        target: String,
        /// Roll back to a version that cannot follow its source all the same;
        /// the view is marked stale.
        #[arg(long)]
        force: bool,
    },

    /// Apply the live stream to every built version (active, previous for
    /// rollback, and ready) until interrupted.
    ///
    /// Ctrl-C (or SIGTERM) finishes the current batch, saves the position and
    /// exits 0. SIGHUP reads the configuration again: versions of targets
    /// added since are followed from then on (a file that does not load is
    /// reported, and the running configuration stays).
    Sync {
        /// Targets to sync (default: all).
        targets: Vec<String>,
        /// Apply everything committed up to now, then exit.
        #[arg(long)]
        once: bool,
    },

    /// Print the committed row changes found in archived WAL, in commit order.
    ///
    /// Reads WAL segments from the archive (file://, memory://, s3://) and
    /// decodes them outside the server: for each transaction its xid,
    /// commit LSN and time, then each change with values in PostgreSQL's
    /// own text form. `--format test_decoding` prints exactly what the
    /// test_decoding plugin prints for the same transactions. Relations are
    /// described by the source database's current catalog. Every table is
    /// printed, as a slot prints it, unless `--table` or `--exclude-schema`
    /// leaves tables out: their changes are dropped, and a transaction left
    /// without changes prints as BEGIN and COMMIT alone (test_decoding) or
    /// not at all (jsonl). A value of a type walfill cannot decode is
    /// printed as a marker, warned about once per column, and makes the
    /// command exit with 3 at the end.
    Decode(DecodeCommand),

    /// Print, as JSON, the table descriptions `walfill decode` reads from the
    /// source's catalog (save it for `decode --catalog`).
    Catalog {
        /// The database (default: the configuration's source).
        #[arg(long)]
        source: Option<String>,
    },

    /// Keep the configured archive ([archive] url) filled with the source's WAL.
    ///
    /// Streams WAL through a physical replication slot (created if missing)
    /// and stores each segment zstd-compressed as it completes, and the
    /// unfinished one as `.partial` every flush interval. The slot only
    /// advances to what the archive holds, so a restart (after Ctrl-C,
    /// SIGTERM or kill -9) resumes without losing WAL. Runs until interrupted.
    Archive {
        /// The physical slot (default: walfill_archive_TAG).
        #[arg(long)]
        slot: Option<String>,
        /// Seconds between stores of the unfinished segment.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
        flush_interval: u64,
        /// Exit once the archive has all WAL before this LSN.
        #[arg(long, value_parser = parse_lsn)]
        once_until_lsn: Option<Lsn>,
        /// Drop the physical slot instead of archiving, once archiving is
        /// over: a slot nobody streams from makes the source keep WAL
        /// without end. The archive keeps what it holds.
        #[arg(long, conflicts_with_all = ["once_until_lsn", "flush_interval"])]
        drop_slot: bool,
    },

    /// Store one WAL file in the archive, for archive_command = 'walfill wal-push %p'.
    ///
    /// Segments are stored zstd-compressed, history files as they are. A
    /// file the archive already has with the same content succeeds; with
    /// other content it fails and the stored file is kept. Needs only the
    /// configuration's [archive] url (no database connection).
    WalPush {
        /// The file (relative to the working directory, PostgreSQL's data directory).
        path: PathBuf,
    },

    /// Run the whole configuration as a service, until SIGTERM or Ctrl-C.
    ///
    /// Keeps every built version in step with the live stream, runs the
    /// archiver when [archive] is configured (unless `[serve] archiver =
    /// false` leaves it to wal-push), and runs backfills as they are
    /// requested (`walfill request`, SQL `SELECT
    /// walfill.request_backfill('TARGET')`, HTTP `POST
    /// /targets/TARGET/backfill`), scheduled (`schedule = "0 3 * * *"` on a
    /// target), or needed: a configured version not built yet (a new
    /// target, a changed version or transform) and a published version found
    /// lost (its table dropped, its slot gone). Several `serve` processes
    /// on one state database share the work: one leads, each request is run
    /// by one, and a killed one's work is taken over when its lease runs
    /// out. SIGHUP reloads the configuration; SIGTERM stops at the next safe
    /// point and the work resumes on the next start.
    ///
    /// HTTP (with --listen or `[serve] listen`): GET / (status page),
    /// /health (liveness), /ready (503 naming each built version nobody
    /// follows, each part that keeps failing), /status, /metrics
    /// (Prometheus), /requests/ID; POST
    /// /targets/TARGET/backfill, /targets/TARGET/pause, .../resume.
    Serve {
        /// Address and port of the HTTP endpoints, e.g. 127.0.0.1:8089
        /// (default: `[serve] listen`; none: no HTTP).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },

    /// Ask the running service(s) for a backfill of a target; prints the
    /// request's id.
    ///
    /// Without --where (or with --purge) the request rebuilds from empty:
    /// the target's configured version if it is not built yet, otherwise a
    /// new version of the same transform (VERSION_rID), swapped in when
    /// caught up, the version before it kept for rollback. Rows whose
    /// source rows are gone are not in it.
    ///
    /// With --where, it refreshes in place: the source rows matching the
    /// condition are copied again into the published version, by the same
    /// versioned apply as the live stream (which goes on meanwhile), and
    /// every key the source no longer has becomes a tombstone. For a
    /// version that a bug or a hand edit got out of step, without a
    /// rebuild.
    ///
    /// `walfill status` shows the request's state; `walfill cancel ID`
    /// withdraws it while it is queued.
    Request {
        /// The target.
        target: String,
        /// Refresh only the source rows matching this condition (SQL over
        /// the source table's columns, e.g. "region = 'eu' AND id < 5000")
        /// in the published version.
        #[arg(long = "where", value_name = "SQL", conflicts_with = "purge")]
        scope: Option<String>,
        /// Rebuild from empty into a new version (the default without
        /// --where; spelled out for scripts).
        #[arg(long)]
        purge: bool,
        /// Build the version and keep it caught up, but leave the view as it
        /// is: `walfill swap TARGET VERSION` publishes it when you choose.
        #[arg(long, conflicts_with = "scope")]
        no_swap: bool,
        /// Publish the version at this time, once built and caught up
        /// (RFC 3339 with an offset, e.g. 2026-12-08T02:00:00+01:00); until
        /// then it is held, and `status` shows when it is due.
        #[arg(long, value_name = "TIME", value_parser = parse_swap_at, conflicts_with = "scope")]
        swap_at: Option<String>,
        /// Compare the version with the transform of its source before
        /// publishing it (overrides the target's and [backfill]'s
        /// verify_before_swap).
        #[arg(long, conflicts_with = "no_verify_before_swap")]
        verify_before_swap: bool,
        /// Publish without that comparison, whatever the configuration says.
        #[arg(long)]
        no_verify_before_swap: bool,
    },

    /// Withdraw a queued backfill request, or a failed one: the version it
    /// began (and its slot) is retired.
    Cancel {
        /// The request's id (from `walfill request` or `walfill status`).
        id: i64,
    },

    /// Pause the backfills of a target (or all): within a second each one
    /// stops at its next safe point and holds nothing open on the source;
    /// `walfill resume` continues it where it stopped. Live sync of
    /// published versions goes on.
    Pause {
        /// The target.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        target: Option<String>,
        /// Every target.
        #[arg(long)]
        all: bool,
    },

    /// Resume paused backfills.
    Resume {
        /// The target.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        target: Option<String>,
        /// Every target (also lifts every target's own pause).
        #[arg(long)]
        all: bool,
    },

    /// List the rows of a version whose transform failed (dead letters), or
    /// apply them again.
    ///
    /// A row whose transform always fails (a division by zero on one row, a
    /// cast that fails on one value) is set aside with its key, version and
    /// error while the rest is stored; its key is absent from the version.
    /// A version with dead letters is not swapped in unless [backfill]
    /// allow_dead_letters = true. Once the cause is fixed (a function the
    /// transform calls, a lookup in the destination), `--retry` applies
    /// each again from the source row it kept, at its own version; a newer
    /// change of its key, stored meanwhile, wins.
    DeadLetters {
        /// The target.
        target: String,
        /// The version (default: the active one).
        #[arg(long)]
        version: Option<String>,
        /// Apply them again.
        #[arg(long)]
        retry: bool,
        /// Print JSON instead of a table.
        #[arg(long, conflicts_with = "retry")]
        json: bool,
    },

    /// Compare a version with the transform of its source, over the whole
    /// table: counts and an md5 per key range. The one command that reads the
    /// source table on purpose.
    ///
    /// Each range of `chunk_rows` keys is read in its own short transaction
    /// (no long transaction on the source; paced by max_rows_per_second)
    /// and compared once the version's stream has applied everything the
    /// read saw, so the version must be followed (`walfill serve` or
    /// `walfill sync`) while it runs. A range that differs is read again
    /// (up to three times) before it is reported; exits 3 when one does.
    Verify {
        /// The target.
        target: String,
        /// The version (default: the active one).
        #[arg(long)]
        version: Option<String>,
    },

    /// Roll the newest base snapshot of each table the targets read forward
    /// to the archive's newest complete segment: the base's rows and the
    /// archived WAL since, folded into a new base. Reads no source row and
    /// creates no slot; later replays of the table start from the new base.
    /// Killed at any point, it leaves the old base usable; rerun it.
    Compact {
        /// Targets, or source tables (`schema.table`), whose bases to
        /// compact (default, or with --all: every configured target's).
        #[arg(conflicts_with = "all")]
        targets: Vec<String>,
        /// Every table a configured target reads (the default).
        #[arg(long)]
        all: bool,
    },

    /// Drop a version that is not active: its slot and its table.
    Retire {
        /// The target.
        target: String,
        /// The version to drop.
        version: String,
    },
}

/// `--swap-at`: RFC 3339 with an offset, kept as given.
pub fn parse_swap_at(text: &str) -> Result<String, Refusal> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.to_rfc3339())
        .map_err(|e| {
            Refusal::new(
                format!("{text:?} is not an RFC 3339 time with an offset ({e})"),
                "write e.g. 2026-12-08T02:00:00+01:00 or 2026-12-08T01:00:00Z",
            )
        })
}

/// Output formats of `walfill decode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DecodeFormat {
    /// One JSON object per line: a transaction with its changes.
    Jsonl,
    /// Exactly what PostgreSQL's test_decoding plugin prints.
    #[value(name = "test_decoding")]
    TestDecoding,
}

/// What `walfill decode` was given.
#[derive(Debug, clap::Args)]
pub struct DecodeCommand {
    /// Archive URL (default: the configuration's [archive] url).
    #[arg(long)]
    pub archive: Option<String>,
    /// The archive's layout: auto (detected from what the URL holds),
    /// walfill, flat, wal-g or pgbackrest (default: the configuration's
    /// [archive] layout, or auto with --archive).
    #[arg(long, value_parser = parse_layout, value_name = "LAYOUT")]
    pub layout: Option<LayoutArg>,
    /// Database whose catalog describes the tables (default: the
    /// configuration's source).
    #[arg(long, conflicts_with = "catalog")]
    pub source: Option<String>,
    /// Read the tables' descriptions from this file (written by
    /// `walfill catalog`) instead of a database: decoding then needs no
    /// connection at all.
    #[arg(long)]
    pub catalog: Option<PathBuf>,
    /// Print transactions whose commit record starts at or after this LSN.
    #[arg(long, value_parser = parse_lsn)]
    pub from: Lsn,
    /// Start reading at this earlier LSN (a slot's restart_lsn), so that
    /// transactions in flight at --from are seen whole. By default
    /// walfill finds it in the archive: the latest running-transactions
    /// record before --from whose transactions all ended before --from,
    /// as a slot consistent at --from would have started from.
    #[arg(long, value_parser = parse_lsn)]
    pub restart_from: Option<Lsn>,
    /// Stop before the first record at or after this LSN (default: the
    /// end of the archive).
    #[arg(long, value_parser = parse_lsn)]
    pub to: Option<Lsn>,
    /// Only changes of this table (schema.name).
    #[arg(long)]
    pub table: Option<String>,
    /// Leave out changes of tables in this schema (repeatable), e.g.
    /// `--exclude-schema walfill` for walfill's own state. Unquoted
    /// names are folded to lower case, as SQL does.
    #[arg(long, value_name = "SCHEMA", conflicts_with = "table")]
    pub exclude_schema: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DecodeFormat::Jsonl)]
    pub format: DecodeFormat,
    /// Memory bound in MiB (segments in flight and buffered changes);
    /// larger transactions spill to disk.
    #[arg(long, default_value_t = 256)]
    pub memory_limit: usize,
    /// Directory for spill files (default: the system's temporary directory).
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
}

/// `--source`, or the configuration's source.
pub fn source_url(given: Option<&str>, config: Option<&Config>) -> Result<PgUrl> {
    match given {
        Some(url) => PgUrl::parse(url, "--source")
            .map_err(|m| Error::refused_no_fix(format!("--source: {m}"))),
        None => config
            .map(|c| c.source.clone())
            .ok_or_else(|| Error::refused("no source", "give --source URL")),
    }
}
