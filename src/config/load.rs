//! Reading the configuration file and turning it into a [`Config`].

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use walfill_replay::archive::Layout;

use super::raw::{ArchiverRaw, RawConfig, RawServe, RawTarget};
use super::{
    ArchiveSettings, ArchiverSetting, BackfillSettings, CompactSettings, Config, CopyFormatSetting,
    Grant, PgUrl, QualifiedName, Schedule, ServeSettings, SnapshotMode, Target, ThrottleSettings,
    TlsFiles, Token, TransformOn,
};

/// PostgreSQL's identifier limit (NAMEDATALEN - 1).
const MAX_IDENTIFIER: usize = 63;

/// The configuration cannot be used; the message names the file, line and key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or missing keys.
    #[error("config file {path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value is not acceptable.
    #[error("config file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, where, and how to fix it.
        message: String,
    },
}

/// Reads and validates the configuration file at `path`.
///
/// `WALFILL_SOURCE_URL` and `WALFILL_DESTINATION_URL`, when set, replace the
/// URLs of the file (so secrets can stay out of it).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Validates configuration text read from `path`.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string().trim_end().to_string(),
    })?;
    let v = Validator { path, text };

    let source = v.url("source.url", &raw.source.url, "WALFILL_SOURCE_URL")?;
    let destination = match &raw.destination {
        Some(d) => v.url("destination.url", &d.url, "WALFILL_DESTINATION_URL")?,
        None => match std::env::var("WALFILL_DESTINATION_URL") {
            Ok(url) => PgUrl::parse(&url, "WALFILL_DESTINATION_URL")
                .map_err(|m| v.invalid(None, &format!("WALFILL_DESTINATION_URL: {m}")))?,
            Err(_) => source.clone(),
        },
    };
    let archive = match &raw.archive {
        Some(a) => {
            let url = a.url.get_ref();
            walfill_replay::archive::Archive::open(url)
                .map_err(|e| v.invalid(Some(a.url.span()), &format!("archive.url {url:?}: {e}")))?;
            Some(url.clone())
        }
        None => None,
    };
    let archive_settings = ArchiveSettings {
        base_snapshots: raw
            .archive
            .as_ref()
            .and_then(|a| a.base_snapshots)
            .unwrap_or(true),
        wait_seconds: raw
            .archive
            .as_ref()
            .and_then(|a| a.wait_seconds)
            .unwrap_or(300),
        layout: match raw.archive.as_ref().and_then(|a| a.layout.as_ref()) {
            Some(layout) => Layout::parse_setting(layout.get_ref())
                .map_err(|m| v.invalid(Some(layout.span()), &format!("archive.layout: {m}")))?,
            None => None,
        },
        keep_bases: match raw.archive.as_ref().and_then(|a| a.keep_bases) {
            Some(0) => {
                return Err(v.invalid(
                    None,
                    "archive.keep_bases = 0 would remove every base as it is written: keep at \
                     least 1 (2, the default, leaves the one a running replay may read)",
                ))
            }
            Some(n) => n,
            None => 2,
        },
        bases_url: match raw.archive.as_ref().and_then(|a| a.bases_url.as_ref()) {
            Some(bases) => {
                let url = bases.get_ref();
                walfill_replay::archive::Archive::open(url).map_err(|e| {
                    v.invalid(
                        Some(bases.span()),
                        &format!("archive.bases_url {url:?}: {e}"),
                    )
                })?;
                if Some(url) == archive.as_ref() {
                    return Err(v.invalid(
                        Some(bases.span()),
                        "archive.bases_url is the archive's own URL: leave it out (an archive \
                         of walfill's own layout keeps its bases), or give a location beside \
                         the archive, outside the folders of the tool that fills it",
                    ));
                }
                Some(url.clone())
            }
            None => None,
        },
    };

    let b = &raw.backfill;
    let publication = match &b.publication {
        Some(p) => v.identifier("backfill.publication", p)?,
        None => "walfill".to_string(),
    };
    let backfill = BackfillSettings {
        chunk_rows: v.positive("backfill.chunk_rows", b.chunk_rows, 50_000)?,
        apply_batch_changes: v.positive(
            "backfill.apply_batch_changes",
            b.apply_batch_changes,
            5_000,
        )?,
        replay_memory_bytes: match b.replay_memory_mb {
            None => 64 << 20,
            Some(size) => size.bytes().filter(|b| *b >= 4096).ok_or_else(|| {
                v.invalid(
                    None,
                    "backfill.replay_memory_mb must be a positive size in MiB of at least 4 KiB \
                     (0.004); fractions are allowed",
                )
            })?,
        },
        apply_memory_mb: v.positive("backfill.apply_memory_mb", b.apply_memory_mb, 64)?,
        swap_max_lag_bytes: b.swap_max_lag_bytes.unwrap_or(16 * 1024 * 1024),
        publication,
        // 0 would mean "wait forever" to PostgreSQL: readers queue behind a
        // waiting swap, so they would wait forever too.
        swap_lock_timeout_ms: match b.swap_lock_timeout_ms {
            Some(0) => {
                return Err(v.invalid(
                    None,
                    "backfill.swap_lock_timeout_ms must be at least 1: it bounds how long \
                     readers of the view wait behind a swap (0 would mean forever)",
                ))
            }
            other => other.unwrap_or(5_000),
        },
        max_rows_per_second: match b.max_rows_per_second {
            Some(0) => {
                return Err(v.invalid(None, "backfill.max_rows_per_second must be at least 1"))
            }
            other => other,
        },
        slot_warning_mb: b.slot_warning_mb,
        snapshot: match &b.snapshot {
            None => SnapshotMode::Auto,
            Some(mode) => match mode.get_ref().as_str() {
                "auto" => SnapshotMode::Auto,
                "exported" => SnapshotMode::Exported,
                "chunked" => SnapshotMode::Chunked,
                other => {
                    return Err(v.invalid(
                        Some(mode.span()),
                        &format!(
                            "backfill.snapshot is {other:?}; it is one of \"auto\" (the \
                             default: chunked above backfill.chunked_above_rows), \"exported\" \
                             (one snapshot for the whole copy) or \"chunked\" (a short \
                             transaction per chunk)"
                        ),
                    ))
                }
            },
        },
        copy_format: match &b.copy_format {
            None => CopyFormatSetting::Auto,
            Some(format) => match format.get_ref().as_str() {
                "auto" => CopyFormatSetting::Auto,
                "text" => CopyFormatSetting::Text,
                other => {
                    return Err(v.invalid(
                        Some(format.span()),
                        &format!(
                            "backfill.copy_format is {other:?}; it is \"auto\" (the default: \
                             binary where every column's type allows it, text otherwise) or \
                             \"text\" (always text)"
                        ),
                    ))
                }
            },
        },
        transform_on: match &b.transform_on {
            None => TransformOn::Auto,
            Some(on) => match on.get_ref().as_str() {
                "auto" => TransformOn::Auto,
                "destination" => TransformOn::Destination,
                other => {
                    return Err(v.invalid(
                        Some(on.span()),
                        &format!(
                            "backfill.transform_on is {other:?}; it is \"auto\" (the default: \
                             on the source when it gives the same values there, in the \
                             destination otherwise) or \"destination\" (always in the \
                             destination)"
                        ),
                    ))
                }
            },
        },
        chunked_above_rows: b.chunked_above_rows.unwrap_or(1_000_000),
        workers: v.positive("backfill.workers", b.workers, 1)?,
        writers: v.positive("backfill.writers", b.writers, 2)?,
        spill_dir: b.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
        allow_dead_letters: b.allow_dead_letters.unwrap_or(false),
        max_dead_letter_percent: match b.max_dead_letter_percent {
            Some(p) if p > 100 => {
                return Err(v.invalid(
                    None,
                    &format!(
                        "backfill.max_dead_letter_percent = {p}: it is a percentage of the rows \
                         read, from 0 (no failing row allowed) to 100 (no limit)"
                    ),
                ))
            }
            Some(p) => p,
            None => 20,
        },
        replay_max_slowdown: match b.replay_max_slowdown {
            Some(f) if f.is_nan() || f < 1.0 => {
                return Err(v.invalid(
                    None,
                    &format!(
                        "backfill.replay_max_slowdown = {f}: it is how many times a snapshot's \
                         estimated time a replay may take and still be chosen, at least 1 \
                         (the default is 2; a large value such as 1000 always replays when \
                         the archive can)"
                    ),
                ))
            }
            Some(f) => f,
            None => 2.0,
        },
        verify_before_swap: b.verify_before_swap.unwrap_or(false),
    };

    let serve = v.serve(&raw.serve)?;
    let mut targets: Vec<Target> = Vec::new();
    for raw_target in &raw.targets {
        let target = v.target(raw_target, &serve)?;
        if targets.iter().any(|t| t.name == target.name) {
            return Err(v.invalid(
                Some(raw_target.name.span()),
                &format!("target name {:?} is used twice", target.name),
            ));
        }
        targets.push(target);
    }

    Ok(Config {
        path: path.to_path_buf(),
        source,
        destination,
        archive,
        archive_settings,
        backfill,
        serve,
        throttle: ThrottleSettings {
            max_replication_lag_mb: raw.throttle.max_replication_lag_mb,
            max_apply_lag_mb: raw.throttle.max_apply_lag_mb,
            max_retained_percent: raw.throttle.max_retained_percent,
        },
        compact: CompactSettings {
            after_wal_mb: match raw.compact.after_wal_mb {
                Some(0) => None,
                Some(mb) => Some(mb),
                None => Some(4096),
            },
            check_seconds: raw.compact.check_seconds.unwrap_or(60).max(1),
            schedule: match &raw.compact.schedule {
                Some(text) => Some(v.schedule("[compact]", text)?),
                None => None,
            },
        },
        targets,
    })
}

struct Validator<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Validator<'_> {
    fn invalid(&self, span: Option<Range<usize>>, message: &str) -> ConfigError {
        let message = match span {
            Some(span) => {
                let line = self.text[..span.start.min(self.text.len())]
                    .matches('\n')
                    .count()
                    + 1;
                format!("line {line}: {message}")
            }
            None => message.to_string(),
        };
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn url(&self, key: &str, value: &Spanned<String>, env: &str) -> Result<PgUrl, ConfigError> {
        if let Ok(url) = std::env::var(env) {
            return PgUrl::parse(&url, env).map_err(|m| self.invalid(None, &format!("{env}: {m}")));
        }
        PgUrl::parse(value.get_ref(), key)
            .map_err(|m| self.invalid(Some(value.span()), &format!("{key}: {m}")))
    }

    fn positive(&self, key: &str, value: Option<u32>, default: u32) -> Result<u32, ConfigError> {
        match value {
            Some(0) => Err(self.invalid(None, &format!("{key} must be at least 1"))),
            Some(v) => Ok(v),
            None => Ok(default),
        }
    }

    /// A lowercase SQL identifier walfill can use unquoted in names it derives.
    fn identifier(&self, key: &str, value: &Spanned<String>) -> Result<String, ConfigError> {
        let name = value.get_ref();
        let ok = !name.is_empty()
            && name.len() <= MAX_IDENTIFIER
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            return Err(self.invalid(
                Some(value.span()),
                &format!(
                    "{key} = {name:?} is not usable: use 1 to {MAX_IDENTIFIER} lowercase letters, \
                     digits and underscores, starting with a letter or underscore"
                ),
            ));
        }
        Ok(name.clone())
    }

    fn serve(&self, s: &RawServe) -> Result<ServeSettings, ConfigError> {
        let listen = match &s.listen {
            Some(text) => Some(text.get_ref().parse().map_err(|e| {
                self.invalid(
                    Some(text.span()),
                    &format!(
                        "serve.listen = {:?}: {e}; write an address and port such as \
                         \"127.0.0.1:8089\"",
                        text.get_ref()
                    ),
                )
            })?),
            None => None,
        };
        let timezone = match &s.timezone {
            Some(text) => text.get_ref().parse::<chrono_tz::Tz>().map_err(|_| {
                self.invalid(
                    Some(text.span()),
                    &format!(
                        "serve.timezone = {:?} is not a time zone name; use one of the IANA \
                         database, such as \"UTC\" or \"Europe/Paris\"",
                        text.get_ref()
                    ),
                )
            })?,
            None => chrono_tz::UTC,
        };
        let mut tokens: Vec<Token> = Vec::new();
        for t in s.tokens.iter().flatten() {
            let name = t.name.get_ref().trim().to_string();
            if name.is_empty() || tokens.iter().any(|o| o.name == name) {
                return Err(self.invalid(
                    Some(t.name.span()),
                    "serve.tokens: each token needs a name of its own (it is recorded as who \
                     asked)",
                ));
            }
            let write = match t.access.get_ref().as_str() {
                "read" => false,
                "write" => true,
                other => {
                    return Err(self.invalid(
                        Some(t.access.span()),
                        &format!(
                            "serve.tokens {name}: access is {other:?}; it is \"read\" (GET \
                             /status, /metrics, /ready) or \"write\" (the POSTs as well)"
                        ),
                    ))
                }
            };
            tokens.push(Token {
                name,
                write,
                secret_env: t.secret_env.get_ref().clone(),
            });
        }
        let tls =
            match (&s.tls_cert, &s.tls_key) {
                (None, None) => None,
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.get_ref().into(),
                    key: key.get_ref().into(),
                }),
                (Some(one), None) | (None, Some(one)) => return Err(self.invalid(
                    Some(one.span()),
                    "serve.tls_cert and serve.tls_key go together: give both (PEM files of the \
                     certificate chain and its private key) to serve HTTPS, or neither",
                )),
            };
        Ok(ServeSettings {
            listen,
            timezone,
            tokens,
            tls,
            keep_versions: s.keep_versions.unwrap_or(1),
            slot_reap_after_minutes: s.slot_reap_after_minutes.unwrap_or(10),
            auto_rebuild: s.auto_rebuild.unwrap_or(true),
            archiver: match &s.archiver {
                None => ArchiverSetting::Auto,
                Some(a) => match a.get_ref() {
                    ArchiverRaw::Switch(true) => ArchiverSetting::On,
                    ArchiverRaw::Switch(false) => ArchiverSetting::Off,
                    ArchiverRaw::Named(n) if n == "auto" => ArchiverSetting::Auto,
                    ArchiverRaw::Named(other) => {
                        return Err(self.invalid(
                            Some(a.span()),
                            &format!(
                                "serve.archiver is {other:?}; it is \"auto\" (the default: on \
                                 for an archive of walfill's own layout, off for one another \
                                 tool fills), true or false"
                            ),
                        ))
                    }
                },
            },
            lease_seconds: self.positive("serve.lease_seconds", s.lease_seconds, 30)?,
            poll_seconds: self.positive("serve.poll_seconds", s.poll_seconds, 5)?,
            retry_seconds: self.positive("serve.retry_seconds", s.retry_seconds, 5)?,
        })
    }

    /// A five-field cron schedule; `owner` names whose (`target "x"`,
    /// `[compact]`) in the error.
    fn schedule(&self, owner: &str, text: &Spanned<String>) -> Result<Schedule, ConfigError> {
        let written = text.get_ref().trim();
        let fields = written.split_whitespace().count();
        let parsed = if fields == 5 && !written.contains('@') {
            written.parse::<croner::Cron>().map_err(|e| e.to_string())
        } else {
            Err(format!("it has {fields} fields"))
        };
        let cron = parsed.map_err(|why| {
            self.invalid(
                Some(text.span()),
                &format!(
                    "{owner}: schedule = {written:?} is not a five-field cron \
                     schedule ({why}); write minute hour day-of-month month day-of-week, \
                     such as \"0 3 * * *\" for 03:00 every day"
                ),
            )
        })?;
        Ok(Schedule {
            text: written.to_string(),
            cron,
        })
    }

    fn target(&self, t: &RawTarget, serve: &ServeSettings) -> Result<Target, ConfigError> {
        let name = self.identifier("target.name", &t.name)?;
        let version = t.version.get_ref().clone();
        if version.is_empty()
            || !version
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(self.invalid(
                Some(t.version.span()),
                &format!(
                    "target {name:?}: version = {version:?} is not usable: \
                     use lowercase letters, digits and underscores, like \"v2\""
                ),
            ));
        }
        let schedule = match &t.schedule {
            Some(text) => Some(self.schedule(&format!("target {name:?}"), text)?),
            None => None,
        };
        // Versions built by a schedule or a request add a suffix.
        let longest = format!("{version}{}", crate::config::LONGEST_SUFFIX);
        let table_len = name.len() + 2 + longest.len();
        if table_len > MAX_IDENTIFIER {
            return Err(self.invalid(
                Some(t.version.span()),
                &format!(
                    "target {name:?}: the version table {name}__{longest} (a version a \
                     schedule or request builds) would be {table_len} characters long; \
                     PostgreSQL allows {MAX_IDENTIFIER}: shorten the name or version"
                ),
            ));
        }
        let source = parse_qualified(t.source.get_ref()).map_err(|m| {
            self.invalid(
                Some(t.source.span()),
                &format!("target {name:?}: source = {:?}: {m}", t.source.get_ref()),
            )
        })?;
        let schema = match &t.schema {
            Some(s) => self.identifier("target.schema", s)?,
            None => "public".to_string(),
        };
        if schema == "walfill" {
            let span = t.schema.as_ref().map(|s| s.span());
            return Err(self.invalid(
                span,
                &format!("target {name:?}: schema \"walfill\" holds walfill's state; pick another"),
            ));
        }
        let key = match &t.key {
            Some(k) if k.get_ref().is_empty() => {
                return Err(self.invalid(
                    Some(k.span()),
                    &format!("target {name:?}: key is empty; list the key columns or leave it out"),
                ))
            }
            Some(k) => Some(k.get_ref().clone()),
            None => None,
        };
        if t.select.get_ref().trim().is_empty() {
            return Err(self.invalid(
                Some(t.select.span()),
                &format!(
                    "target {name:?}: select is empty; write a select list such as \"id, name\""
                ),
            ));
        }
        let filter = t
            .filter
            .as_ref()
            .map(|f| f.get_ref().trim().to_string())
            .filter(|f| !f.is_empty());
        Ok(Target {
            name: name.clone(),
            source,
            key,
            select: t.select.get_ref().trim().to_string(),
            filter,
            version,
            schema,
            schedule,
            auto_rebuild: t.auto_rebuild.unwrap_or(serve.auto_rebuild),
            indexes: t
                .indexes
                .iter()
                .flatten()
                .map(|i| {
                    let spec = i.get_ref().trim();
                    if spec.is_empty() || spec.contains(';') {
                        return Err(self.invalid(
                            Some(i.span()),
                            &format!(
                                "target {name:?}: index {spec:?} is not what follows `CREATE \
                                 INDEX name ON table`, such as \"(customer_id)\" or \"USING gin \
                                 (tags)\""
                            ),
                        ));
                    }
                    Ok(spec.to_string())
                })
                .collect::<Result<_, _>>()?,
            grants: t
                .grants
                .iter()
                .flatten()
                .map(|g| {
                    let text = g.get_ref().trim();
                    let upper = text.to_ascii_uppercase();
                    match upper.find(" TO ") {
                        Some(at) if at > 0 && !text.contains(';') && at + 4 < text.len() => {
                            Ok(Grant {
                                privileges: text[..at].trim().to_string(),
                                roles: text[at + 4..].trim().to_string(),
                            })
                        }
                        _ => Err(self.invalid(
                            Some(g.span()),
                            &format!(
                                "target {name:?}: grant {text:?} is not `PRIVILEGES TO ROLES`, \
                                 such as \"SELECT TO analyst\""
                            ),
                        )),
                    }
                })
                .collect::<Result<_, _>>()?,
            recreate_dependents: match t.dependent_views.as_ref() {
                None => false,
                Some(d) => match d.get_ref().as_str() {
                    "refuse" => false,
                    "recreate" => true,
                    other => {
                        return Err(self.invalid(
                            Some(d.span()),
                            &format!(
                                "target {name:?}: dependent_views is {other:?}; it is \"refuse\" \
                                 (the default: a version that must recreate the view is refused \
                                 while objects depend on it) or \"recreate\""
                            ),
                        ))
                    }
                },
            },
            sync_enum_labels: t.sync_enum_labels.unwrap_or(false),
            verify_before_swap: t.verify_before_swap,
        })
    }
}

/// Parses `schema.table`, `table` (schema `public`), with optional double quotes.
pub fn parse_qualified(text: &str) -> Result<QualifiedName, String> {
    match split_names(text, "expected schema.table")?.as_slice() {
        [name] => Ok(QualifiedName {
            schema: "public".into(),
            name: name.clone(),
        }),
        [schema, name] => Ok(QualifiedName {
            schema: schema.clone(),
            name: name.clone(),
        }),
        _ => Err("expected schema.table".into()),
    }
}

/// Parses one name (a schema's, say), folded to lower case unless it is
/// double-quoted, as SQL reads an identifier.
pub fn parse_identifier(text: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected one name; quote a name with a dot, like \"my.schema\"";
    match split_names(text, EXPECTED)?.as_slice() {
        [name] => Ok(name.clone()),
        _ => Err(EXPECTED.into()),
    }
}

/// Splits dotted names, each unquoted (folded to lower case) or quoted.
fn split_names(text: &str, expected: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return Err("unterminated quoted identifier".into()),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                if !(c.is_alphanumeric() || c == '_' || c == '$') {
                    return Err(format!(
                        "unexpected {c:?}; quote names with special characters, like \"My Table\""
                    ));
                }
                part.push(c.to_ascii_lowercase());
                chars.next();
            }
        }
        if part.is_empty() {
            return Err(expected.into());
        }
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => continue,
            Some(c) => return Err(format!("unexpected {c:?} after a quoted name")),
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[source]
url = "postgresql://app:pw@127.0.0.1:5432/shop"

[[target]]
name = "orders_summary"
source = "public.orders"
key = ["id"]
select = "id, upper(status) AS status"
where = "status <> 'test'"
version = "v1"
schema = "derived"
"#;

    fn parse_text(text: &str) -> Result<Config, String> {
        parse(Path::new("walfill.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_a_good_file() {
        let config = parse_text(GOOD).unwrap();
        assert_eq!(config.destination, config.source);
        assert_eq!(config.backfill.chunk_rows, 50_000);
        let t = config.target("orders_summary").unwrap();
        assert_eq!(t.source.to_string(), "public.orders");
        assert_eq!(t.filter.as_deref(), Some("status <> 'test'"));
        assert_eq!(t.version_table("v1"), "orders_summary__v1");
        let err = config.target("nope").unwrap_err().to_string();
        assert!(err.contains("orders_summary"), "{err}");
    }

    #[test]
    fn unknown_keys_name_key_and_line() {
        let text = GOOD.replace("schema = \"derived\"", "schema = \"derived\"\nshcema = 1");
        let err = parse_text(&text).unwrap_err();
        assert!(err.contains("shcema"), "{err}");
        assert!(err.contains("line 13"), "{err}");
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let cases = [
            (
                "127.0.0.1:5432/shop\"",
                "127.0.0.1:5432\"",
                "line 3",
                "no database",
            ),
            (
                "version = \"v1\"",
                "version = \"V 1\"",
                "line 11",
                "version",
            ),
            ("public.orders", "public.orders.x", "line 7", "schema.table"),
            (
                "name = \"orders_summary\"",
                "name = \"Orders\"",
                "line 6",
                "target.name",
            ),
            ("postgresql://app", "mysql://app", "line 3", "scheme"),
        ];
        for (from, to, line, needle) in cases {
            let err = parse_text(&GOOD.replace(from, to)).unwrap_err();
            assert!(err.contains(line) && err.contains(needle), "{to}: {err}");
        }
    }

    #[test]
    fn archive_layout_is_auto_or_a_named_layout() {
        let with = |layout: &str| {
            let archive = format!("[archive]\nurl = \"file:///srv/wal\"\n{layout}\n");
            parse_text(&GOOD.replace("[[target]]", &format!("{archive}\n[[target]]")))
        };
        assert_eq!(with("").unwrap().archive_settings.layout, None);
        assert_eq!(
            with("layout = \"auto\"").unwrap().archive_settings.layout,
            None
        );
        for layout in Layout::ALL {
            let config = with(&format!("layout = \"{layout}\"")).unwrap();
            assert_eq!(config.archive_settings.layout, Some(layout));
        }
        let err = with("layout = \"walg\"").unwrap_err();
        assert!(
            err.contains("line 7") && err.contains("archive.layout") && err.contains("\"walg\""),
            "{err}"
        );
        assert!(
            err.contains("auto, walfill, flat, wal-g, pgbackrest"),
            "{err}"
        );
    }

    #[test]
    fn the_archiver_is_auto_true_or_false() {
        let with = |line: &str| {
            parse_text(&GOOD.replace("[[target]]", &format!("[serve]\n{line}\n\n[[target]]")))
        };
        assert_eq!(with("").unwrap().serve.archiver, ArchiverSetting::Auto);
        for (text, setting) in [
            ("\"auto\"", ArchiverSetting::Auto),
            ("true", ArchiverSetting::On),
            ("false", ArchiverSetting::Off),
        ] {
            let config = with(&format!("archiver = {text}")).unwrap();
            assert_eq!(config.serve.archiver, setting, "{text}");
        }
        let err = with("archiver = \"sometimes\"").unwrap_err();
        assert!(
            err.contains("serve.archiver")
                && err.contains("\"sometimes\"")
                && err.contains("line 6"),
            "{err}"
        );
    }

    #[test]
    fn missing_required_key_is_named() {
        let err = parse_text(&GOOD.replace("select = \"id, upper(status) AS status\"\n", ""))
            .unwrap_err();
        assert!(err.contains("select"), "{err}");
    }

    #[test]
    fn parses_qualified_names() {
        let q = parse_qualified("Orders").unwrap();
        assert_eq!((q.schema.as_str(), q.name.as_str()), ("public", "orders"));
        let q = parse_qualified("\"My Schema\".\"Order\"\"s\"").unwrap();
        assert_eq!(
            (q.schema.as_str(), q.name.as_str()),
            ("My Schema", "Order\"s")
        );
        assert!(parse_qualified("a.b.c").is_err());
        assert!(parse_qualified("a b").is_err());
        assert!(parse_qualified("").is_err());
        assert_eq!(parse_identifier("Walfill").as_deref(), Ok("walfill"));
        assert_eq!(
            parse_identifier("\"My.Schema\"").as_deref(),
            Ok("My.Schema")
        );
        assert!(parse_identifier("a.b").is_err());
        assert!(parse_identifier("").is_err());
    }
}
