//! What a run's view must hold, computed by PostgreSQL on the source table
//! itself under walfill's pinned settings, and the checks of the view, its
//! dead letters and `walfill verify` against it.

use std::io::Read;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use super::transform::Transform;
use super::workload::Table;
use crate::support::compare::pinned_client;
use crate::support::service::Background;
use crate::support::{TestDb, Walfill};

/// The settings every walfill session pins that [`pinned_client`] leaves
/// alone: they change how the transform's text parses and which names it
/// resolves, and a database or role of the run may set them otherwise.
const MORE_PINS: &str = "SET standard_conforming_strings = on; \
     SET backslash_quote = safe_encoding; SET timezone_abbreviations = 'Default'; \
     SET search_path = \"$user\", public";

/// A connection to `db` with every setting walfill pins pinned likewise.
pub fn client(db: &TestDb) -> postgres::Client {
    let mut client = pinned_client(db);
    client
        .batch_execute(MORE_PINS)
        .unwrap_or_else(|e| panic!("pinning the session's settings: {e}"));
    client
}

/// The transform of the source table: its rows (as text, in key order)
/// and the keys of the rows it fails on (as walfill writes a dead letter's
/// key: the key's values joined by `,`).
#[derive(Debug, Default)]
pub struct Expected {
    /// `row::text` of each row, in key order.
    pub rows: Vec<String>,
    /// Keys of the rows the transform (or its filter) fails on, sorted.
    pub failing: Vec<String>,
}

/// Whether `e` is an error of one row's data (SQLSTATE classes 22, 2F, 38,
/// 39, P0): the row is a dead letter.
fn is_data_error(e: &postgres::Error) -> bool {
    e.code()
        .is_some_and(|c| matches!(&c.code()[..2], "22" | "2F" | "38" | "39" | "P0"))
}

fn describe(e: &postgres::Error) -> String {
    e.as_db_error()
        .map(|d| format!("{} ({})", d.message(), d.code().code()))
        .unwrap_or_else(|| e.to_string())
}

/// Evaluates `transform` over the source table (by the names the transform
/// was planned with). When the whole query fails on a row's data, key
/// ranges are evaluated, halved while they fail, and rows alone at the end:
/// the rows that fail alone are the expected dead letters.
pub fn expected(src: &TestDb, table: &Table, transform: &Transform) -> Result<Expected, String> {
    let mut client = client(src);
    let order = if table.composite { "k, k2" } else { "k" };
    let filter = transform
        .filter
        .as_ref()
        .map(|f| format!(" WHERE {f}"))
        .unwrap_or_default();
    let planned = table.as_planned();
    // `OFFSET 0` keeps the key range under the filter: the filter and the
    // select list see only the range's rows.
    let query = |range: &str| {
        format!(
            "SELECT x::text FROM (SELECT {} FROM (SELECT * FROM {planned} AS p{range} OFFSET 0) \
             AS t{filter}) x ORDER BY {order}",
            transform.select
        )
    };
    match client.query(&query(""), &[]) {
        Ok(rows) => {
            return Ok(Expected {
                rows: rows.iter().map(|r| r.get(0)).collect(),
                failing: Vec::new(),
            })
        }
        Err(e) if is_data_error(&e) => {}
        Err(e) => return Err(format!("the oracle's query failed: {}", describe(&e))),
    }
    let key2 = if table.composite { "k2" } else { "''" };
    let keys: Vec<(i64, String)> = client
        .query(
            &format!("SELECT k, {key2}::text FROM {planned} AS p ORDER BY {order}"),
            &[],
        )
        .map_err(|e| format!("reading the source's keys: {}", describe(&e)))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut out = Expected::default();
    let mut pending: Vec<&[(i64, String)]> = vec![&keys[..]];
    // Depth first, in key order: a range's rows come before the next one's.
    while let Some(range) = pending.pop() {
        let (Some(first), Some(last)) = (range.first(), range.last()) else {
            continue;
        };
        let sql = query(&format!(" WHERE k >= {} AND k <= {}", first.0, last.0));
        match client.query(&sql, &[]) {
            Ok(rows) => out.rows.extend(rows.iter().map(|r| r.get::<_, String>(0))),
            Err(e) if is_data_error(&e) => {
                if range.len() == 1 {
                    out.failing.push(if table.composite {
                        format!("{},{}", first.0, first.1)
                    } else {
                        first.0.to_string()
                    });
                } else {
                    let (low, high) = range.split_at(range.len() / 2);
                    pending.push(high);
                    pending.push(low);
                }
            }
            Err(e) => return Err(format!("the oracle's query failed: {}", describe(&e))),
        }
    }
    out.failing.sort();
    Ok(out)
}

/// The view's rows as text, in key order.
pub fn view_rows(dest: &TestDb, composite: bool) -> Result<Vec<String>, String> {
    let order = if composite { "k, k2" } else { "k" };
    client(dest)
        .query(
            &format!("SELECT x::text FROM public.tv x ORDER BY {order}"),
            &[],
        )
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .map_err(|e| format!("reading the view: {}", describe(&e)))
}

/// A dead letter: its key (the values joined by `,`), and whether a
/// TRUNCATE of the source applied to the version since made it obsolete
/// (its change is not newer than the version's last TRUNCATE).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Letter {
    /// The key's values joined by `,`.
    pub key: String,
    /// Older than the version's last TRUNCATE.
    pub obsolete: bool,
}

/// The version's dead letters, by key.
pub fn dead_letters(dest: &TestDb, version: &str) -> Result<Vec<Letter>, String> {
    client(dest)
        .query(
            "SELECT array_to_string(d.key, ','),
                    coalesce((d.lsn, d.seq) <= (v.truncated_lsn, v.truncated_seq), false)
               FROM walfill.dead_letters d
               JOIN walfill.versions v USING (target, version)
              WHERE d.target = 'tv' AND d.version = $1",
            &[&version],
        )
        .map(|rows| {
            let mut letters: Vec<Letter> = rows
                .iter()
                .map(|r| Letter {
                    key: r.get(0),
                    obsolete: r.get(1),
                })
                .collect();
            letters.sort();
            letters
        })
        .map_err(|e| format!("reading the dead letters: {}", describe(&e)))
}

/// The view against the expected rows, and the dead letters against the
/// rows the transform fails on: every failing row has one, and every other
/// one is obsolete (older than a TRUNCATE), where `allow_obsolete`.
/// Returns how many obsolete dead letters there are.
pub fn check(
    expected: &Expected,
    dest: &TestDb,
    composite: bool,
    version: &str,
    allow_obsolete: bool,
) -> Result<usize, String> {
    let actual = view_rows(dest, composite)?;
    if expected.rows != actual {
        let missing: Vec<&String> = expected
            .rows
            .iter()
            .filter(|r| !actual.contains(r))
            .take(5)
            .collect();
        let extra: Vec<&String> = actual
            .iter()
            .filter(|r| !expected.rows.contains(r))
            .take(5)
            .collect();
        return Err(format!(
            "the view differs from the transform of the source: {} rows expected ({} keys \
             failing), {} found; missing {missing:?}, unexpected {extra:?}",
            expected.rows.len(),
            expected.failing.len(),
            actual.len()
        ));
    }
    let letters = dead_letters(dest, version)?;
    let keys: Vec<&String> = letters.iter().map(|l| &l.key).collect();
    let absent: Vec<&String> = expected
        .failing
        .iter()
        .filter(|k| !keys.contains(k))
        .take(10)
        .collect();
    let stale: Vec<&Letter> = letters
        .iter()
        .filter(|l| !expected.failing.contains(&l.key))
        .collect();
    // Dead letters older than the version's last TRUNCATE stay until
    // `dead-letters --retry` drops them as obsolete; any other dead letter
    // of a row that does not fail is wrong.
    let wrong: Vec<&&Letter> = stale
        .iter()
        .filter(|l| !(l.obsolete && allow_obsolete))
        .take(10)
        .collect();
    if !absent.is_empty() || !wrong.is_empty() {
        return Err(format!(
            "walfill.dead_letters differs from the rows the transform fails on: {} failing, {} \
             dead letters; failing without a dead letter {absent:?}, dead letters of rows that \
             do not fail {wrong:?}",
            expected.failing.len(),
            letters.len()
        ));
    }
    Ok(stale.len())
}

/// Runs `walfill ARGS` to completion within `timeout`.
pub fn run_timed(walfill: &Walfill, args: &[&str], timeout: Duration) -> Result<Output, String> {
    let mut child = walfill
        .command_env(args, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting walfill {args:?}: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            text
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.join().unwrap_or_default();
            return Err(format!(
                "walfill {args:?} did not finish within {timeout:?}:\n{}",
                tail(&String::from_utf8_lossy(&err))
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The last lines of a log.
pub fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// `walfill verify tv` while a `sync` follows the version: the exit code
/// and the output.
fn verify(walfill: &Walfill) -> Result<(Option<i32>, String), String> {
    let sync = Background::start(walfill, &["sync"]);
    let out = run_timed(walfill, &["verify", "tv"], Duration::from_secs(900));
    drop(sync);
    let out = out?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.code(), text))
}

/// `verify` passes on the version as it is (which the oracle found right),
/// and exits 3 on it with one row changed, one live row added above the
/// source's last key, and one live row removed. `above`: a key above every
/// key the source has had. Leaves the version wrong (a row removed).
/// Returns what the passing `verify` said.
pub fn verify_checks(
    walfill: &Walfill,
    dest: &TestDb,
    transform: &Transform,
    composite: bool,
    above: i64,
) -> Result<String, String> {
    let said = match verify(walfill)? {
        (Some(0), text) => text.lines().last().unwrap_or_default().to_string(),
        (code, text) => {
            return Err(format!(
                "verify failed ({code:?}) on a version equal to the oracle:\n{}",
                tail(&text)
            ))
        }
    };
    let mut c = client(dest);
    let row = c
        .query_one(
            "SELECT format('%I.%I', dest_schema, table_name) FROM walfill.versions
              WHERE target = 'tv' AND phase = 'active'",
            &[],
        )
        .map_err(|e| format!("the active version's table: {}", describe(&e)))?;
    let table: String = row.get(0);
    let exec = |c: &mut postgres::Client, sql: &str| {
        c.batch_execute(sql)
            .map_err(|e| format!("{sql}: {}", describe(&e)))
    };
    let wrong = |what: &str| -> Result<(), String> {
        match verify(walfill)? {
            (Some(3), _) => Ok(()),
            (code, text) => Err(format!(
                "verify exited {code:?} on a version with {what}, expected 3:\n{}",
                tail(&text)
            )),
        }
    };
    let key_of = |k: i64| {
        if composite {
            format!("k = {k} AND k2 = 'x'")
        } else {
            format!("k = {k}")
        }
    };
    // A row changed: an output that is not NULL set to NULL, then restored.
    let outputs = transform.outputs;
    let any: Vec<String> = (1..=outputs).map(|i| format!("o{i} IS NOT NULL")).collect();
    let which: Vec<String> = (1..=outputs)
        .map(|i| format!("WHEN o{i} IS NOT NULL THEN {i}"))
        .collect();
    let live = c
        .query_opt(
            &format!(
                "SELECT k, CASE {} END FROM {table} WHERE NOT _walfill_deleted AND ({})
                  ORDER BY k LIMIT 1",
                which.join(" "),
                any.join(" OR ")
            ),
            &[],
        )
        .map_err(|e| format!("a row to change: {}", describe(&e)))?;
    if let Some(row) = live {
        let (k, i): (i64, i32) = (row.get(0), row.get(1));
        exec(
            &mut c,
            &format!(
                "CREATE TEMP TABLE saved AS SELECT o{i} AS v FROM {table} WHERE {key};
                 UPDATE {table} SET o{i} = NULL WHERE {key}",
                key = key_of(k)
            ),
        )?;
        wrong(&format!("output o{i} of key {k} changed"))?;
        exec(
            &mut c,
            &format!(
                "UPDATE {table} SET o{i} = (SELECT v FROM saved) WHERE {}",
                key_of(k)
            ),
        )?;
    }
    // A live row above the source's last key, then deleted.
    let (columns, values) = if composite {
        ("k, k2", format!("{above}, 'x'"))
    } else {
        ("k", above.to_string())
    };
    exec(
        &mut c,
        &format!(
            "INSERT INTO {table} ({columns}, _walfill_lsn, _walfill_seq) \
             VALUES ({values}, '0/1', 0)"
        ),
    )?;
    wrong(&format!("a live row added under key {above}"))?;
    exec(
        &mut c,
        &format!("DELETE FROM {table} WHERE {}", key_of(above)),
    )?;
    // A live row removed.
    let removed = c
        .query_opt(
            &format!("SELECT k FROM {table} WHERE NOT _walfill_deleted ORDER BY k DESC LIMIT 1"),
            &[],
        )
        .map_err(|e| format!("a row to remove: {}", describe(&e)))?;
    if let Some(row) = removed {
        let k: i64 = row.get(0);
        exec(&mut c, &format!("DELETE FROM {table} WHERE {}", key_of(k)))?;
        wrong(&format!("the live row of key {k} removed"))?;
    }
    Ok(said)
}
