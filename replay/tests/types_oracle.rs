//! Oracle test of `walfill_replay::types`: random values of every supported
//! type are stored by a live PostgreSQL, their on-disk bytes are read back
//! with pageinspect, and `types::output` of those bytes must equal the text
//! the server's output function gives for the same value.
//!
//! Needs `WALFILL_TEST_PG_URL`: a superuser URL of a PostgreSQL 15 server
//! with the pageinspect extension available (`scripts/pg-up.sh` prints one).
//! The test works in a database of its own, dropped at the end.
//!
//! Each value is stored twice in one row: in a `STORAGE PLAIN` column (4-byte
//! varlena headers) and in a default column (1-byte headers for short
//! values), so both header forms are checked; arrays and jsonb lay out their
//! insides relative to a 4-byte header, which the 1-byte form shifts.

#[path = "types_oracle/builtin_values.rs"]
mod builtin_values;
#[path = "types_oracle/containers.rs"]
mod containers;
#[path = "types_oracle/database.rs"]
mod database;
#[path = "types_oracle/strategies.rs"]
mod strategies;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Instant;

use postgres::Client;
use proptest::test_runner::{Config as RunConfig, TestCaseError, TestRunner};
use walfill_replay::types::{output, BaseType, TypeInfo};

use database::{connect, db_message, type_oid, Raw};
use strategies::Param;

/// Values per scalar type and per array type; `PROPTEST_CASES` overrides
/// both for a longer run.
pub(crate) const SCALAR_CASES: u32 = 200;
const ARRAY_CASES: u32 = 100;

pub(crate) fn case_count(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One type under test.
pub(crate) struct Case {
    /// Column type, as SQL.
    pub(crate) sql_type: String,
    /// Type of the parameter (binary); cast to `sql_type` when different.
    pub(crate) param_type: String,
    /// What `output` is told about the column type.
    pub(crate) ty: TypeInfo,
    /// Parameter values.
    pub(crate) values: Param,
    pub(crate) cases: u32,
}

/// Every scalar case (built-ins, an enum, two domains) with the OID of its
/// parameter type.
fn scalar_cases(client: &mut Client) -> Vec<(Case, u32)> {
    let case = |sql: &str, param: &str, ty: TypeInfo, values: Param| Case {
        sql_type: sql.to_string(),
        param_type: param.to_string(),
        ty,
        values,
        cases: case_count(SCALAR_CASES),
    };
    let mut out: Vec<(Case, u32)> = builtin_values::BUILTIN_CASES
        .iter()
        .map(|&(sql, param, oid, base)| {
            (
                case(
                    sql,
                    param,
                    TypeInfo::base(base),
                    builtin_values::values_for(base),
                ),
                oid,
            )
        })
        .collect();

    let mood = type_oid(client, "mood");
    let labels: HashMap<u32, String> = client
        .query(
            "SELECT oid, enumlabel FROM pg_enum WHERE enumtypid = $1",
            &[&mood],
        )
        .expect("pg_enum")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let label_values = strategies::one_of(labels.values().cloned().collect());
    let mood_type = TypeInfo::enum_type(mood, labels);
    out.push((
        case("mood", "text", mood_type.clone(), label_values.clone()),
        25,
    ));
    out.push(containers::composite_case(client, mood_type, label_values));
    let posint = TypeInfo::domain(type_oid(client, "posint"), TypeInfo::base(BaseType::Int4));
    out.push((
        case("posint", "int4", posint, strategies::positive_int4()),
        23,
    ));
    let ltext = TypeInfo::domain(type_oid(client, "ltext"), TypeInfo::base(BaseType::Text));
    out.push((case("ltext", "text", ltext, strategies::text(20)), 25));
    out.extend(containers::range_cases(client));
    out
}

/// The array case over a scalar case: same element values, binary arrays.
fn array_case(client: &mut Client, scalar: &Case, param_oid: u32) -> Case {
    let sql_type = format!("{}[]", scalar.sql_type);
    let oid = type_oid(client, &sql_type);
    // The element type's delimiter: `;` for box, `,` for the others.
    let delimiter: String = client
        .query_one(
            "SELECT typdelim::text FROM pg_type WHERE oid = $1::text::regtype",
            &[&scalar.sql_type],
        )
        .expect("typdelim")
        .get(0);
    Case {
        param_type: format!("{}[]", scalar.param_type),
        ty: TypeInfo::array_of(oid, scalar.ty.clone(), delimiter.as_bytes()[0]),
        values: strategies::array(scalar.values.clone(), param_oid),
        cases: case_count(ARRAY_CASES),
        sql_type,
    }
}

/// Strips the varlena header the tuple used; says whether it was 1 byte.
/// Values the server compressed or moved out of line (rare: generated values
/// are mostly small) are skipped, as decompression is not under test here.
fn strip_header(stored: &[u8]) -> Result<(&[u8], bool), TestCaseError> {
    let first = *stored
        .first()
        .ok_or_else(|| TestCaseError::fail("empty attribute"))?;
    if first == 0x01 || first & 3 == 2 {
        Err(TestCaseError::reject(
            "value compressed or stored out of line",
        ))
    } else if first & 1 == 1 {
        Ok((&stored[1..], true))
    } else {
        Ok((&stored[4..], false))
    }
}

/// Stores generated values of one case and compares; returns the failure
/// report, if any, and how many 1-byte-header values were seen.
fn run_case(client: &mut Client, index: usize, case: &Case) -> (Option<String>, u32) {
    let table = format!("t{index}");
    let mut setup = format!("CREATE TABLE {table} (p {0}, e {0});", case.sql_type);
    if case.ty.is_varlena() {
        setup += &format!("ALTER TABLE {table} ALTER p SET STORAGE PLAIN;");
    }
    client.batch_execute(&setup).expect("create table");
    let cast = if case.param_type == case.sql_type {
        String::new()
    } else {
        format!("::{}", case.sql_type)
    };
    let insert = client
        .prepare(&format!(
            "INSERT INTO {table} SELECT v, v FROM (SELECT $1::{}{cast} AS v) s RETURNING ctid::text",
            case.param_type
        ))
        .expect("prepare insert");
    let fetch = client
        .prepare(&format!(
            "SELECT a.t_attrs, concat(t.p), concat(t.e)
             FROM heap_page_item_attrs(get_raw_page('{table}', $1), '{table}'::regclass) a
             JOIN {table} t ON t.ctid = a.t_ctid
             WHERE a.lp = $2"
        ))
        .expect("prepare fetch");
    let short_headers = Cell::new(0u32);
    let client = RefCell::new(client);
    let mut runner = RunConfig {
        cases: case.cases,
        failure_persistence: None,
        ..RunConfig::default()
    };
    runner.max_shrink_iters = 200;
    let result =
        TestRunner::new(runner).run(&case.values, |param| {
            let mut c = client.borrow_mut();
            let ctid: String = c
                .query_one(&insert, &[&Raw(&param)])
                .map_err(|e| {
                    // A value too big for a plain-storage column is skipped.
                    if e.code() == Some(&postgres::error::SqlState::PROGRAM_LIMIT_EXCEEDED) {
                        return TestCaseError::reject("value too big for an inline column");
                    }
                    TestCaseError::fail(format!(
                        "server rejected parameter {}: {}",
                        hex(&param),
                        db_message(&e)
                    ))
                })?
                .get(0);
            let (blk, lp) = ctid
                .trim_matches(|ch| ch == '(' || ch == ')')
                .split_once(',')
                .and_then(|(b, l)| Some((b.parse::<i64>().ok()?, l.parse::<i16>().ok()?)))
                .ok_or_else(|| TestCaseError::fail(format!("bad ctid {ctid}")))?;
            let row = c
                .query_one(&fetch, &[&blk, &lp])
                .map_err(|e| TestCaseError::fail(db_message(&e)))?;
            let attrs: Vec<Option<Vec<u8>>> = row.get(0);
            let expected: String = row.get(1);
            assert_eq!(expected, row.get::<_, String>(2));
            for (column, stored) in attrs.iter().enumerate() {
                let stored = stored
                    .as_deref()
                    .ok_or_else(|| TestCaseError::fail("NULL attribute"))?;
                let datum = if case.ty.is_varlena() {
                    let (payload, short) = strip_header(stored)?;
                    if short {
                        short_headers.set(short_headers.get() + 1);
                    }
                    payload
                } else {
                    stored
                };
                let got = output(&case.ty, datum);
                if got.as_deref() != Ok(expected.as_str()) {
                    return Err(TestCaseError::fail(format!(
                    "column {} ({}), parameter {}, stored {}: PostgreSQL printed {expected:?}, \
                     output gave {got:?}",
                    if column == 0 { "plain" } else { "default storage" },
                    case.sql_type,
                    hex(&param),
                    hex(stored),
                )));
                }
            }
            Ok(())
        });
    let report = result.err().map(|e| format!("{}: {e}", case.sql_type));
    (report, short_headers.get())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The built-in table of `TypeInfo` agrees with `pg_type`.
fn check_builtin_layouts(client: &mut Client) -> Vec<String> {
    let mut problems = Vec::new();
    for base in BaseType::ALL {
        for oid in [base.oid(), base.array_oid()] {
            let ty = TypeInfo::builtin(oid).expect("builtin");
            let row = client
                .query_one(
                    "SELECT t.typlen, t.typbyval, t.typalign::text, t.typarray, t.typelem,
                            t.typdelim::text, p.prosrc
                     FROM pg_type t JOIN pg_proc p ON p.oid = t.typoutput WHERE t.oid = $1",
                    &[&oid],
                )
                .expect("pg_type row");
            let (len, byval, align): (i16, bool, String) = (row.get(0), row.get(1), row.get(2));
            let align_ok =
                walfill_replay::types::Align::from_code(align.as_bytes()[0]) == Some(ty.align);
            if len != ty.len || byval != ty.byval || !align_ok {
                problems.push(format!("layout of {oid} differs from pg_type"));
            }
            if oid == base.oid() && row.get::<_, u32>(3) != base.array_oid() {
                problems.push(format!("array type of {oid} differs from pg_type"));
            }
            if oid == base.array_oid() && row.get::<_, u32>(4) != base.oid() {
                problems.push(format!("element of {oid} differs from pg_type"));
            }
            if oid == base.oid() && row.get::<_, String>(6) != base.output_function() {
                problems.push(format!("output function of {oid} differs from pg_type"));
            }
            if row.get::<_, String>(5) != char::from(base.delimiter()).to_string() {
                problems.push(format!("delimiter of {oid} differs from pg_type"));
            }
        }
    }
    problems
}

#[test]
fn output_matches_postgresql() {
    let started = Instant::now();
    let (db, mut client) = connect();
    let mut failures = check_builtin_layouts(&mut client);

    let scalars = scalar_cases(&mut client);
    let mut cases = Vec::new();
    for (scalar, param_oid) in &scalars {
        cases.push(array_case(&mut client, scalar, *param_oid));
    }
    cases.splice(0..0, scalars.into_iter().map(|(c, _)| c));

    for (i, case) in cases.iter().enumerate() {
        let (report, short_headers) = run_case(&mut client, i, case);
        failures.extend(report);
        // Types stored PLAIN (int2vector, oidvector) never get 1-byte headers.
        let packable = client
            .query_one(
                "SELECT typstorage <> 'p' FROM pg_type WHERE oid = $1::text::regtype",
                &[&case.sql_type],
            )
            .expect("typstorage")
            .get::<_, bool>(0);
        if case.ty.is_varlena() && packable && short_headers == 0 {
            failures.push(format!(
                "{}: no value was stored with a 1-byte header",
                case.sql_type
            ));
        }
    }
    drop(client);
    drop(db);
    eprintln!("{} types checked in {:.1?}", cases.len(), started.elapsed());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
