//! What a torture run draws besides its workload: the transform, the
//! databases' locale providers, the collation of the text column, a
//! separate destination database, settings of the databases and of a role
//! of its own (which walfill must pin), and which checks the run makes.
//!
//! The draws come from a generator of their own, seeded by the run's seed,
//! so that a failing seed's draws can be described again from the seed.

use super::transform::{self, Transform};
use crate::support::cluster::{admin_url, connect};
use crate::support::role::Role;
use crate::support::workload::Lcg;
use crate::support::TestDb;

/// A database's default collation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locale {
    /// libc `C`.
    LibcC,
    /// libc `C.UTF-8`.
    LibcUtf8,
    /// ICU `und`.
    Icu,
}

impl Locale {
    const ALL: [Locale; 3] = [Locale::LibcC, Locale::LibcUtf8, Locale::Icu];

    /// `CREATE DATABASE` options.
    pub fn options(self) -> &'static str {
        match self {
            Locale::LibcC => "TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'",
            Locale::LibcUtf8 => "TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8'",
            Locale::Icu => {
                "TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'und' \
                 LOCALE 'C'"
            }
        }
    }

    /// For the report.
    pub fn label(self) -> &'static str {
        match self {
            Locale::LibcC => "libc C",
            Locale::LibcUtf8 => "libc C.UTF-8",
            Locale::Icu => "ICU und",
        }
    }

    fn provider(self) -> char {
        match self {
            Locale::LibcC | Locale::LibcUtf8 => 'c',
            Locale::Icu => 'i',
        }
    }
}

/// Where a setting is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// `ALTER DATABASE source SET`.
    Database,
    /// `ALTER ROLE walfill's role SET`.
    Role,
    /// `ALTER ROLE walfill's role IN DATABASE source SET`.
    RoleInDatabase,
    /// `ALTER DATABASE destination SET` (a separate destination).
    DestDatabase,
    /// `ALTER ROLE walfill's role IN DATABASE destination SET`.
    RoleInDestDatabase,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Database => "source database",
            Level::Role => "role",
            Level::RoleInDatabase => "role in source database",
            Level::DestDatabase => "destination database",
            Level::RoleInDestDatabase => "role in destination database",
        }
    }
}

/// Settings that change what a transform's text means or how values parse
/// and print, with values other than walfill's pins.
const SETTINGS: &[(&str, &[&str])] = &[
    ("transform_null_equals", &["on"]),
    ("array_nulls", &["off"]),
    (
        "DateStyle",
        &["SQL, DMY", "German", "Postgres, YMD", "ISO, DMY"],
    ),
    (
        "IntervalStyle",
        &["sql_standard", "iso_8601", "postgres_verbose"],
    ),
    (
        "TimeZone",
        &["Pacific/Chatham", "Asia/Kathmandu", "America/St_Johns"],
    ),
    ("extra_float_digits", &["-3", "0", "3"]),
    ("standard_conforming_strings", &["off"]),
    ("lc_monetary", &["C.UTF-8", "POSIX"]),
];

/// One setting drawn.
#[derive(Clone, Debug)]
pub struct Setting {
    /// Where.
    pub level: Level,
    /// Name.
    pub name: &'static str,
    /// Value.
    pub value: &'static str,
}

impl Setting {
    /// For the report: where and what (`role TimeZone`).
    pub fn label(&self) -> String {
        format!("{} {}", self.level.label(), self.name)
    }
}

/// Everything a run draws besides its workload.
#[derive(Clone, Debug)]
pub struct Draw {
    /// The source table's name. walfill aliases the source table by its
    /// name where the source evaluates the transform, beside aliases of
    /// its own: `t` is one of them.
    pub table_name: &'static str,
    /// Whether the key is `k, k2`.
    pub composite: bool,
    /// The transform.
    pub transform: Transform,
    /// The source database's default collation.
    pub source: Locale,
    /// A separate destination database, and its default collation.
    pub destination: Option<Locale>,
    /// The collation `a` is declared with (`None`: the default).
    pub collation: Option<&'static str>,
    /// Whether walfill connects as a role of its own.
    pub role: bool,
    /// Settings of the databases and the role.
    pub settings: Vec<Setting>,
    /// `[backfill] transform_on = "destination"` (snapshot runs).
    pub transform_on_destination: bool,
    /// Whether `dead-letters --retry` runs after the final sync.
    pub retry: bool,
    /// Whether `verify` is checked against right and wrong versions.
    pub verify: bool,
    /// `chunk_rows` while `verify` runs: keys per range it compares (each
    /// range waits for the stream to pass its read).
    pub verify_chunk_rows: u32,
}

impl Draw {
    /// The draws of the run with `seed`; `snapshot`: the run builds its
    /// version by a snapshot, `bases`: one that keeps a base snapshot (so
    /// the destination evaluates the transform); `verify_every`: every run checks `verify`
    /// (else one in two).
    pub fn new(seed: u64, snapshot: bool, bases: bool, verify_every: bool) -> Draw {
        let mut rng = Lcg(seed.wrapping_mul(0xd1b5_4a32_d192_ed03) ^ 0x2545_f491_4f6c_dd1d);
        for _ in 0..4 {
            rng.below(2);
        }
        let composite = rng.below(3) == 0;
        let table_name = ["t", "items", "Src Rows"][rng.below(3) as usize];
        // Most copies that may evaluate the transform on the source draw
        // one the source may evaluate.
        let plain = snapshot && !bases && rng.below(8) != 0;
        let transform = transform::draw(&mut rng, composite, plain);
        let source = Locale::ALL[rng.below(3) as usize];
        // A separate destination of another provider never evaluates on the
        // source: rarer where the draw is for the source.
        let destination = (rng.below(if plain { 8 } else { 3 }) == 0).then(|| {
            // Another provider than the source's.
            let others: Vec<Locale> = Locale::ALL
                .into_iter()
                .filter(|l| l.provider() != source.provider())
                .collect();
            others[rng.below(others.len() as u64) as usize]
        });
        let collation = [
            None,
            Some("\"C\""),
            Some("\"POSIX\""),
            Some("\"und-x-icu\""),
        ][rng.below(4) as usize];
        let role = rng.below(3) != 0;
        let mut levels = vec![Level::Database];
        if role {
            levels.extend([Level::Role, Level::RoleInDatabase]);
        }
        if destination.is_some() {
            levels.push(Level::DestDatabase);
            if role {
                levels.push(Level::RoleInDestDatabase);
            }
        }
        let mut settings = Vec::new();
        for level in levels {
            // Half the levels set nothing; the others one to three settings.
            let count = rng.below(6).saturating_sub(2);
            let mut names = Vec::new();
            for _ in 0..count {
                let (name, values) = SETTINGS[rng.below(SETTINGS.len() as u64) as usize];
                if names.contains(&name) {
                    continue;
                }
                names.push(name);
                settings.push(Setting {
                    level,
                    name,
                    value: values[rng.below(values.len() as u64) as usize],
                });
            }
        }
        let transform_on_destination = snapshot && rng.below(8) == 0;
        let retry = rng.below(3) == 0;
        let verify = verify_every || rng.below(2) == 0;
        let verify_chunk_rows = [100, 300, 1000][rng.below(3) as usize];
        Draw {
            table_name,
            composite,
            transform,
            source,
            destination,
            collation,
            role,
            settings,
            transform_on_destination,
            retry,
            verify,
            verify_chunk_rows,
        }
    }

    /// The draws, for a failure's report.
    pub fn describe(&self) -> String {
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|s| format!("{} {}={}", s.level.label(), s.name, s.value))
            .collect();
        format!(
            "table {:?}, select {:?}, where {:?}; source database {}, destination {}, column a \
             collation {}; {}; settings [{}]{}",
            self.table_name,
            self.transform.select,
            self.transform.filter,
            self.source.label(),
            self.destination
                .map(|l| format!("a separate database ({})", l.label()))
                .unwrap_or_else(|| "the source database".into()),
            self.collation.unwrap_or("default"),
            if self.role {
                "a role of its own"
            } else {
                "the admin role"
            },
            settings.join(", "),
            if self.transform_on_destination {
                "; transform_on = \"destination\""
            } else {
                ""
            }
        )
    }

    /// The collations drawn, for the report.
    pub fn collation_labels(&self) -> Vec<String> {
        let mut labels = vec![
            format!("source database {}", self.source.label()),
            format!("column a {}", self.collation.unwrap_or("default")),
        ];
        if let Some(d) = self.destination {
            labels.push(format!("destination database {}", d.label()));
        }
        labels
    }
}

/// A superuser login role of the run (password `pw`), dropped with the
/// guard: declare it before the databases it owns objects in.
pub fn create_role(seed: u64) -> Role {
    let name = format!("wf_tt_{}_{seed}", std::process::id());
    connect(&admin_url())
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN SUPERUSER PASSWORD 'pw'"
        ))
        .expect("creating the run's role");
    Role(name)
}

/// Sets the drawn settings at their levels.
pub fn apply(
    settings: &[Setting],
    source: &TestDb,
    destination: Option<&TestDb>,
    role: Option<&Role>,
) {
    let mut admin = connect(&admin_url());
    for s in settings {
        let role = || &role.expect("a role for a role's setting").0;
        let dest = || &destination.expect("a destination database").name;
        let target = match s.level {
            Level::Database => format!("DATABASE {}", source.name),
            Level::Role => format!("ROLE {}", role()),
            Level::RoleInDatabase => format!("ROLE {} IN DATABASE {}", role(), source.name),
            Level::DestDatabase => format!("DATABASE {}", dest()),
            Level::RoleInDestDatabase => format!("ROLE {} IN DATABASE {}", role(), dest()),
        };
        let sql = format!("ALTER {target} SET {} = '{}'", s.name, s.value);
        admin
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}
