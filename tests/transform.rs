//! What a transform means: what the same `SELECT` means when run on the
//! source table itself, with the columns' own collations and walfill's
//! pinned settings (parse-time ones included), on every path. Rows the
//! filter rejects never reach the select list; a row the transform fails on
//! is a dead letter, never a stopped stream.

use std::time::Duration;

use crate::support::service::verify_followed as verify;
use crate::support::service::{wait_for, Service};
use crate::support::{assert_view_matches, assert_view_matches_in, TestDb, Walfill};

fn target(name: &str, source: &str, select: &str, filter: Option<&str>) -> String {
    format!(
        "[[target]]\nname = \"{name}\"\nsource = \"{source}\"\nselect = \"{select}\"\n{}\
         version = \"v1\"\n",
        filter
            .map(|f| format!("where = \"{f}\"\n"))
            .unwrap_or_default()
    )
}

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

/// `transform_null_equals` and `array_nulls` set on the source database
/// change how the transform's text parses there: walfill pins them in every
/// session, so the copy (evaluated on the source) and the stream (in the
/// destination) agree with the pinned meaning.
#[test]
fn parse_settings_of_a_database_do_not_change_a_transform() {
    let src = TestDb::new("tx_parse_src");
    let dest = TestDb::new("tx_parse_dst");
    src.exec(&format!(
        "CREATE TABLE notes (id int PRIMARY KEY, note text);
         INSERT INTO notes SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' || g END
           FROM generate_series(1, 300) g;
         ALTER DATABASE {0} SET transform_null_equals = on;
         ALTER DATABASE {0} SET array_nulls = off;",
        src.name
    ));
    let select = "id, CASE WHEN note = NULL THEN 'none' ELSE note END AS n, \
                  array_remove('{a,NULL}'::text[], NULL) AS arr";
    let walfill = Walfill::with_text(&format!(
        "[source]\nurl = \"{}\"\n[destination]\nurl = \"{}\"\n\n{}",
        src.url(),
        dest.url(),
        target("notes_n", "public.notes", select, None)
    ));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "notes_n"]);
    assert_view_matches_in(&src, &dest, "public.notes_n", "notes", select, None, "id");
    assert_eq!(
        dest.value("SELECT count(*) FROM notes_n WHERE n = 'none' OR arr <> '{a}'")
            .as_deref(),
        Some("0"),
        "`note = NULL` is never true and NULL in an array literal is a null"
    );
    src.exec(
        "INSERT INTO notes VALUES (301, NULL), (302, 'x');
         UPDATE notes SET note = NULL WHERE id = 1;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches_in(&src, &dest, "public.notes_n", "notes", select, None, "id");
}

/// Every setting a session can change is pinned by walfill's sessions or
/// shown not to change what a transform gives; and the pins hold over a
/// database's and a role's own settings.
#[test]
fn every_setting_that_changes_a_value_is_pinned() {
    let db = TestDb::new("tx_settings");
    let pinned: Vec<String> = walfill::db::session_settings()
        .iter()
        .map(|(name, _)| name.to_lowercase())
        .collect();
    // Settings that change no value a transform gives over a row, by kind.
    let harmless_prefixes = [
        // the planner's choices: the same values by another plan
        "enable_",
        "geqo",
        "jit_",
        "cpu_",
        "parallel_",
        "min_parallel_",
        "max_parallel_",
        // logging, statistics, tracing, debugging
        "log_",
        "track_",
        "trace_",
        "debug_",
        "stats_",
        // vacuum, WAL, network, resources
        "vacuum_",
        "wal_",
        "tcp_",
        "idle_",
        "default_transaction_",
        "transaction_",
    ];
    let harmless = [
        // the planner's choices and resources
        "constraint_exclusion",
        "cursor_tuple_fraction",
        "default_statistics_target",
        "effective_cache_size",
        "effective_io_concurrency",
        "from_collapse_limit",
        "join_collapse_limit",
        "hash_mem_multiplier",
        "maintenance_io_concurrency",
        "maintenance_work_mem",
        "work_mem",
        "temp_buffers",
        "temp_file_limit",
        "plan_cache_mode",
        "random_page_cost",
        "seq_page_cost",
        "recursive_worktable_factor",
        "force_parallel_mode",
        "io_combine_limit",
        "logical_decoding_work_mem",
        "gin_pending_list_limit",
        "backend_flush_after",
        "synchronize_seqscans",
        "compute_query_id",
        "jit",
        "file_copy_method",
        // an index scan's result set: a transform reads one row, no index
        "gin_fuzzy_search_limit",
        // errors and timing, not values: a statement fails or waits
        "statement_timeout",
        "lock_timeout",
        "deadlock_timeout",
        "max_stack_depth",
        "exit_on_error",
        "client_connection_check_interval",
        "commit_delay",
        "commit_siblings",
        "synchronous_commit",
        "row_security",
        // messages: an error's text (a dead letter's), never a value
        "client_min_messages",
        "lc_messages",
        "escape_string_warning",
        "backtrace_functions",
        "md5_password_warnings",
        "application_name",
        "update_process_title",
        // what other statements do: DDL, storage, roles, triggers, libraries
        "allow_in_place_tablespaces",
        "allow_system_table_mods",
        "check_function_bodies",
        "createrole_self_grant",
        "default_table_access_method",
        "default_tablespace",
        "default_toast_compression",
        "temp_tablespaces",
        "icu_validation_level",
        "password_encryption",
        "scram_iterations",
        "session_replication_role",
        "event_triggers",
        "lo_compat_privileges",
        "restrict_nonsystem_relation_kind",
        "dynamic_library_path",
        "extension_destdir",
        "extension_control_path",
        "local_preload_libraries",
        "session_preload_libraries",
        // damaged pages: reading them at all
        "zero_damaged_pages",
        "ignore_checksum_failure",
    ];
    let unlisted: Vec<String> = db
        .client()
        .query(
            "SELECT lower(name) FROM pg_settings WHERE context IN ('user', 'superuser')
              ORDER BY name",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|name| {
            !pinned.contains(name)
                && !harmless.contains(&name.as_str())
                && !harmless_prefixes.iter().any(|p| name.starts_with(p))
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "settings neither pinned by walfill's sessions (src/db.rs) nor shown harmless here: \
         {unlisted:?}"
    );

    // The pins win over the database's and the role's settings.
    db.exec(&format!(
        "ALTER DATABASE {0} SET transform_null_equals = on;
         ALTER DATABASE {0} SET array_nulls = off;
         ALTER DATABASE {0} SET lc_numeric = 'C.UTF-8';
         ALTER DATABASE {0} SET default_text_search_config = 'pg_catalog.english';",
        db.name
    ));
    let mut config: postgres::Config = db.url().parse().unwrap();
    config.options(&walfill::db::options());
    let mut client = config.connect(postgres::NoTls).unwrap();
    for (name, value) in walfill::db::session_settings() {
        if name == "client_connection_check_interval" {
            continue; // shown with its unit
        }
        let shown: String = client
            .query_one(&format!("SELECT current_setting('{name}')"), &[])
            .unwrap()
            .get(0);
        let normalized = |v: &str| v.replace([' ', '"'], "").to_lowercase();
        assert_eq!(
            normalized(&shown),
            normalized(value),
            "{name} is pinned in walfill's sessions"
        );
    }
}

/// A row the transform fails on under a key the version has never held
/// (the fresh-insert path) is a dead letter; the rows after it arrive and
/// the stream goes on.
#[test]
fn a_poison_row_under_a_new_key_never_stops_the_stream() {
    let db = TestDb::new("tx_poison");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g FROM generate_series(1, 50) g;",
    );
    let select = "id, 100 / qty AS per";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    db.exec("INSERT INTO stock VALUES (300, 0); INSERT INTO stock VALUES (301, 7);");
    walfill.ok(&["sync", "--once"]);
    assert_eq!(
        db.value("SELECT string_agg(key[1], ',') FROM walfill.dead_letters")
            .as_deref(),
        Some("300")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("id <> 300"),
        "id",
    );
    // Fixed at the source: the key arrives.
    db.exec("UPDATE stock SET qty = 4 WHERE id = 300; INSERT INTO stock VALUES (302, 5);");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, None, "id");
}

/// Poison rows in a source transaction larger than the apply's memory
/// bound: the transaction reaches the destination in pieces that share
/// one destination transaction, and a poison row in an early piece (a new
/// key and a stored one) is a dead letter there too; the transaction
/// arrives whole and the stream goes on.
#[test]
fn a_poison_row_in_a_transaction_larger_than_the_memory_bound() {
    let db = TestDb::new("tx_poison_big");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int, pad text);
         INSERT INTO stock SELECT g, g, 'p' FROM generate_series(1, 50) g;",
    );
    let select = "id, 100 / qty AS per, pad";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\napply_memory_mb = 1\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    // About 8 MiB of changes, the two poison rows first.
    db.exec(
        "BEGIN;
         INSERT INTO stock VALUES (300, 0, 'new key');
         UPDATE stock SET qty = 0 WHERE id = 7;
         INSERT INTO stock SELECT g, g, repeat('x', 200) FROM generate_series(1000, 40999) g;
         COMMIT;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_eq!(
        db.value("SELECT string_agg(key[1], ',' ORDER BY key[1]) FROM walfill.dead_letters")
            .as_deref(),
        Some("300,7")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    db.exec("UPDATE stock SET qty = 4 WHERE qty = 0; INSERT INTO stock VALUES (302, 5, '');");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, None, "id");
}

/// A scoped refresh that copies a row the transform fails on keeps its key
/// out of the version even where a row of the key is stored (drift): the
/// copied row is dropped and its key tombstoned at the refresh's version,
/// and a later fix at the source brings the key back.
#[test]
fn a_refresh_keeps_out_a_stored_key_whose_source_row_fails() {
    let db = TestDb::new("tx_poison_refresh");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 10 FROM generate_series(1, 40) g;",
    );
    let select = "id, 100 / qty AS per";
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\nallow_dead_letters = true\n\n[serve]\nlease_seconds = 3\n\
             poll_seconds = 1\nretry_seconds = 1\narchiver = false\n\n{}",
            target("stock_per", "public.stock", select, None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    // Behind walfill's back, two failing keys get rows.
    db.exec(
        "INSERT INTO public.stock_per__v1 (id, per, _walfill_lsn, _walfill_seq, _walfill_deleted) \
         VALUES (10, 999, '0/1', 0, false), (20, 999, '0/1', 0, false)",
    );
    assert_eq!(
        db.value("SELECT count(*) FROM public.stock_per WHERE per = 999")
            .as_deref(),
        Some("2")
    );
    let service = Service::start(&walfill, false, &[]);
    let id = walfill
        .ok(&["request", "stock_per", "--where", "id <= 25"])
        .trim()
        .to_string();
    wait_for(
        &db,
        &format!("SELECT state = 'done' FROM walfill.requests WHERE id = {id}"),
        Duration::from_secs(60),
        "the scoped refresh to finish",
        &[&service],
    );
    drop(service);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    db.exec("UPDATE stock SET qty = 3 WHERE id = 10");
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    assert_eq!(
        db.value("SELECT per FROM public.stock_per WHERE id = 10")
            .as_deref(),
        Some("33")
    );
}

/// One row in seven failing: the failing rows are set aside in bulk, with
/// one log line per batch (not one per row), and the rest is exact. A
/// transform that fails on more than `max_dead_letter_percent` of the rows
/// read is broken, not its rows: the backfill stops and says so.
#[test]
fn failing_rows_at_density_are_set_aside_in_bulk_and_a_broken_transform_stops() {
    let db = TestDb::new("tx_density");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 7 FROM generate_series(1, 7000) g;",
    );
    let select = "id, 100 / qty AS per";
    let config = |select: &str, extra: &str| {
        format!(
            "[backfill]\nallow_dead_letters = true\ntransform_on = \"destination\"\n\
             chunk_rows = 2000\n{extra}\n{}",
            target("stock_per", "public.stock", select, None)
        )
    };
    let walfill = Walfill::new(&db, &config(select, ""));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "stock_per"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters")
            .as_deref(),
        Some("1000")
    );
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        select,
        Some("qty <> 0"),
        "id",
    );
    let lines = log
        .lines()
        .filter(|l| l.contains("the transform fails on"))
        .count();
    assert!(
        (1..=4).contains(&lines),
        "{lines} log lines about failing rows, not one per batch:\n{log}"
    );

    // One row in three: past the default 20%.
    db.exec("UPDATE stock SET qty = id % 3");
    let broken = "id, 100 / qty AS per, 1 AS again";
    walfill.configure(
        &db,
        &config(broken, "").replace("version = \"v1\"", "version = \"v2\""),
    );
    let out = walfill.run(&["backfill", "stock_per"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("max_dead_letter_percent = 20") && stderr.contains("division by zero"),
        "{stderr}"
    );
    // A limit that allows it.
    walfill.configure(
        &db,
        &config(broken, "max_dead_letter_percent = 40")
            .replace("version = \"v1\"", "version = \"v2\""),
    );
    walfill.ok(&["backfill", "stock_per"]);
    assert_view_matches(
        &db,
        "public.stock_per",
        "stock",
        broken,
        Some("qty <> 0"),
        "id",
    );
}

/// A filter that guards the select list (`qty <> 0` before `100 / qty`)
/// keeps the rows it rejects away from the select list: in the copy (on
/// either side) and in the stream, fresh keys and stored ones.
fn a_guarding_filter_comes_first(transform_on: &str) {
    let db = TestDb::new("tx_guard");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 5 FROM generate_series(1, 400) g;",
    );
    let (select, filter) = ("id, 100 / qty AS per", "qty <> 0");
    let walfill = Walfill::new(
        &db,
        &format!(
            "[backfill]\ntransform_on = \"{transform_on}\"\nchunk_rows = 100\n\n{}",
            target("stock_per", "public.stock", select, Some(filter))
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "stock_per"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, Some(filter), "id");
    db.exec(
        "INSERT INTO stock VALUES (1000, 0), (1001, 3);
         UPDATE stock SET qty = 0 WHERE id IN (1, 2);
         UPDATE stock SET qty = 2 WHERE id = 5;",
    );
    walfill.ok(&["sync", "--once"]);
    assert_view_matches(&db, "public.stock_per", "stock", select, Some(filter), "id");
    assert_eq!(
        db.value("SELECT count(*) FROM walfill.dead_letters")
            .as_deref(),
        Some("0"),
        "a row the filter rejects is no dead letter"
    );
}

#[test]
fn a_guarding_filter_comes_first_when_the_source_evaluates() {
    a_guarding_filter_comes_first("auto");
}

#[test]
fn a_guarding_filter_comes_first_when_the_destination_evaluates() {
    a_guarding_filter_comes_first("destination");
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

/// A version built before the meaning of a transform was recorded (the
/// first meaning) is flagged by `status` and `plan` where today's meaning
/// gives other rows: a column it reads has a collation of its own, or a
/// database sets a setting walfill pins now. A version built now is not.
#[test]
fn versions_built_under_an_earlier_meaning_are_flagged() {
    let db = TestDb::new("tx_meaning");
    db.exec(
        "CREATE TABLE people (id int PRIMARY KEY, name text COLLATE \"C\", note text);
         INSERT INTO people VALUES (1, 'émile', 'x');",
    );
    let walfill = Walfill::new(
        &db,
        &format!(
            "{}\n{}",
            target("by_name", "public.people", "id, upper(name) AS u", None),
            target("by_note", "public.people", "id, note", None)
        ),
    );
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "by_name"]);
    walfill.ok(&["backfill", "by_note"]);
    let flagged = |walfill: &Walfill| -> Vec<String> {
        let status = walfill.ok(&["status", "--json"]);
        let report: serde_json::Value = serde_json::from_str(&status).unwrap();
        report["versions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["earlier_meaning"].is_string())
            .map(|v| format!("{}: {}", v["target"], v["earlier_meaning"]))
            .collect()
    };
    assert_eq!(
        flagged(&walfill),
        Vec::<String>::new(),
        "versions built now"
    );

    db.exec("UPDATE walfill.versions SET meaning = NULL");
    let found = flagged(&walfill);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("by_name") && found[0].contains("column name"),
        "{found:?}"
    );
    let planned = walfill.ok(&["plan", "by_name"]);
    assert!(
        planned.contains("version v1: built under an earlier meaning of its transform"),
        "{planned}"
    );

    db.exec(&format!(
        "ALTER DATABASE {} SET transform_null_equals = on",
        db.name
    ));
    let found = flagged(&walfill);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[1].contains("transform_null_equals"), "{found:?}");
}

/// Float functions of the platform's math library (`exp`, `ln`, `power`,
/// trigonometry) may differ in the last bit between two servers of the same
/// version: a copy never evaluates them on the source.
#[test]
fn math_library_functions_are_evaluated_in_the_destination() {
    let db = TestDb::new("tx_libm");
    db.exec(
        "CREATE TABLE m (id int PRIMARY KEY, x float8);
         INSERT INTO m SELECT g, g / 7.0 FROM generate_series(1, 100) g;",
    );
    let walfill = Walfill::new(&db, &target("m_exp", "public.m", "id, exp(x) AS e", None));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "m_exp"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("transform_on=\"destination\"") && log.contains("exp(double precision)"),
        "{log}"
    );
    assert_view_matches(&db, "public.m_exp", "m", "id, exp(x) AS e", None, "id");
}

/// A transform over a type that is not built in is evaluated in the
/// destination, and the log names the type (not its OID).
#[test]
fn a_type_not_built_in_is_named_where_it_keeps_the_transform_in_the_destination() {
    let db = TestDb::new("tx_named_type");
    db.exec(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE people (id int PRIMARY KEY, feeling mood);
         INSERT INTO people SELECT g, (ARRAY['sad','ok','happy']::mood[])[1 + g % 3] FROM generate_series(1, 30) g;",
    );
    let select = "id, feeling, id * 2 AS twice";
    let walfill = Walfill::new(&db, &target("feelings", "public.people", select, None));
    walfill.ok(&["setup"]);
    let out = walfill.run(&["backfill", "feelings"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("it uses type mood, which is not built in") && !log.contains("(OID "),
        "{log}"
    );
    assert_view_matches(&db, "public.feelings", "people", select, None, "id");
}
