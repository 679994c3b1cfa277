//! The web view (`aicli web`): the run records of a repository over HTTP, as pages for
//! a browser and as a JSON API, with each task's transcript live over Server-Sent Events
//! ([`events`]). The records are the source of truth, so batches that other aicli
//! processes run show up as they run.
//!
//! Routes (every one behind [`auth`], the Host check and the connection limits):
//!
//! | route | what |
//! |---|---|
//! | `GET /login?token=T` | the one-time token for a session cookie, then `/` |
//! | `GET /` | the batches, newest first, blocked tasks on top |
//! | `GET /batches/B` | a batch: a row per task (provider, status, tokens, cost) |
//! | `GET /batches/B/tasks/T` | a task: attempts, response, its transcript live (`static/app.js`) |
//! | `GET /api/session` | the session's CSRF token |
//! | `GET /api/batches` | every batch's summary, newest first |
//! | `GET /api/blocked` | every blocked task, with its question |
//! | `GET /api/batches/B` | a batch: its summary and its tasks' records |
//! | `GET /api/batches/B/tasks/T` | a task's record |
//! | `GET /api/batches/B/tasks/T/events` | its normalized events, live (SSE, `Last-Event-ID`) |
//! | `POST /api/batches/B/cancel`, `POST /api/batches/B/tasks/T/cancel` | a cancel request into the record |
//!
//! Every response has a strict Content-Security-Policy (no inline script), `nosniff`,
//! `no-referrer` and `no-store`; there are no CORS headers.

mod auth;
mod events;
mod pages;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::McpLimits;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::http::AllowedHosts;
use crate::http::listener::{self, ConnLimits, ConnStats};
use crate::record::RunStore;

/// The Content-Security-Policy of every response.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The largest request body accepted.
const MAX_BODY: usize = 64 * 1024;

/// Where and how the web view listens.
#[derive(Debug, Clone)]
pub struct WebOptions {
    /// The address (default `127.0.0.1:0`: loopback, a free port).
    pub bind: SocketAddr,
    /// Whether a non-loopback `bind` is allowed (`--allow-remote`).
    pub allow_remote: bool,
    /// Host names besides loopback and the bind address that requests may name.
    pub allowed_hosts: Vec<String>,
}

impl Default for WebOptions {
    fn default() -> WebOptions {
        WebOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_remote: false,
            allowed_hosts: Vec::new(),
        }
    }
}

/// A running web view.
#[derive(Debug)]
pub struct WebServer {
    addr: SocketAddr,
    url: String,
    api_token: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl WebServer {
    /// Serves `store`'s records with `engine`'s providers (for decoding) and limits.
    pub async fn start(engine: Engine, store: RunStore, opts: WebOptions) -> Result<WebServer, String> {
        if !opts.bind.ip().is_loopback() && !opts.allow_remote {
            return Err(format!(
                "--bind {}: not a loopback address; the web view runs agents on this machine, so binding it elsewhere needs --allow-remote",
                opts.bind
            ));
        }
        let tcp = tokio::net::TcpListener::bind(opts.bind)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", opts.bind))?;
        let addr = tcp.local_addr().map_err(|e| e.to_string())?;
        let bind_host = addr.to_string();
        let hosts = AllowedHosts::new(
            std::iter::once(bind_host.as_str()).chain(opts.allowed_hosts.iter().map(String::as_str)),
        );
        let auth = auth::Auth::new();
        let login = auth.login_token().unwrap_or_default();
        let api_token = auth.api_token().to_owned();
        let limits: McpLimits = engine.config().engine.mcp.limits.clone();
        let state = Arc::new(Web { engine, store, auth, hosts });
        let app = router(state);
        let stop = CancellationToken::new();
        let conn_limits = ConnLimits {
            max_connections: limits.max_connections,
            header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(limits.idle_timeout_secs),
        };
        let task = tokio::spawn(listener::serve(
            tcp,
            app,
            conn_limits,
            Arc::new(ConnStats::default()),
            stop.clone(),
        ));
        let url = format!("http://{addr}/login?token={login}");
        tracing::info!(%addr, token = %&login[..8], "web view listening");
        Ok(WebServer { addr, url, api_token, stop, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open: it holds the one-time login token.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token for `Authorization: Bearer` (scripts, other tools).
    pub fn api_token(&self) -> &str {
        &self.api_token
    }

    /// Stops serving.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct Web {
    engine: Engine,
    store: RunStore,
    auth: auth::Auth,
    hosts: AllowedHosts,
}

type Shared = Arc<Web>;

fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(pages::index))
        .route("/static/app.css", get(pages::css))
        .route("/static/app.js", get(pages::js))
        .route("/batches/{batch}", get(pages::batch))
        .route("/batches/{batch}/tasks/{task}", get(pages::task))
        .route("/api/session", get(session))
        .route("/api/batches", get(batches))
        .route("/api/blocked", get(blocked))
        .route("/api/batches/{batch}", get(batch))
        .route("/api/batches/{batch}/cancel", post(cancel_batch))
        .route("/api/batches/{batch}/tasks/{task}", get(task))
        .route("/api/batches/{batch}/tasks/{task}/events", get(task_events))
        .route("/api/batches/{batch}/tasks/{task}/cancel", post(cancel_task))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .route("/login", get(login))
        .layer(axum::middleware::from_fn_with_state(state.clone(), hosts_and_headers))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// The Host check, and the security headers on every response.
async fn hosts_and_headers(State(w): State<Shared>, req: Request, next: Next) -> Response {
    let mut res = match w.hosts.check(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(why) => (StatusCode::FORBIDDEN, why).into_response(),
    };
    let h = res.headers_mut();
    for (k, v) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    res
}

/// Every route but `/login` needs a session cookie (plus the CSRF token on a POST) or
/// the API token.
async fn guard(State(w): State<Shared>, mut req: Request, next: Next) -> Response {
    match w.auth.check(req.method(), req.headers()) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(auth::Refusal::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            "open the URL `aicli web` printed (it logs this browser in), or send Authorization: Bearer",
        )
            .into_response(),
        Err(auth::Refusal::NoCsrf) => {
            (StatusCode::FORBIDDEN, "missing or wrong X-CSRF-Token").into_response()
        }
    }
}

#[derive(serde::Deserialize)]
struct LoginQuery {
    token: String,
}

async fn login(State(w): State<Shared>, Query(q): Query<LoginQuery>) -> Response {
    match w.auth.log_in(&q.token) {
        Some(s) => {
            let mut r = Redirect::to("/").into_response();
            if let Ok(v) = HeaderValue::from_str(&auth::Auth::cookie(&s)) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        None => (
            StatusCode::UNAUTHORIZED,
            "this login link was used already or is wrong: restart `aicli web` for a new one",
        )
            .into_response(),
    }
}

async fn session(req: Request) -> Response {
    match req.extensions().get::<auth::Caller>() {
        Some(auth::Caller::Browser(s)) => axum::Json(serde_json::json!({"csrf": s.csrf})).into_response(),
        _ => axum::Json(serde_json::json!({"csrf": null})).into_response(),
    }
}

/// An id from a URL: letters, digits, `.`, `_` and `-`, not starting with `.` (so never
/// a path out of the records).
fn checked_id(id: &str) -> Result<&str, BadId> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok { Ok(id) } else { Err(BadId(id.to_owned())) }
}

/// An id in a URL that is not one: 400.
struct BadId(String);

impl IntoResponse for BadId {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, format!("not an id: {:?}", self.0)).into_response()
    }
}

fn not_found(m: String) -> Response {
    (StatusCode::NOT_FOUND, m).into_response()
}

async fn batches(State(w): State<Shared>) -> Response {
    let list: Vec<_> = w.store.list().iter().filter_map(|b| b.summary().ok()).collect();
    axum::Json(list).into_response()
}

async fn blocked(State(w): State<Shared>) -> Response {
    axum::Json(w.engine.blocked(&w.store)).into_response()
}

async fn batch(State(w): State<Shared>, Path(b): Path<String>) -> Result<Response, BadId> {
    let rec = match w.store.open_batch(checked_id(&b)?) {
        Ok(r) => r,
        Err(m) => return Ok(not_found(m)),
    };
    let summary = rec.summary().ok();
    let tasks = rec.tasks().unwrap_or_default();
    Ok(axum::Json(serde_json::json!({"summary": summary, "tasks": tasks})).into_response())
}

async fn task(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Result<Response, BadId> {
    let (b, t) = (checked_id(&b)?, checked_id(&t)?);
    Ok(match w.store.open_batch(b).and_then(|r| r.task(t)) {
        Ok(rec) => axum::Json(rec).into_response(),
        Err(m) => not_found(m),
    })
}

async fn task_events(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, BadId> {
    let (b, t) = (checked_id(&b)?, checked_id(&t)?);
    let rec = match w.store.open_batch(b) {
        Ok(r) if r.task(t).is_ok() => r,
        Ok(_) => return Ok(not_found(format!("no task {t} in batch {b}"))),
        Err(m) => return Ok(not_found(m)),
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(events::Position::parse);
    let rx = events::stream(
        rec,
        t.to_owned(),
        w.engine.registry().clone(),
        w.engine.config().engine.line_cap_bytes,
        after,
    );
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (e, rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

async fn cancel_batch(
    State(w): State<Shared>,
    Path(b): Path<String>,
) -> Result<Response, BadId> {
    Ok(cancel(&w, checked_id(&b)?.to_owned()))
}

async fn cancel_task(
    State(w): State<Shared>,
    Path((b, t)): Path<(String, String)>,
) -> Result<Response, BadId> {
    let (b, t) = (checked_id(&b)?, checked_id(&t)?);
    Ok(cancel(&w, format!("{b}/{t}")))
}

fn cancel(w: &Web, target: String) -> Response {
    match w.engine.request_cancel(&w.store, &target, "web") {
        Ok(t) => (
            StatusCode::ACCEPTED,
            axum::Json(serde_json::json!({
                "batch_id": t.batch.batch_id(),
                "task": t.task,
                "cancelling": t.held,
            })),
        )
            .into_response(),
        Err(crate::engine::EngineError::NotFound(m)) => not_found(m),
        Err(e) => (StatusCode::CONFLICT, e.to_string()).into_response(),
    }
}
