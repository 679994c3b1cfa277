//! The web view (`aicli web`): the run records of a repository over HTTP, as pages for
//! a browser and as a JSON API, with each task's transcript live over Server-Sent Events
//! ([`events`]). The records are the source of truth, so batches that other aicli
//! processes run show up as they run.
//!
//! Routes (every one behind [`auth`], the Host check and the connection limits):
//!
//! | route | what |
//! |---|---|
//! | `GET /login?token=T`, `POST /login` | the one-time token for a session cookie (on the page's own host name), then `/` |
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

mod actions;
mod api;
mod auth;
mod events;
mod pages;
mod post;
mod icons;
mod server_file;
mod views;
mod watch;

pub use actions::Launcher;
pub use api::WebApi;
pub use server_file::{ServerFile, check_private_dir, server_files_dir};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::McpLimits;
use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
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
    /// TLS: a PEM certificate chain and its PEM private key; the URL is then `https://`.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// How the page answers, resumes and starts (as `aicli` commands); `None`: it does
    /// not.
    pub launcher: Option<Launcher>,
    /// Watch only: no action at all, cancel included (`--read-only`).
    pub read_only: bool,
}

impl Default for WebOptions {
    fn default() -> WebOptions {
        WebOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_remote: false,
            allowed_hosts: Vec::new(),
            tls: None,
            launcher: None,
            read_only: false,
        }
    }
}

/// A running web view.
#[derive(Debug)]
pub struct WebServer {
    addr: SocketAddr,
    url: String,
    api_token: String,
    /// The server file (removed when dropped), when it could be written.
    server_file: Option<tempfile::TempPath>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    state: Shared,
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
        let tls = match &opts.tls {
            Some((cert, key)) => Some(crate::http::tls::acceptor(cert, key)?),
            None => None,
        };
        let tcp = tokio::net::TcpListener::bind(opts.bind)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", opts.bind))?;
        let addr = tcp.local_addr().map_err(|e| e.to_string())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        // On loopback over HTTP, the page lives at a host name of its own: a browser
        // scopes cookies by host, not port, so a session cookie set for 127.0.0.1 would
        // go to every other server on this machine's loopback the browser visits.
        // Browsers resolve every `*.localhost` name to loopback themselves.
        let own_host = (addr.ip().is_loopback() && tls.is_none())
            .then(|| format!("aicli-{}.localhost", hex::encode(rand::random::<[u8; 8]>())));
        let origin = match &own_host {
            Some(h) => format!("{scheme}://{h}:{}", addr.port()),
            None => format!("{scheme}://{addr}"),
        };
        let bind_ip = match addr.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let hosts = AllowedHosts::on_port(
            addr.port(),
            own_host.iter().map(String::as_str).chain([bind_ip.as_str()]),
            opts.allowed_hosts.iter().map(String::as_str),
            if tls.is_some() { 443 } else { 80 },
        );
        let auth = auth::Auth::new(tls.is_some());
        let login = auth.login_token().unwrap_or_default();
        let api_token = auth.api_token().to_owned();
        let limits: McpLimits = engine.config().engine.mcp.limits.clone();
        let launcher = if opts.read_only { None } else { opts.launcher };
        let stop = CancellationToken::new();
        let state = Arc::new(Web {
            engine,
            store,
            auth,
            hosts,
            origin: origin.clone(),
            own_host: own_host.map(|h| format!("{h}:{}", addr.port())),
            login_page: std::sync::Mutex::new(None),
            actions: actions::Actions::new(launcher),
            last_lines: views::LastLines::default(),
            read_only: opts.read_only,
            watch: watch::DirWatch::start(stop.clone()),
            stop: stop.clone(),
        });
        let app = router(state.clone());
        let conn_limits = ConnLimits {
            max_connections: limits.max_connections,
            header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(limits.idle_timeout_secs),
        };
        let shared = state.clone();
        let task = tokio::spawn(listener::serve(
            tcp,
            app,
            conn_limits,
            Arc::new(ConnStats::default()),
            stop.clone(),
            tls.clone(),
        ));
        let url = format!("{origin}/login?token={login}");
        let server_file = server_file::write(&ServerFile {
            runs_dir: std::fs::canonicalize(shared.store.root())
                .unwrap_or_else(|_| shared.store.root().to_path_buf()),
            addr,
            origin: origin.clone(),
            tls: tls.is_some(),
            pid: std::process::id(),
            api_token: api_token.clone(),
        })
        .map_err(|e| tracing::warn!(error = %e, "cannot write the web view's server file"))
        .ok();
        tracing::info!(%addr, token = %&login[..8], "web view listening");
        Ok(WebServer {
            addr,
            url,
            api_token,
            server_file,
            stop,
            task,
            state: shared,
        })
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

    /// The server file ([`ServerFile`], 0600) that holds the API token, when it was
    /// written; removed when the server stops.
    pub fn server_file(&self) -> Option<&std::path::Path> {
        self.server_file.as_deref()
    }

    /// A page that logs a browser in without the token in any process's arguments (for
    /// `--open`): an HTML file, readable by this user only, in `$XDG_RUNTIME_DIR` (else
    /// the temporary directory), whose form posts the one-time token to `/login`. It is
    /// removed once the token is used, and when the server stops. Open it as
    /// `file://PATH`.
    pub fn login_page(&self) -> std::io::Result<std::path::PathBuf> {
        let token = self
            .state
            .auth
            .login_token()
            .ok_or_else(|| std::io::Error::other("the login token was used already"))?;
        let dir = server_file::runtime_dir();
        let mut f = tempfile::Builder::new()
            .prefix("aicli-web-login-")
            .suffix(".html")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .tempfile_in(dir)?;
        std::io::Write::write_all(&mut f, pages::login_file(&self.state.origin, &token).as_bytes())?;
        let path = f.path().to_owned();
        *self.state.lock_login_page() = Some(f.into_temp_path());
        Ok(path)
    }

    /// Stops serving, and stops the commands the page started (as Ctrl-C would: their
    /// runs stop and their records are kept), waiting for them.
    pub async fn stop(mut self) {
        self.server_file.take();
        self.state.lock_login_page().take();
        self.stop.cancel();
        let _ = self.task.await;
        self.state.actions.stop().await;
    }
}

/// What the handlers share.
#[derive(Debug)]
pub(crate) struct Web {
    engine: Engine,
    store: RunStore,
    auth: auth::Auth,
    hosts: AllowedHosts,
    /// `scheme://host:port` of the page, as its URL names it.
    origin: String,
    /// The page's own host name and port (`aicli-<random>.localhost:PORT`) when it has
    /// one: a login on another loopback name is sent there, so that the cookie is set
    /// for that name alone.
    own_host: Option<String>,
    /// The file [`WebServer::login_page`] wrote, removed (dropped) once it is of no use.
    login_page: std::sync::Mutex<Option<tempfile::TempPath>>,
    actions: actions::Actions,
    last_lines: views::LastLines,
    read_only: bool,
    /// Fires when the server stops: every event stream ends then, so that the
    /// connections' graceful shutdown does not wait for them forever.
    stop: CancellationToken,
    /// The task directories the event streams follow.
    watch: watch::DirWatch,
}

type Shared = Arc<Web>;

impl Web {
    fn lock_login_page(&self) -> std::sync::MutexGuard<'_, Option<tempfile::TempPath>> {
        self.login_page.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn router(state: Shared) -> Router {
    let task = "/api/batches/{batch}/tasks/{task}";
    Router::new()
        .route("/", get(pages::index))
        .route("/static/app.css", get(pages::css))
        .route("/static/app.js", get(pages::js))
        .route("/static/icons/{file}", get(icons::serve))
        .route("/batches/{batch}", get(pages::batch))
        .route("/batches/{batch}/tasks/{task}", get(pages::task))
        .route("/batches/{batch}/tasks/{task}/files/{name}", get(api::file))
        .route("/api/session", get(api::session))
        .route("/api/login-links", post(login_link))
        .route("/api/actions", get(api::actions))
        .route("/api/actions/{id}", get(api::action))
        .route("/api/tasks", post(post::start_task))
        .route("/api/batches", get(api::batches).post(post::start_batch))
        .route("/api/blocked", get(api::blocked))
        .route("/api/batches/{batch}", get(api::batch))
        .route("/api/batches/{batch}/rows", get(api::rows))
        .route("/api/batches/{batch}/cancel", post(post::cancel_batch))
        .route("/api/batches/{batch}/resume", post(post::resume))
        .route("/api/batches/{batch}/land", post(post::land_batch))
        .route(task, get(api::task))
        .route(&format!("{task}/row"), get(api::row))
        .route(&format!("{task}/events"), get(api::task_events))
        .route(&format!("{task}/diff"), get(api::diff))
        .route(&format!("{task}/mcp-calls"), get(api::mcp_calls))
        .route(&format!("{task}/files"), get(api::files))
        .route(&format!("{task}/files/{{name}}"), get(api::file))
        .route(&format!("{task}/cancel"), post(post::cancel_task))
        .route(&format!("{task}/answer"), post(post::answer))
        .route(&format!("{task}/land"), post(post::land_task))
        .route(&format!("{task}/discard"), post(post::discard))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .route("/login", get(login).post(login_posted))
        .layer(axum::middleware::from_fn_with_state(state.clone(), hosts_and_headers))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// The Host check, and the security headers on every response.
async fn hosts_and_headers(State(w): State<Shared>, req: Request, next: Next) -> Response {
    // The login's only input is the one-time secret, and the page `--open` writes posts
    // it from a file (`Origin: null`): its Origin is not looked at.
    let checked = if req.uri().path() == "/login" {
        w.hosts.check_host(req.headers())
    } else {
        w.hosts.check(req.headers())
    };
    let mut res = match checked {
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

async fn login(State(w): State<Shared>, headers: HeaderMap, Query(q): Query<LoginQuery>) -> Response {
    log_in(&w, &headers, &q.token, false)
}

/// `POST /login` (a form with `token`): what the page `--open` writes sends.
async fn login_posted(
    State(w): State<Shared>,
    headers: HeaderMap,
    axum::Form(q): axum::Form<LoginQuery>,
) -> Response {
    log_in(&w, &headers, &q.token, true)
}

/// Exchanges the one-time token for a session cookie, on the page's own host name: a
/// login that arrives on another (a loopback address) is sent there first, with the
/// token unspent. A GET ends in a redirect to `/`; a POST (from a file, another site to
/// the browser) in a page that moves on to `/` itself, since a SameSite=Strict cookie is
/// not sent on a redirect that another site started.
fn log_in(w: &Web, headers: &HeaderMap, token: &str, posted: bool) -> Response {
    let refused = || {
        (
            StatusCode::UNAUTHORIZED,
            "this login link was used already, has expired or is wrong: `aicli web --link` in the repository prints a fresh one",
        )
            .into_response()
    };
    // Only a token's shape goes into a redirect.
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return refused();
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if let Some(own) = &w.own_host
        && !host.is_some_and(|h| h.eq_ignore_ascii_case(own))
    {
        let to = if posted {
            format!("{}/login", w.origin)
        } else {
            format!("{}/login?token={token}", w.origin)
        };
        return Redirect::temporary(&to).into_response();
    }
    let Some(s) = w.auth.log_in(token) else {
        return refused();
    };
    w.lock_login_page().take();
    let mut r = if posted {
        pages::logged_in().into_response()
    } else {
        Redirect::to("/").into_response()
    };
    if let Ok(v) = HeaderValue::from_str(&w.auth.cookie(&s)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /api/login-links`: a fresh one-time login link (good for ten minutes), for a
/// caller already in (the API token, or a browser session with its CSRF token): another
/// device or browser gets in without restarting the server.
async fn login_link(State(w): State<Shared>) -> Response {
    let token = w.auth.mint_login_token();
    axum::Json(serde_json::json!({
        "url": format!("{}/login?token={token}", w.origin),
        "expires_in_secs": auth::LOGIN_TOKEN_TTL.as_secs(),
    }))
    .into_response()
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

