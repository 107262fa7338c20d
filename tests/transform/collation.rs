//! Collations of columns and databases: a transform means the same on either side, or is refused where it cannot

use super::*;

/// The collation of the view's column `column` (of `view`'s version table).
fn column_collation(db: &TestDb, table: &str, column: &str) -> Option<String> {
    db.value(&format!(
        "SELECT CASE WHEN attcollation = 0 THEN '' ELSE attcollation::regcollation::text END
           FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = '{column}'"
    ))
}

/// A column collated `C` in a database whose default is `C.UTF-8`: the
/// copy (evaluated on the source or in the destination), the stream and
/// `verify` all give `upper()` and `<` under `C`, as the source does.
fn a_column_collation_holds(transform_on: &str) {
    let db = TestDb::with_options("tx_coll", "TEMPLATE template0 LOCALE 'C.UTF-8'");
    db.exec(
        "CREATE TABLE people (id int PRIMARY KEY, name text COLLATE \"C\");
         INSERT INTO people VALUES (1, 'émile'), (2, 'zoë'), (3, 'andré');",
    );
    let select = "id, upper(name) AS uname, name < 'b' AS before_b";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\ntransform_on = \"{transform_on}\"\n\n{}",
            target("people_up", "public.people", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "people_up"]);
    assert_eq!(
        db.value("SELECT uname FROM people_up WHERE id = 1")
            .as_deref(),
        Some("éMILE"),
        "upper() under the column's collation C"
    );
    assert_view_matches(&db, "public.people_up", "people", select, None, "id");

    db.exec(
        "UPDATE people SET name = 'andré!' WHERE id = 3;
         INSERT INTO people VALUES (4, 'éa'), (5, 'Ärger');",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.people_up", "people", select, None, "id");
    verify(&walfill, "people_up").expect("verify passes");
    assert_eq!(
        column_collation(&db, "people_up__v1", "uname").as_deref(),
        Some("\"C\""),
        "the output keeps the collation it has on the source"
    );
}

#[test]
fn a_column_collation_holds_when_the_source_evaluates() {
    a_column_collation_holds("auto");
}

#[test]
fn a_column_collation_holds_when_the_destination_evaluates() {
    a_column_collation_holds("destination");
}

/// A column whose collation the destination has no match for (the same
/// provider, locale and version): passing it through is exact, anything
/// that depends on the collation is refused by `setup`, naming the column
/// and the collation.
#[test]
fn a_collation_the_destination_lacks_is_refused_where_it_matters() {
    let src = TestDb::new("tx_nomatch_src");
    let dest = TestDb::new("tx_nomatch_dst");
    src.exec(
        "CREATE COLLATION upper_first (provider = icu, locale = 'und-u-kf-upper');
         CREATE TABLE names (id int PRIMARY KEY, name text COLLATE upper_first);
         INSERT INTO names VALUES (1, 'b'), (2, 'B'), (3, 'a');",
    );
    let config = |select: &str| {
        format!(
            "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n{}",
            src.url(),
            dest.url(),
            target("names_t", "public.names", select, None)
        )
    };
    let refused = Walfill::with_text(&config("id, name, name < 'b' AS early"));
    let out = refused.run(&["setup"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("column \"name\" (collation \"upper_first\" (ICU und-u-kf-upper")
            && stderr.contains("text_lt"),
        "{stderr}"
    );
    let select = "id, name, length(name) AS len";
    let passed = Walfill::with_text(&config(select));
    passed.ok(&["setup"]);
    passed.ok(&["backfill", "names_t"]);
    assert_view_matches_in(&src, &dest, "public.names_t", "names", select, None, "id");
}
