//! Configuration: what walfill does (sources, targets) and how it runs.
//!
//! A TOML file ([`load`]) is read into [`RawConfig`] (plain serde structs that
//! reject unknown keys), then validated into [`Config`] with typed values
//! (parsed URLs, identifiers checked against PostgreSQL's limits). Everything
//! that can be checked without a database is checked here, before anything is
//! written anywhere.

mod archive;
mod load;
mod raw;
mod secret;

use std::fmt;
use std::path::PathBuf;

use walfill_core::sql::quote_ident;

pub use archive::ArchiveFound;
pub use load::{load, parse_identifier, parse_qualified, ConfigError};
pub use secret::PgUrl;

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it was read from, for messages.
    pub path: PathBuf,
    /// The database holding the source tables.
    pub source: PgUrl,
    /// The database receiving the versions, views and walfill's state.
    pub destination: PgUrl,
    /// Where archived WAL and base snapshots live, when configured.
    pub archive: Option<String>,
    /// How the archive is used (`[archive]` knobs other than the URL).
    pub archive_settings: ArchiveSettings,
    /// Knobs of the backfill jobs.
    pub backfill: BackfillSettings,
    /// How `walfill serve` runs (`[serve]`).
    pub serve: ServeSettings,
    /// When backfills wait for the source and destination to ease (`[throttle]`).
    pub throttle: ThrottleSettings,
    /// When `walfill serve` compacts base snapshots (`[compact]`).
    pub compact: CompactSettings,
    /// The derived tables, in file order.
    pub targets: Vec<Target>,
}

impl Config {
    /// The target called `name`, or an error listing the configured ones.
    pub fn target(&self, name: &str) -> Result<&Target, ConfigError> {
        self.targets.iter().find(|t| t.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.targets.iter().map(|t| t.name.as_str()).collect();
            ConfigError::Invalid {
                path: self.path.clone(),
                message: format!(
                    "no target named {name:?}; the configured targets are: {}",
                    if known.is_empty() {
                        "(none)".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            }
        })
    }

    /// A short tag telling this deployment (source database and destination)
    /// apart from others on the same cluster; part of slot names.
    pub fn deployment_tag(&self) -> String {
        let identity = format!(
            "{}|{}|{}",
            self.source.database(),
            self.destination.host_port(),
            self.destination.database()
        );
        format!(
            "{:08x}",
            walfill_core::name::fnv1a(identity.as_bytes()) as u32
        )
    }

    /// The archive at `url`, read in the configured layout.
    pub fn open_archive(
        &self,
        url: &str,
    ) -> Result<walfill_replay::archive::Archive, walfill_replay::archive::ArchiveError> {
        Ok(walfill_replay::archive::Archive::open(url)?.with_layout(self.archive_settings.layout))
    }

    /// The store of walfill's base snapshots: `[archive] bases_url` (a
    /// location of walfill's own layout), else the archive itself; `None`
    /// without an archive.
    pub fn open_bases(
        &self,
    ) -> Option<Result<walfill_replay::archive::Archive, walfill_replay::archive::ArchiveError>>
    {
        match (&self.archive_settings.bases_url, &self.archive) {
            (Some(url), _) => Some(
                walfill_replay::archive::Archive::open(url)
                    .map(|a| a.with_layout(Some(walfill_replay::archive::Layout::Walfill))),
            ),
            (None, Some(url)) => Some(self.open_archive(url)),
            (None, None) => None,
        }
    }

    /// The targets named (all of them when `names` is empty).
    pub fn select_targets(&self, names: &[String]) -> Result<Vec<&Target>, ConfigError> {
        if names.is_empty() {
            return Ok(self.targets.iter().collect());
        }
        names.iter().map(|n| self.target(n)).collect()
    }
}

/// When `walfill serve` compacts a table's base snapshot on its own.
#[derive(Clone, Debug)]
pub struct CompactSettings {
    /// Compact once the archived WAL since a table's newest base passes
    /// this many MiB (`None`: never on its own).
    pub after_wal_mb: Option<u64>,
    /// How often the leading service looks.
    pub check_seconds: u64,
    /// Also compact every table with a base and WAL since it at these times
    /// (read in `[serve] timezone`), whatever the WAL's size.
    pub schedule: Option<Schedule>,
}

/// How backfills use the archive.
#[derive(Clone, Debug)]
pub struct ArchiveSettings {
    /// Whether snapshot backfills store the rows they copy in the archive as
    /// a base snapshot, for later versions to replay from.
    pub base_snapshots: bool,
    /// How long a replay waits for the source's WAL up to its boundary to
    /// reach the archive.
    pub wait_seconds: u64,
    /// The archive's layout (`None`: detected from what the URL holds).
    pub layout: Option<walfill_replay::archive::Layout>,
    /// `bases_url`: where walfill keeps its base snapshots, beside an
    /// archive of another tool's layout (flat, WAL-G, pgBackRest), whose
    /// folders walfill never writes into. `None`: in the archive itself,
    /// when it has walfill's own layout.
    pub bases_url: Option<String>,
    /// Bases kept per table (the newest); older ones are removed once a
    /// new one is written.
    pub keep_bases: u32,
}

/// Knobs of backfill and sync jobs (`[backfill]` in the file).
#[derive(Clone, Debug)]
pub struct BackfillSettings {
    /// Rows per snapshot chunk (one destination transaction each).
    pub chunk_rows: u32,
    /// Most source changes applied in one destination transaction.
    pub apply_batch_changes: u32,
    /// Memory for a replay's changes folded to one row per key, beyond
    /// which they spill to disk (bytes; `replay_memory_mb` in the file).
    pub replay_memory_bytes: usize,
    /// Memory for stream changes buffered before they are stored (MiB): a
    /// larger transaction is stored in pieces inside one destination
    /// transaction.
    pub apply_memory_mb: u32,
    /// A version is swapped in once its slot is at most this many bytes of WAL
    /// behind the source.
    pub swap_max_lag_bytes: u64,
    /// The publication walfill creates and streams from.
    pub publication: String,
    /// How long a view swap waits for readers before it retries.
    pub swap_lock_timeout_ms: u64,
    /// Whether a version with dead letters (rows whose transform failed,
    /// absent from it) may be swapped in.
    pub allow_dead_letters: bool,
    /// The share of the rows a store has read (percent) that may fail the
    /// transform before the job stops: past it, the transform is broken
    /// rather than the rows.
    pub max_dead_letter_percent: u32,
    /// `path = auto` takes replay unless its estimated time exceeds a
    /// snapshot's by more than this factor.
    pub replay_max_slowdown: f64,
    /// Whether every swap a backfill makes is preceded by `walfill verify`.
    pub verify_before_swap: bool,
    /// A cap on the snapshot copy's rate, to spare the source (none by default).
    pub max_rows_per_second: Option<u32>,
    /// `status` warns about a walfill slot that keeps more WAL than this
    /// (MiB; by default a quarter of `max_slot_wal_keep_size`, or 1 GiB
    /// when that is unlimited).
    pub slot_warning_mb: Option<u64>,
    /// How a snapshot backfill reads the table.
    pub snapshot: SnapshotMode,
    /// With [`SnapshotMode::Auto`]: tables estimated at more rows than this
    /// are read in chunks of their own ([`SnapshotMode::Chunked`]).
    pub chunked_above_rows: u64,
    /// Key ranges a chunked copy reads and stores at once, each on
    /// sessions of its own.
    pub workers: u32,
    /// Destination sessions that store a fresh version's batches at once
    /// (a copy into a table loaded without its key, a replay's merged rows).
    pub writers: u32,
    /// Where a replay's fold spills sorted runs when it outgrows
    /// `replay_memory_mb` (the system's temporary directory by default).
    pub spill_dir: std::path::PathBuf,
    /// How copied rows travel from the source to the destination.
    pub copy_format: CopyFormatSetting,
    /// Where a snapshot copy evaluates the transform.
    pub transform_on: TransformOn,
}

/// Whether `serve` streams WAL into the archive (`serve.archiver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiverSetting {
    /// When the archive has walfill's own layout (empty, or holding
    /// `wal/`); not into an archive another tool fills (flat, WAL-G,
    /// pgBackRest), which walfill only reads.
    Auto,
    /// Always; refused at start over a layout walfill does not write.
    On,
    /// Never (the source's `archive_command` runs `walfill wal-push`, or
    /// another tool fills the archive).
    Off,
}

/// Where a snapshot copy evaluates the transform (`backfill.transform_on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransformOn {
    /// On the source, when it gives the same values there as in the
    /// destination (see `crate::pipeline::source::evaluate`); in the destination
    /// otherwise.
    Auto,
    /// Always in the destination.
    Destination,
}

/// How a snapshot copy moves rows (`backfill.copy_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFormatSetting {
    /// Binary COPY where every copied column's type travels in binary
    /// between the two databases (see `walfill_snapshot::format`), text
    /// otherwise.
    Auto,
    /// Always COPY text.
    Text,
}

/// How a snapshot backfill reads the source table (`backfill.snapshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotMode {
    /// Chunked for tables over `backfill.chunked_above_rows`, exported below.
    Auto,
    /// The whole table in the slot's exported snapshot: one transaction on
    /// the source for the whole copy.
    Exported,
    /// Each chunk in a short transaction of its own, reconciled with the
    /// stream by the chunk's snapshot: the source's vacuum horizon is held
    /// for one chunk at most.
    Chunked,
}

impl SnapshotMode {
    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMode::Auto => "auto",
            SnapshotMode::Exported => "exported",
            SnapshotMode::Chunked => "chunked",
        }
    }
}

/// When backfills wait (`[throttle]` in the file): limits over which a
/// fill waits between batches; none by default.
#[derive(Clone, Debug, Default)]
pub struct ThrottleSettings {
    /// WAL a standby (or walfill's live versions) has not replayed yet (MiB).
    pub max_replication_lag_mb: Option<u64>,
    /// WAL the live versions of this destination have not applied (MiB).
    pub max_apply_lag_mb: Option<u64>,
    /// WAL a slot keeps, in percent of `max_slot_wal_keep_size`.
    pub max_retained_percent: Option<u32>,
}

impl ThrottleSettings {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_replication_lag_mb.is_some()
            || self.max_apply_lag_mb.is_some()
            || self.max_retained_percent.is_some()
    }
}

/// A bearer token of the HTTP API (`[[serve.tokens]]`). Its secret stays
/// in the environment of `walfill serve` (other commands never need it).
#[derive(Clone, Debug)]
pub struct Token {
    /// Who holds it: recorded as `requested_by` of what it asks for.
    pub name: String,
    /// Whether it may also change things (the POSTs), not only read.
    pub write: bool,
    /// The environment variable that holds the secret.
    pub secret_env: String,
}

/// How `walfill serve` runs (`[serve]` in the file).
#[derive(Clone, Debug)]
pub struct ServeSettings {
    /// Where the HTTP endpoints listen (none: no HTTP; `--listen` overrides).
    pub listen: Option<std::net::SocketAddr>,
    /// The time zone of the targets' schedules.
    pub timezone: chrono_tz::Tz,
    /// How many earlier versions of each target are kept for rollback once
    /// a new one is published; older ones are retired with their slots.
    pub keep_versions: u32,
    /// Minutes a slot of this deployment no version owns is left before
    /// the leader drops it.
    pub slot_reap_after_minutes: u32,
    /// Whether published versions found lost are rebuilt (`false`: only
    /// reported); a target's `auto_rebuild` overrides it.
    pub auto_rebuild: bool,
    /// Whether the service streams WAL into `[archive]` itself.
    pub archiver: ArchiverSetting,
    /// How long a claimed request or the lead stays with a worker that
    /// stopped renewing it (killed, cut off), in seconds.
    pub lease_seconds: u32,
    /// How often the service looks at its state when nothing wakes it.
    pub poll_seconds: u32,
    /// The first pause before a failed backfill is tried again (doubling,
    /// at most 60 times this).
    pub retry_seconds: u32,
    /// The HTTP API's bearer tokens (none: the API is open, and may listen
    /// on a loopback address only).
    pub tokens: Vec<Token>,
    /// `tls_cert` and `tls_key`: serve HTTPS with this certificate chain
    /// and private key (PEM files), read at start.
    pub tls: Option<TlsFiles>,
}

/// `[serve] tls_cert` and `tls_key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, the server's own certificate first.
    pub cert: std::path::PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
}

/// The longest suffix walfill adds to a configured version's name for the
/// versions a schedule (`_sYYYYMMDDHHMM`) or a request (`_rID`) builds.
pub const LONGEST_SUFFIX: &str = "_s202612312359";

/// A five-field cron schedule (minute hour day-of-month month day-of-week).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// As written.
    pub text: String,
    /// Parsed.
    pub cron: croner::Cron,
}

impl Schedule {
    /// The first time after `now` that it is due, read in `zone`.
    pub fn next_due(
        &self,
        zone: chrono_tz::Tz,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        self.cron
            .find_next_occurrence(&now.with_timezone(&zone), false)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
    }
}

/// A derived table: a source table passed through a transform.
#[derive(Clone, Debug)]
pub struct Target {
    /// Name of the target; also the name of its view.
    pub name: String,
    /// The source table.
    pub source: QualifiedName,
    /// Key columns, when given in the file (they must be the source's identity).
    pub key: Option<Vec<String>>,
    /// The select list of the transform.
    pub select: String,
    /// Optional filter of the transform.
    pub filter: Option<String>,
    /// The version the next backfill builds.
    pub version: String,
    /// Destination schema of the view and its versions.
    pub schema: String,
    /// When `walfill serve` rebuilds it as a new version, if ever.
    pub schedule: Option<Schedule>,
    /// Whether `walfill serve` rebuilds a published version found lost (its
    /// table dropped, its slot gone) or only reports it.
    pub auto_rebuild: bool,
    /// Indexes every version's table gets before it is published: what
    /// follows `CREATE INDEX name ON table`, e.g. `(customer_id)`.
    pub indexes: Vec<String>,
    /// Grants on the view and every version's table, each `PRIVILEGES TO
    /// ROLES` (e.g. `SELECT TO analyst`), applied at each swap.
    pub grants: Vec<Grant>,
    /// `dependent_views = "recreate"`: a swap that must drop and recreate
    /// the view recreates the objects that depend on it (see
    /// `crate::control::dependents`); otherwise such a version is refused.
    pub recreate_dependents: bool,
    /// `sync_enum_labels = true`: a label added to a source enum type the
    /// table uses is added to the destination's type at the source's
    /// position, and following goes on (see `crate::pipeline::enum_labels`).
    pub sync_enum_labels: bool,
    /// `verify_before_swap` for this target's versions (none: `[backfill]`'s).
    pub verify_before_swap: Option<bool>,
}

/// One of a target's declared grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// What is granted, e.g. `SELECT`.
    pub privileges: String,
    /// To whom, e.g. `analyst, reporting`.
    pub roles: String,
}

impl Target {
    /// The staging table of a version: `NAME__VERSION`.
    pub fn version_table(&self, version: &str) -> String {
        format!("{}__{}", self.name, version)
    }

    /// This target with another version name (same transform).
    pub fn with_version(&self, version: &str) -> Target {
        Target {
            version: version.to_string(),
            ..self.clone()
        }
    }
}

/// A schema-qualified relation name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QualifiedName {
    /// Schema (namespace).
    pub schema: String,
    /// Relation name.
    pub name: String,
}

impl QualifiedName {
    /// The name quoted for SQL: `"schema"."name"`.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}
