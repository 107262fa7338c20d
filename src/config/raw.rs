//! The configuration file as written: serde structs that reject unknown keys.

use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) source: RawDatabase,
    pub(super) destination: Option<RawDatabase>,
    pub(super) archive: Option<RawArchive>,
    #[serde(default)]
    pub(super) backfill: RawBackfill,
    #[serde(default)]
    pub(super) serve: RawServe,
    #[serde(default)]
    pub(super) throttle: RawThrottle,
    #[serde(default)]
    pub(super) compact: RawCompact,
    #[serde(default, rename = "target")]
    pub(super) targets: Vec<RawTarget>,
}

/// `[source]` and `[destination]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub(super) url: Spanned<String>,
}

/// `[archive]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawArchive {
    pub(super) url: Spanned<String>,
    pub(super) base_snapshots: Option<bool>,
    pub(super) wait_seconds: Option<u64>,
    pub(super) layout: Option<Spanned<String>>,
    pub(super) bases_url: Option<Spanned<String>>,
    pub(super) keep_bases: Option<u32>,
}

/// `[backfill]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackfill {
    pub(super) chunk_rows: Option<u32>,
    pub(super) apply_batch_changes: Option<u32>,
    pub(super) replay_memory_mb: Option<Megabytes>,
    pub(super) apply_memory_mb: Option<u32>,
    pub(super) swap_max_lag_bytes: Option<u64>,
    pub(super) publication: Option<Spanned<String>>,
    pub(super) swap_lock_timeout_ms: Option<u64>,
    pub(super) max_rows_per_second: Option<u32>,
    pub(super) allow_dead_letters: Option<bool>,
    pub(super) max_dead_letter_percent: Option<u32>,
    pub(super) replay_max_slowdown: Option<f64>,
    pub(super) verify_before_swap: Option<bool>,
    pub(super) slot_warning_mb: Option<u64>,
    pub(super) snapshot: Option<Spanned<String>>,
    pub(super) chunked_above_rows: Option<u64>,
    pub(super) workers: Option<u32>,
    pub(super) writers: Option<u32>,
    pub(super) spill_dir: Option<std::path::PathBuf>,
    pub(super) copy_format: Option<Spanned<String>>,
    pub(super) transform_on: Option<Spanned<String>>,
}

/// A size in MiB, whole or not (`64`, `0.25`).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Megabytes {
    Whole(u32),
    Fraction(f64),
}

impl Megabytes {
    pub(super) fn bytes(self) -> Option<usize> {
        let mib = match self {
            Megabytes::Whole(n) => f64::from(n),
            Megabytes::Fraction(f) => f,
        };
        (mib.is_finite() && mib > 0.0).then_some((mib * 1048576.0) as usize)
    }
}

/// `[compact]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCompact {
    pub(super) after_wal_mb: Option<u64>,
    pub(super) check_seconds: Option<u64>,
    pub(super) schedule: Option<Spanned<String>>,
}

/// `[throttle]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawThrottle {
    pub(super) max_replication_lag_mb: Option<u64>,
    pub(super) max_apply_lag_mb: Option<u64>,
    pub(super) max_retained_percent: Option<u32>,
}

/// `[serve]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServe {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) keep_versions: Option<u32>,
    pub(super) slot_reap_after_minutes: Option<u32>,
    pub(super) auto_rebuild: Option<bool>,
    pub(super) archiver: Option<Spanned<ArchiverRaw>>,
    pub(super) lease_seconds: Option<u32>,
    pub(super) poll_seconds: Option<u32>,
    pub(super) retry_seconds: Option<u32>,
    pub(super) tokens: Option<Vec<RawToken>>,
    pub(super) tls_cert: Option<Spanned<String>>,
    pub(super) tls_key: Option<Spanned<String>>,
}

/// One `[[serve.tokens]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToken {
    pub(super) name: Spanned<String>,
    pub(super) access: Spanned<String>,
    pub(super) secret_env: Spanned<String>,
}

/// One `[[target]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) name: Spanned<String>,
    pub(super) source: Spanned<String>,
    pub(super) key: Option<Spanned<Vec<String>>>,
    pub(super) select: Spanned<String>,
    #[serde(rename = "where")]
    pub(super) filter: Option<Spanned<String>>,
    pub(super) version: Spanned<String>,
    pub(super) schema: Option<Spanned<String>>,
    pub(super) schedule: Option<Spanned<String>>,
    pub(super) auto_rebuild: Option<bool>,
    pub(super) indexes: Option<Vec<Spanned<String>>>,
    pub(super) grants: Option<Vec<Spanned<String>>>,
    pub(super) dependent_views: Option<Spanned<String>>,
    pub(super) sync_enum_labels: Option<bool>,
    pub(super) verify_before_swap: Option<bool>,
}

/// `[serve] archiver`: `true`, `false` or `"auto"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum ArchiverRaw {
    Switch(bool),
    Named(String),
}
