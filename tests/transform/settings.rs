//! Settings and meaning: parse settings, pinned server settings, earlier meanings, functions evaluated in the destination

use super::*;

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
