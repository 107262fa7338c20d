//! The random workload of a torture run: transactions of row changes
//! (with subtransactions, rollbacks and 2PC) and schema changes, on a table
//! whose names the run keeps track of.

use postgres::Client;

use crate::support::workload::Lcg;

/// Schema changes a run can make, named in its report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ddl {
    /// A column added without a default.
    AddColumn,
    /// A column added with a default existing rows take (not read by the
    /// transform).
    AddColumnDefault,
    /// A column the transform reads dropped and added again, same name.
    DropReAdd,
    /// A column the transform reads renamed (and, before the backfill,
    /// renamed back).
    RenameColumn,
    /// A column retyped with a table rewrite (the transform reads it:
    /// replay must be refused).
    RetypeRewrite,
    /// A column the transform does not read retyped with a rewrite.
    RetypeUnread,
    /// A column the transform does not read dropped.
    DropUnread,
    /// `REPLICA IDENTITY FULL` or back to `DEFAULT`.
    ReplicaIdentity,
    /// `SET STORAGE` of the TOASTable column.
    SetStorage,
    /// The table renamed (and a new table created under the old name).
    RenameTable,
}

impl Ddl {
    /// Whether a replay of history holding this change may be refused
    /// (values changed without row changes).
    pub fn blocks_replay(self) -> bool {
        matches!(self, Ddl::RetypeRewrite)
    }
}

/// The source table as the run knows it: its current name, and the current
/// name of each column the transform reads (by its name at plan time).
#[derive(Clone, Debug)]
pub struct Table {
    /// Schema.
    pub schema: String,
    /// Current name.
    pub name: String,
    /// `(name at plan time, name now)` of each column.
    pub columns: Vec<(String, String)>,
    /// Whether the key has a second column.
    pub composite: bool,
    /// Next key to insert.
    pub next_key: i64,
    /// Counter for new column names.
    pub added: u32,
    /// The collation the text column `a` is declared with (`None`: the
    /// database's default), as SQL (`"C"`).
    pub collation: Option<String>,
}

impl Table {
    /// `"schema"."name"`.
    pub fn quoted(&self) -> String {
        format!("\"{}\".\"{}\"", self.schema, self.name)
    }

    /// The current name of the column called `original` at plan time.
    pub fn col(&self, original: &str) -> String {
        self.columns
            .iter()
            .find(|(o, _)| o == original)
            .map(|(_, now)| now.clone())
            .unwrap_or_else(|| original.to_string())
    }

    /// The table's rows as the transform sees them: columns under their
    /// names at plan time.
    pub fn as_planned(&self) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|(o, now)| format!("\"{now}\" AS \"{o}\""))
            .collect();
        format!("(SELECT {} FROM {})", cols.join(", "), self.quoted())
    }
}

/// The columns the table starts with (the transform reads them all).
pub const COLUMNS: [&str; 9] = ["k", "a", "b", "c", "d", "e", "f", "g", "h"];

/// `CREATE TABLE` for a run.
pub fn create(table: &Table) -> String {
    let key2 = if table.composite {
        ", k2 text NOT NULL DEFAULT 'x'"
    } else {
        ""
    };
    let pk = if table.composite { "k, k2" } else { "k" };
    let collate = table
        .collation
        .as_ref()
        .map(|c| format!(" COLLATE {c}"))
        .unwrap_or_default();
    format!(
        "CREATE TABLE {} (k bigint NOT NULL{key2}, a text{collate}, b int, c numeric, d date, \
         e timestamptz, f float8, g interval, h bytea, x int, PRIMARY KEY ({pk}))",
        table.quoted()
    )
}

/// A value of `a`: short, or long and incompressible (stored out of line).
fn text_value(rng: &mut Lcg) -> String {
    match rng.below(4) {
        0 => "NULL".into(),
        1 => format!(
            "(SELECT string_agg(md5(i::text || '{}'), '') FROM generate_series(1, {}) i)",
            rng.below(1_000_000),
            40 + rng.below(160)
        ),
        _ => format!("'t{}''s \\\\ é'", rng.below(10_000)),
    }
}

/// The other columns' values, unambiguous whatever the session's settings.
fn values(rng: &mut Lcg) -> String {
    format!(
        "{}, {}, {}.{}, '{}-{:02}-{:02}'::date, '2024-03-{:02} {:02}:{:02}:{:02}.{}+0{}'::timestamptz, \
         {}, '{} days {} hours'::interval, '\\x{:06x}'::bytea",
        text_value(rng),
        rng.below(1000) as i64 - 300,
        rng.below(100_000),
        rng.below(100),
        2000 + rng.below(30),
        1 + rng.below(12),
        1 + rng.below(28),
        1 + rng.below(28),
        rng.below(24),
        rng.below(60),
        rng.below(60),
        rng.below(1_000_000),
        rng.below(9),
        [
            "0.1",
            "1e-300",
            "-0",
            "3.141592653589793",
            "'NaN'",
            "'Infinity'",
            "1.5e20"
        ][rng.below(7) as usize],
        rng.below(40),
        rng.below(24),
        rng.below(0xff_ffff)
    )
}

/// Runs one random transaction on `table` (1 to 5 statements, maybe a
/// savepoint rolled back, maybe rolled back whole or two-phase).
pub fn transaction(client: &mut Client, table: &mut Table, rng: &mut Lcg, keys: i64) {
    let t = table.quoted();
    let (k, a, b) = (table.col("k"), table.col("a"), table.col("b"));
    let mut sql = vec!["BEGIN".to_string()];
    let mut savepoint = false;
    for _ in 0..=rng.below(5) {
        if !savepoint && rng.below(6) == 0 {
            sql.push("SAVEPOINT s".into());
            savepoint = true;
        }
        let key = 1 + rng.below(keys.max(1) as u64) as i64;
        let key2 = if table.composite { ", 'x'" } else { "" };
        sql.push(match rng.below(12) {
            0..=2 => {
                table.next_key += 1;
                format!(
                    "INSERT INTO {t} (\"{k}\"{}, \"{a}\", \"{b}\", c, d, e, f, g, h) VALUES ({}{key2}, {})",
                    if table.composite { ", k2" } else { "" },
                    table.next_key,
                    values(rng)
                )
            }
            3..=5 => format!("UPDATE {t} SET \"{b}\" = \"{b}\" + 1, f = -f WHERE \"{k}\" = {key}"),
            6 => format!("UPDATE {t} SET \"{a}\" = {} WHERE \"{k}\" = {key}", text_value(rng)),
            7 | 8 => format!("DELETE FROM {t} WHERE \"{k}\" = {key}"),
            9 => {
                table.next_key += 1;
                format!("UPDATE {t} SET \"{k}\" = {} WHERE \"{k}\" = {key}", table.next_key)
            }
            10 => format!("UPDATE {t} SET x = coalesce(x, 0) + 1 WHERE \"{k}\" % 7 = {}", key % 7),
            _ if rng.below(8) == 0 => format!("TRUNCATE {t}"),
            _ => format!("UPDATE {t} SET d = d + 1 WHERE \"{k}\" = {key}"),
        });
        if savepoint && rng.below(3) == 0 {
            sql.push(if rng.below(2) == 0 {
                "ROLLBACK TO SAVEPOINT s".into()
            } else {
                "RELEASE SAVEPOINT s".into()
            });
            savepoint = false;
        }
    }
    // A prepared transaction ends in a statement of its own (it cannot run
    // in the string that prepared it).
    let mut finish = None;
    match rng.below(10) {
        0 => sql.push("ROLLBACK".into()),
        1 => {
            let gid = format!("tt_{}_{}", table.name, rng.below(u64::MAX));
            sql.push(format!("PREPARE TRANSACTION '{gid}'"));
            finish = Some(if rng.below(3) == 0 {
                format!("ROLLBACK PREPARED '{gid}'")
            } else {
                format!("COMMIT PREPARED '{gid}'")
            });
        }
        _ => sql.push("COMMIT".into()),
    }
    let text = sql.join(";\n");
    let result = client.batch_execute(&text);
    if let (Ok(()), Some(finish)) = (&result, finish) {
        client
            .batch_execute(&finish)
            .expect("ending a prepared transaction");
    }
    if let Err(e) = result {
        // A key change onto an existing key, say: the transaction is gone.
        let _ = client.batch_execute("ROLLBACK");
        let unique = e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION);
        let message = e
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or(e.to_string());
        assert!(unique, "{message}\nin: {text}");
    }
}

/// Sets session settings that change how values print and parse (the
/// statements' literals are written for `standard_conforming_strings = on`,
/// which a database of the run may set otherwise).
pub fn vary_settings(client: &mut Client, rng: &mut Lcg) {
    let date = ["ISO, MDY", "SQL, DMY", "German", "Postgres, YMD"][rng.below(4) as usize];
    let interval =
        ["postgres", "sql_standard", "iso_8601", "postgres_verbose"][rng.below(4) as usize];
    let zone = [
        "UTC",
        "Asia/Kathmandu",
        "America/St_Johns",
        "Pacific/Chatham",
    ][rng.below(4) as usize];
    let digits = rng.below(4) as i64 - 2;
    client
        .batch_execute(&format!(
            "SET DateStyle = '{date}'; SET IntervalStyle = '{interval}'; SET TimeZone = '{zone}'; \
             SET extra_float_digits = {digits}; SET standard_conforming_strings = on"
        ))
        .expect("session settings");
}

/// Makes schema change `ddl`; `planned` says whether the version's plan is
/// made already (so a column it reads keeps existing under some name).
/// Returns the statements run.
pub fn ddl(
    client: &mut Client,
    table: &mut Table,
    ddl: Ddl,
    planned: bool,
    rng: &mut Lcg,
) -> String {
    let t = table.quoted();
    let sql = match ddl {
        Ddl::AddColumn => {
            table.added += 1;
            format!("ALTER TABLE {t} ADD COLUMN n{} text", table.added)
        }
        Ddl::AddColumnDefault => {
            table.added += 1;
            format!("ALTER TABLE {t} ADD COLUMN n{} int DEFAULT 25", table.added)
        }
        Ddl::DropReAdd => {
            let h = table.col("h");
            format!("ALTER TABLE {t} DROP COLUMN \"{h}\"; ALTER TABLE {t} ADD COLUMN \"{h}\" bytea")
        }
        Ddl::RenameColumn => {
            let a = table.col("a");
            let renamed = format!("{a}_r");
            let sql = format!("ALTER TABLE {t} RENAME COLUMN \"{a}\" TO \"{renamed}\"");
            if planned {
                set_col(table, "a", &renamed);
                sql
            } else {
                // Renamed and back, with a write in between.
                let k = table.col("k");
                format!(
                    "{sql}; UPDATE {t} SET \"{renamed}\" = \"{renamed}\" || '!' WHERE \"{k}\" % 5 = 1; \
                     ALTER TABLE {t} RENAME COLUMN \"{renamed}\" TO \"{a}\""
                )
            }
        }
        Ddl::RetypeRewrite => {
            let b = table.col("b");
            format!("ALTER TABLE {t} ALTER COLUMN \"{b}\" TYPE bigint")
        }
        Ddl::RetypeUnread => format!("ALTER TABLE {t} ALTER COLUMN x TYPE bigint USING x::bigint"),
        Ddl::DropUnread => {
            table.added += 1;
            let n = table.added;
            format!("ALTER TABLE {t} ADD COLUMN n{n} int; ALTER TABLE {t} DROP COLUMN n{n}")
        }
        Ddl::ReplicaIdentity => {
            if rng.below(2) == 0 {
                format!("ALTER TABLE {t} REPLICA IDENTITY FULL")
            } else {
                format!("ALTER TABLE {t} REPLICA IDENTITY DEFAULT")
            }
        }
        Ddl::SetStorage => {
            let a = table.col("a");
            let storage = ["PLAIN", "EXTERNAL", "EXTENDED", "MAIN"][rng.below(4) as usize];
            format!("ALTER TABLE {t} ALTER COLUMN \"{a}\" SET STORAGE {storage}")
        }
        Ddl::RenameTable => {
            let old = table.name.clone();
            let renamed = format!("{old}_r");
            table.name = renamed.clone();
            let mut sql = format!("ALTER TABLE {t} RENAME TO \"{renamed}\"");
            if planned {
                // A new table under the old name, which the version must
                // not follow.
                let newcomer = Table {
                    name: old,
                    ..table.clone()
                };
                sql.push_str(&format!(
                    "; {}; INSERT INTO {} (k, a) VALUES (-1, 'newcomer')",
                    create(&newcomer).replace("\"k\"", "k"),
                    newcomer.quoted()
                ));
            }
            sql
        }
    };
    if let Err(e) = client.batch_execute(&sql) {
        let message = e
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or(e.to_string());
        panic!("{message}\nin: {sql}");
    }
    sql
}

fn set_col(table: &mut Table, original: &str, now: &str) {
    if let Some(c) = table.columns.iter_mut().find(|(o, _)| o == original) {
        c.1 = now.to_string();
    }
}
