//! The service's HTTP endpoints:
//!
//! - `GET /`: the status page (one HTML page refreshing itself from `/status`);
//! - `GET /health`: liveness: 200, or 503 with the reason after repeated
//!   failed looks at the state database;
//! - `GET /ready`: 200, or 503 naming each cause: a built version that
//!   should follow the live stream and does not (no process follows it,
//!   its follower failed, it lost changes), a part of this process that
//!   keeps failing (the sync, the archiver), a target whose backfill
//!   requests keep failing;
//! - `GET /status`: what `walfill status --json` prints;
//! - `GET /metrics`: Prometheus text format;
//! - `GET /requests/ID`: one request;
//! - `POST /targets/TARGET/backfill`: requests a backfill (202, its id);
//! - `POST /targets/TARGET/pause`, `.../resume`; `POST /pause`, `/resume`
//!   for every target.
//!
//! With `[serve] tls_cert` and `tls_key`, they are served over HTTPS only
//! (see `tls`). With `[[serve.tokens]]`, every endpoint but `/health` and the page
//! itself (which holds no data, and reads the token it sends from its
//! URL's `#token=...`) wants `Authorization: Bearer SECRET`: a `read` token
//! for the GETs, a `write` token for the POSTs too. Without tokens the API
//! is open and listens on a loopback address only.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::config::Token;
use crate::control::state::requests;
use crate::db::{self, Role};
use crate::error::{Error, Refusal};

const PAGE: &str = include_str!("page.html");

/// Serves until `cancel`.
pub(super) async fn run(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/status", get(status))
        .route("/history", get(history))
        .route("/metrics", get(metrics))
        .route("/requests/{id}", get(request))
        .route("/targets/{target}/backfill", post(backfill))
        .route("/targets/{target}/pause", post(pause))
        .route("/targets/{target}/resume", post(resume))
        .route("/pause", post(pause_all))
        .route("/resume", post(resume_all))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            authorize,
        ))
        .with_state(shared);
    let served = match tls {
        Some(acceptor) => {
            let listener = super::tls::TlsListener {
                tcp: listener,
                acceptor,
            };
            axum::serve(listener, app)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await
        }
    };
    if let Err(e) = served {
        tracing::error!(error = %e, "the HTTP endpoints stopped");
    }
}

/// Who asked, as the token that authorized the request names it.
#[derive(Clone, Debug)]
struct Caller(String);

/// Lets a request through when the API is open, when it asks for
/// `/health` or the page, or when it carries a token that allows it.
async fn authorize(
    State(shared): State<Arc<Shared>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let config = shared.config();
    let tokens = &config.serve.tokens;
    let path = request.uri().path();
    if tokens.is_empty() || path == "/health" || path == "/" {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = given.and_then(|g| {
        tokens
            .iter()
            .find(|t| secret(t).is_ok_and(|secret| same(&secret, g)))
    }) else {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Json(serde_json::json!({
                "error": "this endpoint wants `Authorization: Bearer SECRET` with the secret of \
                          a token of [[serve.tokens]]"
            })),
        )
            .into_response();
    };
    if request.method() != axum::http::Method::GET && !token.write {
        return (
            StatusCode::FORBIDDEN,
            Json(serde_json::json!({
                "error": format!("token {} may read only; this needs a token with access = \"write\"", token.name)
            })),
        )
            .into_response();
    }
    request.extensions_mut().insert(Caller(token.name.clone()));
    next.run(request).await
}

/// Whether two secrets are equal, in a time that does not depend on where
/// they differ.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// An error as a response: the status that fits, the message as JSON.
fn failure(e: &Error) -> Response {
    let code = match e {
        Error::Config(_) => StatusCode::NOT_FOUND,
        Error::Refused(_) => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, Json(serde_json::json!({ "error": e.describe() }))).into_response()
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    match shared.unhealthy() {
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {why}\n"),
        )
            .into_response(),
        None => (StatusCode::OK, "ok\n").into_response(),
    }
}

async fn ready(State(shared): State<Arc<Shared>>) -> Response {
    let mut causes: Vec<String> = shared.unhealthy().into_iter().collect();
    causes.extend(shared.failing_parts());
    let config = shared.config();
    let read = async {
        let report = crate::control::status::report(&config).await?;
        let dest = db::connect(&config.destination, Role::Destination).await?;
        let failing = failing_targets(&dest).await?;
        Ok::<_, Error>(report.not_ready.into_iter().chain(failing))
    }
    .await;
    match read {
        Ok(found) => causes.extend(found),
        Err(e) => causes.push(e.describe()),
    }
    if causes.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", causes.join("; ")),
        )
            .into_response()
    }
}

/// Targets whose newest request failed for good, or failed three times in
/// a row and waits to be tried again.
async fn failing_targets(dest: &tokio_postgres::Client) -> crate::error::Result<Vec<String>> {
    let rows = dest
        .query(
            "SELECT DISTINCT ON (target) target, state, attempts, last_error
               FROM walfill.requests ORDER BY target, id DESC",
            &[],
        )
        .await
        .map_err(|e| Error::destination("reading the requests", e))?;
    Ok(rows
        .iter()
        .filter(|r| {
            let state: String = r.get(1);
            let attempts: i32 = r.get(2);
            let error: Option<String> = r.get(3);
            state == "failed" || (state != "done" && attempts >= 3 && error.is_some())
        })
        .map(|r| {
            format!(
                "target {} failed {} time(s): {}",
                r.get::<_, String>(0),
                r.get::<_, i32>(2),
                r.get::<_, Option<String>>(3).unwrap_or_default()
            )
        })
        .collect())
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    match crate::control::status::report(&shared.config()).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => failure(&e),
    }
}

/// `GET /history`: the last hour of the page's plots (see `history`).
async fn history(State(shared): State<Arc<Shared>>) -> Response {
    let series = shared
        .history
        .lock()
        .map(|h| h.series())
        .unwrap_or_default();
    Json(serde_json::json!({
        "sample_seconds": super::history::SAMPLE.as_secs(),
        "window_seconds": super::history::WINDOW.as_secs(),
        "series": series,
    }))
    .into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.config();
    let rendered = async {
        let report = crate::control::status::report(&config).await?;
        let dest = db::connect(&config.destination, Role::Destination).await?;
        let leader = shared.health.lock().map(|h| h.leader).unwrap_or(false);
        super::metrics::render(&report, &dest, leader).await
    }
    .await;
    match rendered {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => failure(&e),
    }
}

async fn request(State(shared): State<Arc<Shared>>, Path(id): Path<i64>) -> Response {
    let found = async {
        let dest = db::connect(&shared.config().destination, Role::Destination).await?;
        requests::get(&dest, id).await
    }
    .await;
    match found {
        Ok(Some(r)) => Json(r).into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": format!("there is no request {id}") })),
        )
            .into_response(),
        Err(e) => failure(&e),
    }
}

/// `POST /targets/T/backfill[?where=SQL][&purge=true][&no_swap=true]
/// [&swap_at=TIME][&verify_before_swap=BOOL]`: see `walfill request`.
#[derive(Debug, serde::Deserialize)]
struct BackfillQuery {
    #[serde(rename = "where")]
    scope: Option<String>,
    #[serde(default)]
    purge: bool,
    #[serde(default)]
    no_swap: bool,
    swap_at: Option<String>,
    verify_before_swap: Option<bool>,
}

async fn backfill(
    State(shared): State<Arc<Shared>>,
    caller: Option<axum::Extension<Caller>>,
    Path(target): Path<String>,
    Query(query): Query<BackfillQuery>,
) -> Response {
    let caller = caller.map(|c| c.0 .0);
    let config = shared.config();
    let made = async {
        config.target(&target)?;
        if query.purge && query.scope.is_some() {
            return Err(Error::refused(
                "purge rebuilds the whole table into a new version and where refreshes part of \
                 the published one in place",
                "ask for one of them",
            ));
        }
        let gate = requests::Gate {
            no_swap: query.no_swap,
            swap_at: match query.swap_at.as_deref() {
                Some(text) => Some(crate::cli::parse_swap_at(text)?),
                None => None,
            },
            verify_before_swap: query.verify_before_swap,
        };
        let dest = db::connect(&config.destination, Role::Destination).await?;
        requests::enqueue_by(
            &dest,
            &target,
            "http",
            query.scope.as_deref(),
            caller.as_deref(),
            &gate,
        )
        .await
    }
    .await;
    match made {
        Ok(id) => (
            StatusCode::ACCEPTED,
            [(header::LOCATION, format!("/requests/{id}"))],
            Json(serde_json::json!({ "id": id, "target": target })),
        )
            .into_response(),
        Err(e) => failure(&e),
    }
}

async fn set_pause(shared: &Shared, target: Option<&str>, paused: bool) -> Response {
    let config = shared.config();
    let done = async {
        if let Some(t) = target {
            config.target(t)?;
        }
        let dest = db::connect(&config.destination, Role::Destination).await?;
        if paused {
            requests::pause(&dest, target).await
        } else {
            requests::resume(&dest, target).await
        }
    }
    .await;
    match done {
        Ok(()) => Json(serde_json::json!({
            "target": target.unwrap_or("*"),
            "paused": paused,
        }))
        .into_response(),
        Err(e) => failure(&e),
    }
}

async fn pause(State(shared): State<Arc<Shared>>, Path(target): Path<String>) -> Response {
    set_pause(&shared, Some(&target), true).await
}

async fn resume(State(shared): State<Arc<Shared>>, Path(target): Path<String>) -> Response {
    set_pause(&shared, Some(&target), false).await
}

async fn pause_all(State(shared): State<Arc<Shared>>) -> Response {
    set_pause(&shared, None, true).await
}

async fn resume_all(State(shared): State<Arc<Shared>>) -> Response {
    set_pause(&shared, None, false).await
}

/// `token`'s secret, from the environment; the error says what to set.
pub(super) fn secret(token: &Token) -> Result<String, Refusal> {
    let var = &token.secret_env;
    let secret = std::env::var(var).unwrap_or_default();
    if secret.trim().len() < 16 {
        return Err(Refusal::new(
            format!(
                "token {}: the environment variable {var} is {}",
                token.name,
                if std::env::var_os(var).is_none() {
                    "not set"
                } else {
                    "too short"
                }
            ),
            format!(
                "set it to the token's secret, at least 16 characters (e.g. `export \
                 {var}=$(openssl rand -hex 24)`)"
            ),
        ));
    }
    Ok(secret.trim().to_string())
}
