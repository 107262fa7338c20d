//! One torture run: a random table and workload, a version built by one
//! path with kills in chosen phases, more changes, then the view compared
//! with the transform of the source, row by row.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use super::oracle;
use super::settings::{self, Draw};
use super::transform::toml_escape;
use super::workload::{self, create, Ddl, Table, COLUMNS};
use crate::support::cluster::archive_url;
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
    /// Whether a copy evaluated the transform on the source (its log said
    /// "transformed on the source and copied straight in").
    pub on_source: bool,
    /// Why a copy evaluated it in the destination, as logged (`why=`).
    pub in_destination: Option<String>,
    /// Rows the transform fails on (dead letters expected and found).
    pub dead_letters: usize,
    /// Dead letters of rows that do not fail, older than a TRUNCATE (left
    /// for `dead-letters --retry` to drop).
    pub obsolete: usize,
    /// Whether `dead-letters --retry` ran.
    pub retried: bool,
    /// Whether `verify` was checked.
    pub verified: bool,
    /// Seconds the `verify` checks took.
    pub verify_secs: f64,
    /// What `verify` said on the right version.
    pub verify_said: String,
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
    /// Whether every run checks `verify` (else one in two).
    pub verify_every: bool,
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

/// How the run with `seed` builds its version.
fn kind(seed: u64) -> Kind {
    // Every path in turn, whatever the generator does; snapshots in five
    // runs of eight, as only a copy can evaluate the transform on the
    // source.
    match seed % 8 {
        1 | 5 => Kind::ReplayCreation,
        6 => Kind::ReplayBase,
        _ => Kind::Snapshot,
    }
}

/// How a snapshot run with `seed` copies: `[backfill]` lines.
fn copy(seed: u64) -> &'static str {
    // Snapshot runs alternate between the exported snapshot and chunks
    // (every other chunked run with two workers); a base snapshot comes
    // from an exported one only, and keeps its rows as text (so the
    // destination evaluates the transform): one exported copy in four
    // writes one.
    match (kind(seed), (seed / 8) % 8) {
        (Kind::Snapshot, 0 | 2 | 4 | 6) => "snapshot = \"chunked\"\n",
        (Kind::Snapshot, 1 | 5) => "snapshot = \"chunked\"\nworkers = 2\n",
        _ => "snapshot = \"exported\"\n",
    }
}

/// Whether the run with `seed` keeps base snapshots in the archive.
fn base_snapshots(seed: u64) -> bool {
    kind(seed) != Kind::Snapshot || (seed / 8) % 8 == 7
}

/// What the run with `seed` draws besides its workload.
pub fn draw(seed: u64, scale: Scale) -> Draw {
    Draw::new(
        seed,
        kind(seed) == Kind::Snapshot,
        base_snapshots(seed),
        scale.verify_every,
    )
}

/// The log of a walfill run that builds the version, kept to see where a
/// copy evaluated the transform.
fn keep_log(log: &mut String, output: &std::process::Output) {
    log.push_str(&String::from_utf8_lossy(&output.stderr));
}

/// Runs one seeded torture run; `Err` says what went wrong (and which
/// schema changes the run made).
pub fn run(seed: u64, scale: Scale) -> Result<Outcome, String> {
    let mut out = Outcome::default();
    match body(seed, scale, &mut out) {
        Ok(()) => Ok(out),
        Err(e) => Err(format!("{e}\n  schema changes made: {:?}", out.ddl)),
    }
}

/// The run itself, recording what it did in `out` as it goes.
fn body(seed: u64, scale: Scale, out: &mut Outcome) -> Result<(), String> {
    let mut rng = Lcg(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d);
    for _ in 0..4 {
        rng.below(2);
    }
    let kind = kind(seed);
    let draw = draw(seed, scale);
    let copy = copy(seed);
    let transform_on = if draw.transform_on_destination {
        "transform_on = \"destination\"\n"
    } else {
        ""
    };
    // The role goes after the databases it owns objects in.
    let role = draw.role.then(|| settings::create_role(seed));
    let db = TestDb::with_options("tt", draw.source.options());
    let dest = draw
        .destination
        .map(|locale| TestDb::with_options("ttd", locale.options()));
    // Where the view and walfill's state live.
    let state = dest.as_ref().unwrap_or(&db);
    settings::apply(&draw.settings, &db, dest.as_ref(), role.as_ref());
    let url = |db: &TestDb| role.as_ref().map(|r| r.url(db)).unwrap_or_else(|| db.url());
    let head = format!(
        "[source]\nurl = \"{}\"\n\n{}",
        url(&db),
        dest.as_ref()
            .map(|d| format!("[destination]\nurl = \"{}\"\n\n", url(d)))
            .unwrap_or_default()
    );
    let schema = if rng.below(4) == 0 { "my.s" } else { "public" };
    if schema != "public" {
        db.exec("CREATE SCHEMA \"my.s\"");
    }
    let composite = draw.composite;
    let mut table = Table {
        schema: schema.into(),
        name: draw.table_name.into(),
        columns: COLUMNS
            .iter()
            .chain(composite.then_some(&"k2"))
            .map(|c| (c.to_string(), c.to_string()))
            .collect(),
        composite,
        next_key: scale.rows,
        added: 0,
        collation: draw.collation.map(str::to_string),
    };
    let filter = draw.transform.filter.as_deref();
    let select = draw.transform.select.as_str();
    let bases = match base_snapshots(seed) {
        true => "",
        false => "base_snapshots = false\n",
    };
    let source = toml_escape(&table.quoted());
    // The oracle says which rows fail, whatever their share: a workload
    // that updates mostly failing rows (seed 80003) is not a broken
    // transform here. The share limit has its own tests (transform::poison).
    let section = |version: &str, select: &str| {
        let filter = filter
            .map(|f| format!("where = \"{}\"\n", toml_escape(f)))
            .unwrap_or_default();
        format!(
            "[archive]\nurl = \"{}\"\nwait_seconds = 120\n{bases}\n[backfill]\nchunk_rows = 50\n{copy}\
             {transform_on}apply_batch_changes = 100\napply_memory_mb = 1\n\
             replay_memory_mb = 0.02\nswap_max_lag_bytes = 262144\nallow_dead_letters = true\n\
             max_dead_letter_percent = 100\n\n\
             [[target]]\nname = \"tv\"\nsource = \"{source}\"\nselect = \"{}\"\n{filter}\
             version = \"{version}\"\n",
            archive_url(),
            toml_escape(select)
        )
    };
    let archive_only = format!(
        "{head}[archive]\nurl = \"{}\"\nwait_seconds = 120\n",
        archive_url()
    );
    let walfill = Walfill::with_text(&archive_only);
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
    history(&mut client, &mut table, &mut rng, out);

    let mut version = "v1";
    if kind == Kind::ReplayBase {
        // An earlier version copied from a snapshot leaves the base.
        walfill.write_config(&format!(
            "{head}{}",
            section(
                "v0",
                &format!("{}, c", if table.composite { "k, k2" } else { "k" })
            )
        ));
        walfill.ok(&["setup"]);
        walfill.ok(&["backfill", "tv", "--path", "snapshot"]);
        history(&mut client, &mut table, &mut rng, out);
        version = "v1";
    }
    walfill.write_config(&format!("{head}{}", section(version, select)));
    walfill.ok(&["setup"]);
    db.archive_wal();

    // What the backfills of the version logged.
    let mut log = String::new();
    let replay = kind != Kind::Snapshot;
    let mut path_arg = if replay { "replay" } else { "snapshot" };
    let points = failpoints(kind);
    for _ in 0..=rng.below(2) {
        let (point, expected) = points[rng.below(points.len() as u64) as usize];
        let done = field(state, "phase", version) == "active";
        if done {
            break;
        }
        let killed = walfill.run_env(
            &["backfill", "tv", "--path", path_arg],
            &[("WALFILL_FAILPOINTS", point)],
        );
        keep_log(&mut log, &killed);
        let phase = field(state, "phase", version);
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
            return Err(format!(
                "backfill with failpoint {point} failed:\n{}",
                oracle::tail(&err)
            ));
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
            keep_log(&mut log, &killed);
            let phase = field(state, "phase", version);
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
    if field(state, "phase", version) != "active" && rng.below(3) == 0 {
        // A kill at a moment nobody chose.
        let mut child = walfill.spawn(&["backfill", "tv", "--path", path_arg]);
        let drain = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        });
        std::thread::sleep(Duration::from_millis(100 + rng.below(2500)));
        let _ = child.kill();
        let _ = child.wait();
        if let Some(text) = drain.and_then(|d| d.join().ok()) {
            log.push_str(&text);
        }
        out.external.push(field(state, "phase", version));
    }
    let args = ["backfill", "tv", "--path", path_arg];
    let done = walfill.run(&args);
    keep_log(&mut log, &done);
    if !done.status.success() {
        return Err(format!(
            "the final backfill failed:\n{}",
            oracle::tail(&String::from_utf8_lossy(&done.stderr))
        ));
    }
    out.path = field(state, "path", version);
    out.on_source = log.contains("transformed on the source and copied straight in");
    out.in_destination = log
        .lines()
        .find_map(|l| l.split_once(" why=").map(|(_, why)| why))
        .map(|why| why.trim().chars().take(240).collect());
    if draw.transform_on_destination && out.on_source {
        return Err(
            "a copy evaluated the transform on the source under transform_on = \"destination\""
                .into(),
        );
    }
    if kind == Kind::ReplayBase {
        // The version that left the base reads columns the history since
        // may have retyped: it has served its purpose.
        walfill.ok(&["retire", "tv", "v0"]);
    }
    if replay && out.refused.is_none() && path_arg != "snapshot" && out.path != "replay" {
        return Err(format!(
            "replay was not taken: {}",
            field(state, "path_reason", version)
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
            oracle::tail(&String::from_utf8_lossy(&synced.stderr))
        ));
    }

    // The view and the dead letters against the transform of the source.
    let expected = oracle::expected(&db, &table, &draw.transform)?;
    out.dead_letters = expected.failing.len();
    out.obsolete = oracle::check(&expected, state, composite, version, true)?;
    if draw.retry {
        // Nothing fixed the cause: every dead letter fails again, and the
        // view stays as it is.
        let retried = walfill.run(&["dead-letters", "tv", "--retry"]);
        if !retried.status.success() {
            return Err(format!(
                "dead-letters --retry failed:\n{}",
                oracle::tail(&String::from_utf8_lossy(&retried.stderr))
            ));
        }
        oracle::check(&expected, state, composite, version, false)
            .map_err(|e| format!("after dead-letters --retry: {e}"))?;
        out.retried = true;
    }
    let source_rows: i64 = db
        .value(&format!("SELECT count(*) FROM {}", table.quoted()))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if draw.verify {
        let started = std::time::Instant::now();
        // At most about 40 ranges: each waits for the stream.
        let chunk = i64::from(draw.verify_chunk_rows).max(source_rows / 40);
        walfill.write_config(
            &format!("{head}{}", section(version, select))
                .replace("chunk_rows = 50\n", &format!("chunk_rows = {chunk}\n")),
        );
        out.verify_said = oracle::verify_checks(
            &walfill,
            state,
            &draw.transform,
            composite,
            table.next_key + 1000,
        )?;
        out.verified = true;
        out.verify_secs = started.elapsed().as_secs_f64();
    }
    Ok(())
}

/// A client error with the server's message.
fn db_error(e: &postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}
