//! One torture run: a random table and workload, a version built by one
//! path with kills in chosen phases, more changes, then the view compared
//! with the transform of the source, row by row.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use super::workload::{self, create, Ddl, Table, COLUMNS};
use crate::support::cluster::archive_url;
use crate::support::compare::pinned_client;
use crate::support::workload::Lcg;
use crate::support::{TestDb, Walfill};

/// How a run builds its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A snapshot copy.
    Snapshot,
    /// A replay of archived WAL from the table's creation.
    ReplayCreation,
    /// A replay from the base snapshot an earlier version left.
    ReplayBase,
}

/// What a run did, for the report.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The path the version was built by (`replay` or `snapshot`).
    pub path: String,
    /// Failpoints armed, with the phase recorded when they fired (or
    /// "not reached").
    pub kills: Vec<(String, String)>,
    /// External `kill -9`s, with the phase found afterwards.
    pub external: Vec<String>,
    /// Schema changes made.
    pub ddl: Vec<Ddl>,
    /// Why replay was refused, when it was (a documented reason).
    pub refused: Option<String>,
}

/// How big a run is.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// Rows the table starts with.
    pub rows: i64,
    /// Transactions before and after the backfill.
    pub transactions: u32,
    /// Rows of one transaction applied by the stream in one run of ten (0:
    /// none).
    pub large_transaction: i64,
}

/// Failpoints a backfill by this kind passes, and the phase recorded when
/// each fires.
fn failpoints(kind: Kind) -> Vec<(&'static str, &'static str)> {
    let mut points = match kind {
        Kind::Snapshot => vec![
            ("copy.slot_created", "planned"),
            ("copy.start", "copying"),
            ("copy.before_commit@2", "copying"),
            ("copy.batch@1", "copying"),
            ("copy.end", "copying"),
        ],
        Kind::ReplayCreation | Kind::ReplayBase => vec![
            ("replay.slot_created", "planned"),
            ("replay.start", "replaying"),
            ("replay.before_commit@1", "replaying"),
            ("replay.batch@1", "replaying"),
            ("replay.end", "replaying"),
        ],
    };
    points.extend([
        ("catchup.start", "catching_up"),
        ("catchup.before_commit@1", "catching_up"),
        ("catchup.end", "catching_up"),
        ("swap.start", "ready"),
        ("swap.before_commit", "ready"),
        ("swap.end", "active"),
    ]);
    points
}

/// The transform of the run's target, and its filter.
fn transform(composite: bool) -> String {
    let key = if composite { "k, k2" } else { "k" };
    format!(
        "{key}, md5(coalesce(a, '-')) AS a_md5, length(a) AS a_len, b * 2 AS b2, c, d, e, f, g, \
         h"
    )
}

/// A column of the version's state ("" when the version is not recorded).
fn field(db: &TestDb, column: &str, version: &str) -> String {
    db.client()
        .query_opt(
            &format!(
                "SELECT ({column})::text FROM walfill.versions
                  WHERE target = 'tv' AND version = '{version}'"
            ),
            &[],
        )
        .ok()
        .flatten()
        .and_then(|r| r.get::<_, Option<String>>(0))
        .unwrap_or_default()
}

/// Runs one seeded torture run; `Err` says what went wrong.
pub fn run(seed: u64, scale: Scale) -> Result<Outcome, String> {
    let mut rng = Lcg(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d);
    for _ in 0..4 {
        rng.below(2);
    }
    // Every path in turn, whatever the generator does.
    let kind = [Kind::Snapshot, Kind::ReplayCreation, Kind::ReplayBase][(seed % 3) as usize];
    // Snapshot runs alternate between the exported snapshot and chunks
    // (every other chunked run with two workers); a base snapshot comes
    // from an exported one only.
    let copy = match (kind, (seed / 3) % 4) {
        (Kind::Snapshot, 1) => "snapshot = \"chunked\"\n",
        (Kind::Snapshot, 3) => "snapshot = \"chunked\"\nworkers = 2\n",
        _ => "snapshot = \"exported\"\n",
    };
    let mut out = Outcome::default();
    let db = TestDb::new("tt");
    let schema = if rng.below(4) == 0 { "my.s" } else { "public" };
    if schema != "public" {
        db.exec("CREATE SCHEMA \"my.s\"");
    }
    if rng.below(3) == 0 {
        // Every session of this database prints values otherwise by default.
        db.exec(&format!(
            "ALTER DATABASE {} SET DateStyle = 'SQL, DMY'; ALTER DATABASE {} SET \
             IntervalStyle = 'sql_standard'; ALTER DATABASE {} SET extra_float_digits = -3; \
             ALTER DATABASE {} SET TimeZone = 'Pacific/Chatham'",
            db.name, db.name, db.name, db.name
        ));
    }
    let composite = rng.below(3) == 0;
    let mut table = Table {
        schema: schema.into(),
        name: "t".into(),
        columns: COLUMNS
            .iter()
            .chain(composite.then_some(&"k2"))
            .map(|c| (c.to_string(), c.to_string()))
            .collect(),
        composite,
        next_key: scale.rows,
        added: 0,
    };
    let filter = (rng.below(2) == 0).then_some("b % 5 <> 0");
    let select = transform(table.composite);
    let source = format!("\\\"{}\\\".t", table.schema);
    let section = |version: &str, select: &str| {
        let filter = filter
            .map(|f| format!("where = \"{f}\"\n"))
            .unwrap_or_default();
        format!(
            "[archive]\nurl = \"{}\"\nwait_seconds = 120\n\n[backfill]\nchunk_rows = 50\n{copy}\
             apply_batch_changes = 100\napply_memory_mb = 1\nreplay_memory_mb = 0.02\n\
             swap_max_lag_bytes = 262144\n\n\
             [[target]]\nname = \"tv\"\nsource = \"{source}\"\nselect = \"{select}\"\n{filter}\
             version = \"{version}\"\n",
            archive_url()
        )
    };
    let archive_only = format!(
        "[archive]\nurl = \"{}\"\nwait_seconds = 120\n",
        archive_url()
    );
    let walfill = Walfill::new(&db, &archive_only);
    let mut client = db.client();
    workload::vary_settings(&mut client, &mut rng);

    // A transaction that got its xid before the table existed and writes
    // it later (replay from creation must see it whole).
    let mut early = None;
    if kind == Kind::ReplayCreation {
        walfill.ok(&["setup"]);
        if rng.below(2) == 0 {
            let mut c = db.client();
            c.batch_execute("CREATE TABLE other (i int); BEGIN; INSERT INTO other VALUES (1)")
                .map_err(|e| db_error(&e))?;
            db.exec("CHECKPOINT");
            early = Some(c);
        }
    }
    db.exec(&create(&table));
    db.exec(&format!(
        "INSERT INTO {t} (k, a, b, c, d, e, f, g, h)
         SELECT g, CASE WHEN g % 9 = 0 THEN (SELECT string_agg(md5(g::text || i), '')
                                              FROM generate_series(1, 100) i)
                        ELSE 'row ' || g END,
                g % 1000, g * 1.5, '2020-01-01'::date + g, '2024-01-01 00:00+00'::timestamptz + g * interval '1 minute',
                g / 7.0, g * interval '1 second', decode(md5(g::text), 'hex')
           FROM generate_series(1, {rows}) g",
        t = table.quoted(),
        rows = scale.rows
    ));
    if let Some(mut c) = early.take() {
        c.batch_execute(&format!(
            "INSERT INTO {} (k, a) VALUES ({}, 'from the early transaction'); COMMIT",
            table.quoted(),
            scale.rows + 100_000
        ))
        .map_err(|e| db_error(&e))?;
    }
    let pre: [Ddl; 9] = [
        Ddl::AddColumn,
        Ddl::AddColumnDefault,
        Ddl::DropReAdd,
        Ddl::RenameColumn,
        Ddl::ReplicaIdentity,
        Ddl::SetStorage,
        Ddl::DropUnread,
        Ddl::RetypeUnread,
        Ddl::RetypeRewrite,
    ];
    let history =
        |client: &mut postgres::Client, table: &mut Table, rng: &mut Lcg, out: &mut Outcome| {
            for _ in 0..scale.transactions {
                workload::transaction(client, table, rng, scale.rows);
                if rng.below(12) == 0 {
                    // A rewrite is rare: it sends most runs to a snapshot.
                    let kinds = if rng.below(4) == 0 { 9 } else { 8 };
                    let d = pre[rng.below(kinds) as usize];
                    workload::ddl(client, table, d, false, rng);
                    out.ddl.push(d);
                }
            }
        };
    history(&mut client, &mut table, &mut rng, &mut out);

    let mut version = "v1";
    if kind == Kind::ReplayBase {
        // An earlier version copied from a snapshot leaves the base.
        walfill.write_config(&format!(
            "[source]\nurl = \"{}\"\n\n{}",
            db.url(),
            section(
                "v0",
                &format!("{}, c", if table.composite { "k, k2" } else { "k" })
            )
        ));
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "tv", "--path", "snapshot"]);
        history(&mut client, &mut table, &mut rng, &mut out);
        version = "v1";
    }
    walfill.write_config(&format!(
        "[source]\nurl = \"{}\"\n\n{}",
        db.url(),
        section(version, &select)
    ));
    walfill.ok(&["setup"]);
    db.archive_wal();

    let replay = kind != Kind::Snapshot;
    let mut path_arg = if replay { "replay" } else { "snapshot" };
    let points = failpoints(kind);
    for _ in 0..=rng.below(2) {
        let (point, expected) = points[rng.below(points.len() as u64) as usize];
        let done = field(&db, "phase", version) == "active";
        if done {
            break;
        }
        let killed = walfill.run_env(
            &["backfill", "tv", "--path", path_arg],
            &[("WALFILL_FAILPOINTS", point)],
        );
        let phase = field(&db, "phase", version);
        if killed.status.signal() == Some(6) {
            if phase != expected {
                return Err(format!(
                    "failpoint {point}: the version was left in phase {phase}, expected {expected}"
                ));
            }
            out.kills.push((point.to_string(), phase.clone()));
        } else if killed.status.success() {
            out.kills.push((point.to_string(), "not reached".into()));
        } else {
            let err = String::from_utf8_lossy(&killed.stderr).into_owned();
            if path_arg == "replay" && err.contains("cannot be built by replay") {
                if !out.ddl.iter().any(|d| d.blocks_replay()) {
                    return Err(format!("replay refused for an undocumented reason: {err}"));
                }
                out.refused = Some(err.lines().last().unwrap_or("").to_string());
                path_arg = "auto";
                continue;
            }
            return Err(format!("backfill with failpoint {point} failed:\n{err}"));
        }
        // A replay interrupted may be abandoned for a snapshot, with a kill
        // inside the fallback.
        if replay && phase == "replaying" && rng.below(3) == 0 {
            let point = ["fallback.start", "fallback.end"][rng.below(2) as usize];
            let expected = if point == "fallback.start" {
                "replaying"
            } else {
                "planned"
            };
            let killed = walfill.run_env(
                &["backfill", "tv", "--path", "snapshot"],
                &[("WALFILL_FAILPOINTS", point)],
            );
            let phase = field(&db, "phase", version);
            if killed.status.signal() != Some(6) || phase != expected {
                return Err(format!(
                    "failpoint {point}: {} and phase {phase}, expected {expected}",
                    killed.status
                ));
            }
            out.kills.push((point.to_string(), phase));
            path_arg = "snapshot";
        }
        workload::transaction(&mut client, &mut table, &mut rng, scale.rows);
    }
    if field(&db, "phase", version) != "active" && rng.below(3) == 0 {
        // A kill at a moment nobody chose.
        let mut child = walfill.spawn(&["backfill", "tv", "--path", path_arg]);
        std::thread::sleep(Duration::from_millis(100 + rng.below(2500)));
        let _ = child.kill();
        let _ = child.wait();
        out.external.push(field(&db, "phase", version));
    }
    let args = ["backfill", "tv", "--path", path_arg];
    let done = walfill.run(&args);
    if !done.status.success() {
        return Err(format!(
            "the final backfill failed:\n{}",
            String::from_utf8_lossy(&done.stderr)
        ));
    }
    out.path = field(&db, "path", version);
    if kind == Kind::ReplayBase {
        // The version that left the base reads columns the history since
        // may have retyped: it has served its purpose.
        walfill.ok(&["retire", "tv", "v0"]);
    }
    if replay && out.refused.is_none() && path_arg != "snapshot" && out.path != "replay" {
        return Err(format!(
            "replay was not taken: {}",
            field(&db, "path_reason", version)
        ));
    }

    // Life goes on: changes, schema changes, a large transaction.
    let post = [
        Ddl::RenameColumn,
        Ddl::RenameTable,
        Ddl::ReplicaIdentity,
        Ddl::SetStorage,
        Ddl::AddColumn,
        Ddl::AddColumnDefault,
        Ddl::DropUnread,
        Ddl::RetypeUnread,
    ];
    for _ in 0..scale.transactions {
        workload::transaction(&mut client, &mut table, &mut rng, scale.rows);
        if rng.below(10) == 0 {
            let d = post[rng.below(post.len() as u64) as usize];
            workload::ddl(&mut client, &mut table, d, true, &mut rng);
            out.ddl.push(d);
        }
    }
    // The large transaction in one run of ten (it is most of a run's time).
    if scale.large_transaction > 0 && seed % 10 == 0 {
        client
            .batch_execute(&format!(
                "INSERT INTO {} (\"{}\", \"{}\", \"{}\") SELECT g, 'big', 1 FROM generate_series({}, {}) g",
                table.quoted(),
                table.col("k"),
                table.col("a"),
                table.col("b"),
                table.next_key + 1,
                table.next_key + scale.large_transaction
            ))
            .map_err(|e| db_error(&e))?;
        table.next_key += scale.large_transaction;
    }
    if rng.below(3) == 0 {
        let killed = walfill.run_env(
            &["sync", "--once"],
            &[("WALFILL_FAILPOINTS", "sync.before_commit")],
        );
        out.kills.push((
            "sync.before_commit".into(),
            if killed.status.signal() == Some(6) {
                "active"
            } else {
                "not reached"
            }
            .into(),
        ));
    }
    let synced = walfill.run(&["sync", "--once"]);
    if !synced.status.success() {
        return Err(format!(
            "sync --once failed:\n{}",
            String::from_utf8_lossy(&synced.stderr)
        ));
    }
    compare(&db, &table, &select, filter).map(|()| out)
}

/// The view against the transform of the source table (by its current
/// names), row by row.
fn compare(db: &TestDb, table: &Table, select: &str, filter: Option<&str>) -> Result<(), String> {
    let key = if table.composite { "k, k2" } else { "k" };
    let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
    let expected_sql = format!(
        "SELECT x::text FROM (SELECT {select} FROM {} AS t{filter}) x ORDER BY {key}",
        table.as_planned()
    );
    let actual_sql = format!("SELECT x::text FROM public.tv x ORDER BY {key}");
    let rows = |sql: &str| -> Result<Vec<String>, String> {
        pinned_client(db)
            .query(sql, &[])
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
            .map_err(|e| {
                let message = e.as_db_error().map(|d| d.message().to_string());
                format!("{sql}: {}", message.unwrap_or(e.to_string()))
            })
    };
    let (expected, actual) = (rows(&expected_sql)?, rows(&actual_sql)?);
    if expected == actual {
        return Ok(());
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|r| !actual.contains(r))
        .take(5)
        .collect();
    let extra: Vec<&String> = actual
        .iter()
        .filter(|r| !expected.contains(r))
        .take(5)
        .collect();
    Err(format!(
        "the view differs from the transform of the source: {} rows expected, {} found; missing \
         {missing:?}, unexpected {extra:?}",
        expected.len(),
        actual.len()
    ))
}

/// A client error with the server's message.
fn db_error(e: &postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}
