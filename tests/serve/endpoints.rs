//! The HTTP endpoints: readiness, tokens, messages, status, metrics, history, HTTPS.

use super::*;

/// `/ready` is 200 while every built version is followed, and 503 naming
/// the version once its follower stops (a column it reads was dropped on
/// the source), while `/health`, the liveness probe, stays 200. The
/// metrics and `status` say the same; a version nobody follows (the
/// service stopped) is named by `status` once its grace is over.
#[test]
fn ready_names_a_version_that_stopped_following_and_health_stays_up() {
    let (db, walfill) = built_v1("sv_ready", 2_000, "");
    walfill.configure(
        &db,
        &format!("{}\n{}", serve_section(""), orders_target("v1")),
    );
    let mut service = Service::start(&walfill, true, &[]);
    wait_http(&service, "/ready", 200, "the service to follow v1");
    let v1 = [("target", "orders_summary"), ("version", "v1")];
    assert_eq!(
        metric(&service, "walfill_version_following", &v1),
        Some(1.0)
    );
    assert_eq!(metric(&service, "walfill_ready", &[]), Some(1.0));
    let built = metric(
        &service,
        "walfill_last_successful_build_timestamp",
        &[("target", "orders_summary")],
    )
    .expect("the time v1 was built");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 600.0..=now + 5.0).contains(&built),
        "{built} vs {now}"
    );

    // The version reads `note`: dropped on the source, its follower stops.
    db.exec("ALTER TABLE orders DROP COLUMN note; UPDATE orders SET status = 'x' WHERE id = 1");
    let body = wait_http(&service, "/ready", 503, "the stopped follower to show");
    assert!(
        body.contains("orders_summary version v1") && body.contains("follower failed"),
        "{body}"
    );
    let (code, body) = service.get("/health");
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        metric(&service, "walfill_version_following", &v1),
        Some(0.0)
    );
    assert_eq!(metric(&service, "walfill_version_error", &v1), Some(1.0));
    assert_eq!(metric(&service, "walfill_ready", &[]), Some(0.0));
    let status = walfill.ok(&["status"]);
    assert!(
        status.contains("NOT FOLLOWED: its follower failed"),
        "{status}"
    );
    assert!(
        status.contains("not ready: orders_summary version v1"),
        "{status}"
    );
    service.stop(Duration::from_secs(30));

    // Nobody follows a version whose state has not moved for a minute.
    let (db2, walfill2) = built_v1("sv_unfollowed", 100, "");
    let status = walfill2.ok(&["status"]);
    assert!(!status.contains("not ready"), "within the grace: {status}");
    db2.exec("UPDATE walfill.versions SET updated_at = now() - interval '1 minute'");
    let status = walfill2.ok(&["status"]);
    assert!(
        status.contains("NOT FOLLOWED: no process follows it")
            && status.contains("not ready: orders_summary version v1"),
        "{status}"
    );
}

/// With `[[serve.tokens]]`, the API wants a bearer token: a read token
/// opens the GETs, a write token the POSTs too, and the request records
/// the token's name as who asked; `/health` and the page stay open. Without
/// tokens, `serve` refuses to listen beyond loopback; a token whose secret
/// is not in the environment stops it at start.
#[test]
fn the_api_wants_a_token_of_the_right_access() {
    let (db, walfill) = built_v1("sv_tokens", 200, "");
    let (read, write) = ("r3ad-secret-0123456789", "wr1te-secret-0123456789");
    walfill.configure(
        &db,
        &format!(
            "{}\n[[serve.tokens]]\nname = \"dashboard\"\naccess = \"read\"\n\
             secret_env = \"WF_TEST_TOKEN_READ\"\n\n[[serve.tokens]]\nname = \"ci\"\n\
             access = \"write\"\nsecret_env = \"WF_TEST_TOKEN_WRITE\"\n\n{}",
            serve_section(""),
            orders_target("v1")
        ),
    );
    // Other commands never need the secrets.
    walfill.ok(&["status"]);
    let env = [("WF_TEST_TOKEN_READ", read), ("WF_TEST_TOKEN_WRITE", write)];
    let mut service = Service::start(&walfill, true, &env);
    assert_eq!(service.call("GET", "/health", None).0, 200);
    assert_eq!(service.call("GET", "/", None).0, 200);
    for path in ["/status", "/metrics", "/ready"] {
        assert_eq!(
            service.call("GET", path, None).0,
            401,
            "{path} without a token"
        );
        assert_eq!(
            service.call("GET", path, Some("wrong-secret-0123456789")).0,
            401,
            "{path} with a wrong token"
        );
        assert_eq!(
            service.call("GET", path, Some(read)).0,
            200,
            "{path} with a read token"
        );
    }
    let post = "/targets/orders_summary/backfill";
    assert_eq!(service.call("POST", post, None).0, 401);
    let (code, body) = service.call("POST", post, Some(read));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("dashboard"), "{body}");
    assert_eq!(service.call("POST", "/pause", Some(read)).0, 403);
    let (code, body) = service.call("POST", post, Some(write));
    assert_eq!(code, 202, "{body}");
    assert_eq!(
        db.value("SELECT requested_by FROM walfill.requests WHERE origin = 'http'")
            .as_deref(),
        Some("ci")
    );
    service.stop(Duration::from_secs(30));

    // A secret missing from the environment: refused at start.
    let out = walfill.run(&["serve"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("WF_TEST_TOKEN_READ") && stderr.contains("not set"),
        "{stderr}"
    );
    // No tokens, beyond loopback: refused.
    walfill.configure(
        &db,
        &format!("{}\n{}", serve_section(""), orders_target("v1")),
    );
    let out = walfill.run(&["serve", "--listen", "0.0.0.0:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("beyond this host, needs tokens"),
        "{stderr}"
    );
}

/// Messages that match the state: SIGTERM is not answered with advice
/// about Ctrl-C; `dead-letters` of a target whose one version is not
/// published needs no `--version`, and with several it names them.
#[test]
fn messages_match_the_state() {
    let db = TestDb::new("sv_messages");
    db.exec(
        "CREATE TABLE stock (id int PRIMARY KEY, qty int);
         INSERT INTO stock SELECT g, g % 5 FROM generate_series(1, 50) g;",
    );
    let target = |version: &str| {
        format!(
            "[backfill]\nallow_dead_letters = true\n\n[serve]\npoll_seconds = 1\n\n\
             [[target]]\nname = \"per\"\nsource = \"public.stock\"\n\
             select = \"id, 100 / qty AS per\"\nversion = \"{version}\"\n"
        )
    };
    let walfill = Walfill::new(&db, &target("v1"));
    walfill.ok(&["setup"]);
    walfill.ok(&["backfill", "per", "--no-swap"]);
    let listed = walfill.ok(&["dead-letters", "per"]);
    assert!(listed.contains("division by zero"), "{listed}");
    walfill.configure(&db, &target("v2"));
    walfill.ok(&["backfill", "per", "--no-swap"]);
    let out = walfill.run(&["dead-letters", "per"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("name one with --version: v1, v2"),
        "{stderr}"
    );

    let mut service = Service::start(&walfill, false, &[]);
    std::thread::sleep(Duration::from_secs(2));
    service.stop(Duration::from_secs(30));
    let log = service.log();
    assert!(
        log.contains("SIGTERM: stopping") && !log.contains("Ctrl-C"),
        "{log}"
    );
}

/// An idle-in-transaction session holding a transaction id blocks the
/// creation of a backfill's slot for as long as it lives: `status` names
/// it (pid, user, application, age) while the backfill waits, and the
/// backfill goes on once it ends.
#[test]
fn status_names_the_sessions_a_slot_creation_waits_for() {
    let db = TestDb::new("sv_slot_wait");
    create_orders(&db, 200);
    let walfill = Walfill::new(&db, &orders_target("v1"));
    walfill.ok(&["setup"]);
    let mut stuck = db.client();
    stuck
        .batch_execute("SET application_name = 'forgotten_psql'; BEGIN; SELECT txid_current();")
        .unwrap();
    let pid: i32 = stuck
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let backfill = walfill.spawn(&["backfill", "orders_summary"]);
    let started = Instant::now();
    loop {
        let status = walfill.ok(&["status"]);
        if status.contains("WAITING: creating its slot waits for") {
            assert!(
                status.contains(&format!("pid {pid} ")) && status.contains("forgotten_psql"),
                "{status}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "status never named the session:\n{status}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    stuck.batch_execute("ROLLBACK").unwrap();
    walfill.wait_ok(backfill, Duration::from_secs(60));
    let status = walfill.ok(&["status"]);
    assert!(!status.contains("WAITING"), "{status}");
}

#[test]
fn metrics_parse_as_prometheus_text_and_ready_flips_on_repeated_failures() {
    let (db, walfill) = built_v1("sv_http", 3_000, "");
    let broken = "[[target]]\nname = \"broken\"\nsource = \"public.orders\"\nkey = [\"id\"]\n\
                  select = \"id, total_cents / (id - id) AS boom\"\nversion = \"v1\"\n\
                  schema = \"derived\"\n";
    walfill.configure(
        &db,
        &format!(
            "[archive]\nurl = \"{}\"\n\n{}\n{}",
            archive_url(),
            serve_section(""),
            orders_target("v1")
        ),
    );
    let mut service = Service::start(&walfill, true, &[]);
    let (code, body) = service.get("/health");
    assert_eq!(code, 200, "{body}");
    // A change applied by the live stream gives the apply lag in seconds.
    db.exec("UPDATE orders SET note = 'lag' WHERE id = 1; SELECT pg_switch_wal()");
    wait_for(
        &db,
        "SELECT apply_lag_seconds IS NOT NULL FROM walfill.versions WHERE version = 'v1'",
        Duration::from_secs(60),
        "the stream to apply a change",
        &[&service],
    );

    let (code, text) = service.get("/metrics");
    assert_eq!(code, 200, "{text}");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let sample = |name: &str, label: Option<(&str, &str)>| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Counter(v) => v,
                _ => f64::NAN,
            })
    };
    assert_eq!(sample("walfill_up", None), Some(1.0));
    let rows: f64 = db
        .value("SELECT count(*) FROM orders")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        sample("walfill_rows_copied", Some(("version", "v1"))),
        Some(rows)
    );
    assert!(sample("walfill_apply_lag_bytes", Some(("version", "v1"))).is_some());
    let lag = sample("walfill_apply_lag_seconds", Some(("version", "v1"))).unwrap();
    assert!((0.0..60.0).contains(&lag), "{lag}");
    // The archive has segments (the test cluster archives every one).
    let age = sample("walfill_archive_last_segment_age_seconds", None).unwrap();
    assert!((0.0..3600.0).contains(&age), "{age}");
    assert!(sample("walfill_events_total", Some(("kind", "swap"))).unwrap_or(0.0) >= 1.0);
    assert_eq!(
        sample("walfill_backfills", Some(("state", "failed"))),
        Some(0.0)
    );
    for s in &scrape.samples {
        assert!(s.metric.starts_with("walfill_"), "{}", s.metric);
    }

    // A target whose transform fails on every row: its request fails for
    // good (the error needs the operator), and /ready says so.
    walfill.configure(
        &db,
        &format!("{}\n{}\n{broken}", serve_section(""), orders_target("v1")),
    );
    service.signal("HUP");
    let started = Instant::now();
    loop {
        let (code, body) = service.get("/ready");
        if code == 503 {
            assert!(body.contains("broken"), "{body}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "/ready still says {code} {body}:\n{}",
            service.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // A failing target is no reason to restart the process.
    let (code, body) = service.get("/health");
    assert_eq!(code, 200, "{body}");
    let attempts: i32 = db
        .value("SELECT max(attempts) FROM walfill.requests WHERE target = 'broken'")
        .unwrap()
        .parse()
        .unwrap();
    assert!(attempts >= 1);
    // The other target's live stream was never stopped.
    db.exec("UPDATE orders SET total_cents = total_cents + 1 WHERE id = 1");
    wait_view_matches(
        &db,
        VIEW,
        "orders",
        ORDERS_SELECT,
        Some(ORDERS_WHERE),
        &[&service],
    );
    let (code, status) = service.get("/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["requests"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["target"] == "broken" && r["last_error"].is_string()));
    let (code, page) = service.get("/");
    assert_eq!(code, 200);
    assert!(page.contains("<title>walfill</title>"));
    service.stop(Duration::from_secs(30));
}

/// `GET /history` holds the page's plots: the published version's apply
/// lag (bytes and seconds) and the WAL its slot keeps, a point per sample,
/// more as time goes.
#[test]
fn history_records_apply_lag_and_slot_wal_for_the_plots() {
    let (db, walfill) = built_v1("sv_history", 1_000, "");
    walfill.configure(
        &db,
        &format!("{}\n{}", serve_section(""), orders_target("v1")),
    );
    let mut service = Service::start(&walfill, true, &[]);
    let writer = Writer::start(&db, 1_000, 1_000_000, 41);
    let points = |kind: &str| -> usize {
        let (code, body) = service.get("/history");
        assert_eq!(code, 200, "{body}");
        let history: serde_json::Value = serde_json::from_str(&body).unwrap();
        history["series"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| s["points"].as_array().unwrap().len())
            .max()
            .unwrap_or(0)
    };
    let started = Instant::now();
    while points("apply_lag_seconds") < 2 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let first = (points("apply_lag_bytes"), points("slot_retained_bytes"));
    assert!(
        first.0 >= 2 && first.1 >= 2,
        "{first:?}: {}",
        service.get("/history").1
    );
    std::thread::sleep(Duration::from_secs(6));
    let second = (points("apply_lag_bytes"), points("slot_retained_bytes"));
    assert!(
        second.0 > first.0 && second.1 > first.1,
        "{first:?} then {second:?}"
    );
    let (_, body) = service.get("/history");
    assert!(body.contains("\"label\":\"orders_summary/v1\""), "{body}");
    writer.stop();
    service.stop(Duration::from_secs(30));
}

/// One HTTPS request with a client that trusts only `ca` (PEM); the raw
/// response, or why it failed.
fn https_get(port: u16, path: &str, ca: &str) -> Result<String, String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tls.read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    Ok(response)
}

/// With `tls_cert` and `tls_key` the endpoints speak HTTPS (and nothing
/// else on that port); a key that does not fit its certificate stops the
/// start, naming the setting (exit 2).
#[test]
fn the_endpoints_are_served_over_https_with_tls_cert_and_key() {
    let (db, walfill) = built_v1("sv_tls", 100, "");
    let dir = std::env::temp_dir().join(format!("walfill-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let issued = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = issued.cert.pem();
    std::fs::write(dir.join("cert.pem"), &cert_pem).unwrap();
    std::fs::write(dir.join("key.pem"), issued.signing_key.serialize_pem()).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("other-key.pem"), other.signing_key.serialize_pem()).unwrap();
    let port = crate::support::service::free_port();
    let configure = |key: &str| {
        walfill.configure(
            &db,
            &format!(
                "{}listen = \"127.0.0.1:{port}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n{}",
                serve_section(""),
                dir.join("cert.pem").display(),
                dir.join(key).display(),
                orders_target("v1")
            ),
        )
    };

    configure("other-key.pem");
    let out = walfill.run(&["serve"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains("serve.tls_key") && log.contains("does not fit"),
        "{log}"
    );

    configure("key.pem");
    let mut service = Service::start(&walfill, false, &[]);
    let started = Instant::now();
    let response = loop {
        match https_get(port, "/health", &cert_pem) {
            Ok(r) => break r,
            Err(e) if started.elapsed() > Duration::from_secs(30) => {
                panic!("no HTTPS answer: {e}\n{}", service.log())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert!(
        response.starts_with("HTTP/1.1 200") && response.ends_with("ok\n"),
        "{response}"
    );
    let status = https_get(port, "/status", &cert_pem).unwrap();
    assert!(status.contains("\"orders_summary\""), "{status}");
    // Plain HTTP gets no answer from it.
    let plain = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{port}/health"))
        .send();
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    service.stop(Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).unwrap();
}
