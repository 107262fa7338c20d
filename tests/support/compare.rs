//! The check every end-to-end test ends with: the view equals the transform
//! of the source table, computed by PostgreSQL, row by row.

use super::TestDb;

/// Session settings that change how values are rendered as text or what a
/// transform means, pinned on both sides of a comparison as walfill pins
/// them, so a database with other defaults (DateStyle, transform_null_equals,
/// say) compares by value and by the transform's pinned meaning.
pub const PINNED_SETTINGS: &str = "SET DateStyle = 'ISO, MDY'; SET IntervalStyle = postgres; \
     SET TimeZone = 'UTC'; SET extra_float_digits = 1; SET bytea_output = hex; \
     SET transform_null_equals = off; SET array_nulls = on; SET lc_numeric = 'C'; \
     SET lc_time = 'C'; SET lc_monetary = 'C'; SET quote_all_identifiers = off; \
     SET default_text_search_config = 'pg_catalog.simple'";

/// A new connection to `db` with [`PINNED_SETTINGS`] applied.
pub fn pinned_client(db: &TestDb) -> postgres::Client {
    let mut client = db.client();
    client
        .batch_execute(PINNED_SETTINGS)
        .unwrap_or_else(|e| panic!("pinning the session's settings: {e}"));
    client
}

fn rows(db: &TestDb, sql: &str) -> Vec<String> {
    pinned_client(db)
        .query(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Asserts `view` in `dest` holds exactly `SELECT select FROM source WHERE
/// filter` computed in `source_db`, ordered by `key` on both sides.
pub fn assert_view_matches_in(
    source_db: &TestDb,
    dest: &TestDb,
    view: &str,
    source: &str,
    select: &str,
    filter: Option<&str>,
    key: &str,
) {
    let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
    let expected = rows(
        source_db,
        &format!("SELECT t::text FROM (SELECT {select} FROM {source}{filter}) t ORDER BY t.{key}"),
    );
    let actual = rows(
        dest,
        &format!("SELECT t::text FROM {view} t ORDER BY t.{key}"),
    );
    compare(view, source, &expected, &actual);
}

/// Asserts `view` holds exactly `SELECT select FROM source WHERE filter`,
/// ordered by `key` on both sides.
pub fn assert_view_matches(
    db: &TestDb,
    view: &str,
    source: &str,
    select: &str,
    filter: Option<&str>,
    key: &str,
) {
    assert_view_matches_in(db, db, view, source, select, filter, key);
}

fn compare(view: &str, source: &str, expected: &[String], actual: &[String]) {
    if expected == actual {
        return;
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|r| !actual.contains(r))
        .take(10)
        .collect();
    let extra: Vec<&String> = actual
        .iter()
        .filter(|r| !expected.contains(r))
        .take(10)
        .collect();
    panic!(
        "view {view} differs from the transform of {source}: {} rows expected, {} found\n\
         missing (first 10): {missing:#?}\nunexpected (first 10): {extra:#?}",
        expected.len(),
        actual.len()
    );
}
