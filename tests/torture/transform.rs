//! The transform of a torture run, drawn from a small grammar over the
//! table's columns (by their names at plan time): the key first and as it
//! is, then 2 to 6 outputs `AS o1`, `AS o2`...; and maybe a filter.
//!
//! The expressions cover what a transform means: functions whose results
//! depend on the column's collation, settings that change how values parse
//! and print (all pinned by walfill), NULL comparisons, array literals,
//! JSON, and arithmetic or casts that fail on some rows (dead letters),
//! alone or guarded by a `CASE` or by the filter.
//!
//! An expression that can fail fails on a minority of rows: a batch whose
//! every row (3 or more) fails is a broken transform, not dead letters.
//! None fails on the rows of the long run's large transaction (`a = 'big'`,
//! `b = 1`, the other columns NULL), whose pieces are stored unguarded.

use crate::support::workload::Lcg;

/// How often an expression fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fails {
    /// Never.
    Never,
    /// On a few rows (up to about 7%).
    Rarely,
    /// On up to about 15% of rows.
    Often,
}

/// An expression of the grammar.
struct Expr {
    sql: &'static str,
    fails: Fails,
    /// Whether a snapshot copy may evaluate it on the source: built-in
    /// immutable functions and operators, or the few stable ones that read
    /// only `TimeZone` (README, "Where the transform runs").
    plain: bool,
}

const fn never(sql: &'static str) -> Expr {
    Expr {
        sql,
        fails: Fails::Never,
        plain: true,
    }
}

/// An expression that calls a stable function (a cast through text, say).
const fn stable(sql: &'static str) -> Expr {
    Expr {
        sql,
        fails: Fails::Never,
        plain: false,
    }
}

/// Columns as they are.
const PLAIN: &[Expr] = &[
    never("a"),
    never("b"),
    never("c"),
    never("d"),
    never("e"),
    never("f"),
    never("g"),
    never("h"),
    never("md5(coalesce(a, '-'))"),
    never("length(a)"),
    never("b * 2"),
    never("round(c, 1)"),
    never("c / 3"),
    never("f * 3"),
];

/// Text functions and comparisons whose results depend on the collation of
/// `a` (values like `t123's \\ é`, `row 7`, long md5 strings, NULL).
const COLLATION: &[Expr] = &[
    never("upper(a)"),
    never("lower(a)"),
    never("initcap(a)"),
    never("a < 'm'"),
    never("initcap(a) < 'n'"),
    never("a LIKE 't1%'"),
    never("a ~ '^t[0-9]+'"),
    never("a ~* 'É'"),
    never("a ILIKE '%É'"),
    never("GREATEST(a, 'n')"),
    never("LEAST(initcap(a), 'S')"),
    never("upper(a) > lower(a)"),
];

/// NULL handling: `x = NULL` is NULL under the pinned
/// `transform_null_equals = off`.
const NULLS: &[Expr] = &[
    never("a = NULL"),
    never("b = NULL"),
    never("CASE WHEN a = NULL THEN 'eq' ELSE 'ne' END"),
    never("(a = NULL) IS NULL"),
    never("COALESCE(a, 'none')"),
    never("COALESCE(f, -1)"),
    never("NULLIF(b % 3, 0)"),
    never("NULLIF(a, '')"),
];

/// Arrays, literal ones parsed under the pinned `array_nulls = on`.
const ARRAYS: &[Expr] = &[
    never("array_remove('{x,NULL}'::text[], NULL)"),
    never("ARRAY[b, 1]"),
    never("'{1,NULL}'::int[]"),
    never("ARRAY[a, 'NULL']"),
    never("array_length(ARRAY[b, NULL], 1)"),
];

/// Values whose parsing or printing depends on settings walfill pins
/// (`DateStyle`, `IntervalStyle`, `TimeZone`, `extra_float_digits`,
/// `lc_monetary`, `standard_conforming_strings`), and JSON.
const SETTINGS: &[Expr] = &[
    never("date_trunc('day', e)"),
    never("e::date"),
    never("extract(hour from e)"),
    never("e + g"),
    never("d + 1"),
    stable("d::text"),
    stable("e::text"),
    stable("g::text"),
    stable("f::text"),
    stable("b::money"),
    never("d > '02/03/2010'"),
    never("e < '2024-03-15 12:00'"),
    never("g + '-1 2:03:04'"),
    stable("to_char(e, 'YYYY-MM-DD HH24:MI TZ')"),
    never("h || '\\x00ff'::bytea"),
    never("position('\\' in a)"),
    never("replace(a, '''', '\"')"),
    stable("jsonb_build_object('b', b) ->> 'b'"),
    stable("jsonb_build_object('a', a, 'e', e)"),
    stable("to_jsonb(f)"),
];

/// Expressions guarded by a `CASE`: they never fail.
const GUARDED: &[Expr] = &[
    never("CASE WHEN b % 7 <> 0 THEN 100 / (b % 7) END"),
    never("CASE WHEN b >= 0 THEN sqrt(b) END"),
];

/// Expressions that fail on some rows (class 22: division by zero,
/// underflow, a square root of a negative number, a failed cast).
const FAILING: &[Expr] = &[
    Expr {
        sql: "100 / (b % 7)",
        fails: Fails::Often,
        plain: true,
    },
    Expr {
        sql: "f * f",
        fails: Fails::Often,
        plain: true,
    },
    Expr {
        sql: "CASE WHEN a ~ '^[0-9]' THEN left(a, 5)::numeric END",
        fails: Fails::Often,
        plain: false,
    },
    Expr {
        sql: "sqrt(b + 250)",
        fails: Fails::Rarely,
        plain: true,
    },
    Expr {
        sql: "make_date(2020, 2, (1 + abs(b) % 30)::int)",
        fails: Fails::Rarely,
        plain: true,
    },
    Expr {
        sql: "('2021-02-' || (1 + abs(b) % 30))::date",
        fails: Fails::Rarely,
        plain: false,
    },
    Expr {
        sql: "CASE WHEN a ~ '^t[0-9]' THEN substring(a from 2 for 4)::int END",
        fails: Fails::Rarely,
        plain: false,
    },
];

/// A filter, with the expression it guards (added to the select list when
/// the filter is drawn).
struct Filter {
    sql: &'static str,
    guards: Option<&'static str>,
    fails: Fails,
}

const FILTERS: &[Filter] = &[
    Filter {
        sql: "b % 5 <> 0",
        guards: None,
        fails: Fails::Never,
    },
    Filter {
        sql: "b % 7 <> 0",
        guards: Some("100 / (b % 7)"),
        fails: Fails::Never,
    },
    Filter {
        sql: "b >= 0",
        guards: Some("sqrt(b)"),
        fails: Fails::Never,
    },
    Filter {
        sql: "a ~ '^t[0-9]{4}'",
        guards: Some("substring(a from 2 for 4)::int"),
        fails: Fails::Never,
    },
    Filter {
        sql: "initcap(a) < 'n'",
        guards: None,
        fails: Fails::Never,
    },
    Filter {
        sql: "a ~ '^t[0-9]+' OR a IS NULL",
        guards: None,
        fails: Fails::Never,
    },
    Filter {
        sql: "(a = NULL) IS NULL",
        guards: None,
        fails: Fails::Never,
    },
    Filter {
        sql: "d > '02/03/2010'",
        guards: None,
        fails: Fails::Never,
    },
    Filter {
        sql: "e < '2024-03-15 12:00'",
        guards: None,
        fails: Fails::Never,
    },
    Filter {
        sql: "k % 3 <> 1",
        guards: None,
        fails: Fails::Never,
    },
    // A filter that fails itself: the row is a dead letter.
    Filter {
        sql: "sqrt(b + 250) > 10",
        guards: None,
        fails: Fails::Rarely,
    },
];

/// A drawn transform.
#[derive(Clone, Debug)]
pub struct Transform {
    /// The select list, key first.
    pub select: String,
    /// The filter, if any.
    pub filter: Option<String>,
    /// How many outputs follow the key (`o1` to `oN`).
    pub outputs: usize,
    /// Whether some rows may fail it.
    pub may_fail: bool,
}

/// Draws the transform of a table (`composite`: the key is `k, k2`);
/// `plain`: of expressions a copy may evaluate on the source only.
pub fn draw(rng: &mut Lcg, composite: bool, plain: bool) -> Transform {
    let mut outputs: Vec<&'static str> = Vec::new();
    let (mut often, mut rarely) = (false, false);
    let filter = if rng.below(3) != 0 {
        let mut f = &FILTERS[rng.below(FILTERS.len() as u64) as usize];
        // The guarded cast through text is one the source never evaluates.
        if plain && f.guards.is_some_and(|g| g.contains("::")) {
            f = &FILTERS[0];
        }
        rarely |= f.fails == Fails::Rarely;
        if let Some(g) = f.guards {
            outputs.push(g);
        }
        Some(f.sql.to_string())
    } else {
        None
    };
    let wanted = 2 + rng.below(5) as usize;
    let mut attempts = 0;
    while outputs.len() < wanted && attempts < 100 {
        attempts += 1;
        let pool = match rng.below(16) {
            0..=2 => PLAIN,
            3..=6 => COLLATION,
            7..=8 => NULLS,
            9 => ARRAYS,
            10..=12 => SETTINGS,
            13 => GUARDED,
            _ => FAILING,
        };
        let e = &pool[rng.below(pool.len() as u64) as usize];
        if plain && !e.plain {
            continue;
        }
        // At most one expression that fails often and one that fails
        // rarely: together they keep failing rows a minority.
        match e.fails {
            Fails::Often if often => continue,
            Fails::Rarely if rarely => continue,
            Fails::Often => often = true,
            Fails::Rarely => rarely = true,
            Fails::Never => {}
        }
        if outputs.contains(&e.sql) {
            continue;
        }
        outputs.push(e.sql);
    }
    let key = if composite { "k, k2" } else { "k" };
    let named: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{e} AS o{}", i + 1))
        .collect();
    Transform {
        select: format!("{key}, {}", named.join(", ")),
        filter,
        outputs: outputs.len(),
        may_fail: often || rarely,
    }
}

/// `text` as the content of a TOML basic string.
pub fn toml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}
