//! [`FakeApi`]: the HTTP server, its request log, and the dispatch to the vendor modules.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::serve::ListenerExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::render::{Ctx, Rendered, Reply};
use crate::script::{ErrorReply, Script, Step};
use crate::wiring::{CliWiring, WiringOptions};
use crate::{FakeApiError, Vendor, anthropic, gemini, openai, sse};

/// Bodies larger than this are refused (Claude sends 48–80 KB).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// What a request was, as far as the script is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A model call answered from the script (`/v1/messages`, `/v1/responses`,
    /// `:streamGenerateContent`).
    Model,
    /// Gemini's non-streamed `:generateContent` (the model router); answered without
    /// using the script.
    Router,
    /// A model call the CLI makes on its own, beside the conversation, answered without
    /// using the script: Claude Code's structured-output session title (see
    /// `anthropic::is_side_call`), Codex's background guardian scoring (see
    /// `openai::is_side_call`).
    Side,
    /// Anything else (`HEAD /api/hello`, `count_tokens`, a WebSocket upgrade, unknown
    /// paths answered 404).
    Other,
}

/// One request as the fake received it, with what it answered.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecordedRequest {
    /// Which fake received it.
    pub vendor: Vendor,
    /// 1-based number among all requests of this fake (also in the `request-id`
    /// header of the answer, `req_fake0001`).
    pub seq: u64,
    /// Model call, router call, or other.
    pub kind: RequestKind,
    /// HTTP method.
    pub method: String,
    /// Path, without the query.
    pub path: String,
    /// Query string, with any `key=` value redacted.
    pub query: Option<String>,
    /// All headers (lower-case names); credentials keep only a short prefix
    /// (`sk-fak…REDACTED`).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON; `Null` when empty, a JSON string when not JSON.
    pub body: Value,
    /// Body size in bytes.
    pub body_len: usize,
    /// Index of the script step that answered (model requests only).
    pub step: Option<usize>,
    /// HTTP status of the answer.
    pub status: u16,
    /// What was answered, in words (`text`, `tool_use Bash`, `error 429`, …).
    pub answer: String,
}

impl RecordedRequest {
    /// The model asked for: body `model`, or the `models/<m>:` part of a Gemini path.
    pub fn model(&self) -> Option<String> {
        if let Some(m) = self.body.get("model").and_then(Value::as_str) {
            return Some(m.to_owned());
        }
        gemini_path(&self.path).map(|(m, _)| m.to_owned())
    }

    /// The tool names the request offers the model: Anthropic `tools[].name` (an MCP tool
    /// shows up there only after `ToolSearch` loaded it, still flagged
    /// `defer_loading: true`; `DeferredToolPlaceholder` stands for the others), OpenAI `tools[].name` (or the `type` of a
    /// built-in tool such as `tool_search`; a namespace `ns` with tool `t` as `ns.t`),
    /// Gemini `tools[].functionDeclarations[].name`.
    pub fn declared_tools(&self) -> Vec<String> {
        let tools = self
            .body
            .get("tools")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        // Built-in tools without a name (`tool_search`, `web_search`) go by their type.
        let name = |v: &Value| {
            v.get("name")
                .or_else(|| v.get("type"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match self.vendor {
            Vendor::Anthropic => tools.iter().filter_map(name).collect(),
            Vendor::OpenAi => tools
                .iter()
                .flat_map(|t| {
                    if t.get("type").and_then(Value::as_str) == Some("namespace") {
                        let ns = name(t).unwrap_or_default();
                        t.get("tools")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(name)
                            .map(|n| format!("{ns}.{n}"))
                            .collect::<Vec<_>>()
                    } else {
                        name(t).into_iter().collect()
                    }
                })
                .collect(),
            Vendor::Gemini => gemini::declared_functions(&self.body),
        }
    }

    /// One line: `#3 POST /v1/messages?beta=true model=… -> 200 tool_use Bash`.
    pub fn summary(&self) -> String {
        let query = self
            .query
            .as_deref()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let model = self
            .model()
            .map(|m| format!(" model={m}"))
            .unwrap_or_default();
        format!(
            "#{} {} {}{}{} ({} B) -> {} {}",
            self.seq, self.method, self.path, query, model, self.body_len, self.status, self.answer
        )
    }
}

/// State shared by the handler and the [`FakeApi`] handle.
struct Shared {
    vendor: Vendor,
    state: Mutex<Inner>,
    /// Number of model requests so far, for [`FakeApi::wait_for_requests`].
    model_requests: watch::Sender<usize>,
    /// Cancelled when the fake shuts down; hanging answers end then.
    cancel: CancellationToken,
}

struct Inner {
    script: Script,
    /// The script step the next model request gets.
    cursor: usize,
    /// With [`FakeApi::per_conversation`]: the cursor of each conversation instead (by
    /// [`conversation_key`]), so that every conversation follows the whole script.
    conversations: Option<std::collections::HashMap<u64, usize>>,
    /// When the usage limit of each [`Step::UsageLimit`] (by step index) is over: set by
    /// the first request that meets the step.
    limits: std::collections::HashMap<usize, std::time::SystemTime>,
    /// Requests so far.
    seq: u64,
    log: Vec<RecordedRequest>,
}

impl Inner {
    /// The step for a request at `cursor`, with a [`Step::UsageLimit`] resolved: while
    /// its limit holds, the usage-limit error (which does not advance); once it is over,
    /// the step after it. The last value is how far the cursor moves before the step's own
    /// advance (`None`: not at all, the limit holds).
    fn usage_limit(&mut self, cursor: usize) -> (usize, Step, Option<usize>) {
        let (index, step) = self.script.step_at(cursor);
        let Step::UsageLimit(left) = step else {
            return (index, step, Some(0));
        };
        let now = std::time::SystemTime::now();
        let until = *self.limits.entry(index).or_insert(now + left);
        if now < until {
            return (index, Step::Error(ErrorReply::usage_limit(until)), None);
        }
        match self.script.step_at(cursor + 1) {
            // The limit was the last step: what follows it is the default text.
            (next, Step::UsageLimit(_)) => (next, Step::DefaultText, Some(1)),
            (next, step) => (next, step, Some(1)),
        }
    }
}

impl Shared {
    /// The state; a poisoned lock (a panic elsewhere while holding it) is still usable
    /// because every update leaves the state consistent.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A fake model API on a local port, answering from a [`Script`] and logging every
/// request. Dropping it stops the server.
///
/// ```no_run
/// # async fn demo() -> Result<(), aicli_testkit::FakeApiError> {
/// use std::time::Duration;
/// use aicli_testkit::{FakeApi, Script, Vendor};
///
/// let fake = FakeApi::start(Vendor::Anthropic, Script::text("hi")).await?;
/// let wiring = fake.wiring(); // env + args + files that point `claude` at it
/// // … spawn claude with wiring.env …
/// let requests = fake.wait_for_requests(1, Duration::from_secs(30)).await?;
/// assert_eq!(requests[0].path, "/v1/messages");
/// # Ok(()) }
/// ```
pub struct FakeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApi")
            .field("vendor", &self.shared.vendor)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl FakeApi {
    /// Starts a fake on 127.0.0.1 with an ephemeral port.
    pub async fn start(vendor: Vendor, script: Script) -> Result<FakeApi, FakeApiError> {
        FakeApi::start_at(vendor, script, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts a fake of the Anthropic Messages API on 127.0.0.1.
    pub async fn anthropic(script: Script) -> Result<FakeApi, FakeApiError> {
        FakeApi::start(Vendor::Anthropic, script).await
    }

    /// Starts a fake of the OpenAI Responses API on 127.0.0.1.
    pub async fn openai(script: Script) -> Result<FakeApi, FakeApiError> {
        FakeApi::start(Vendor::OpenAi, script).await
    }

    /// Starts a fake of the Gemini API on 127.0.0.1.
    pub async fn gemini(script: Script) -> Result<FakeApi, FakeApiError> {
        FakeApi::start(Vendor::Gemini, script).await
    }

    /// Starts a fake on `addr` (port 0 = ephemeral).
    pub async fn start_at(
        vendor: Vendor,
        script: Script,
        addr: SocketAddr,
    ) -> Result<FakeApi, FakeApiError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| FakeApiError::Bind {
                vendor,
                addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| FakeApiError::Bind {
            vendor,
            addr,
            source,
        })?;
        let shared = Arc::new(Shared {
            vendor,
            state: Mutex::new(Inner {
                script,
                cursor: 0,
                conversations: None,
                limits: std::collections::HashMap::new(),
                seq: 0,
                log: Vec::new(),
            }),
            model_requests: watch::Sender::new(0),
            cancel: CancellationToken::new(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        // Small SSE writes stall ~40 ms each without TCP_NODELAY.
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "set_nodelay failed");
            }
        });
        let cancel = shared.cancel.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "fake API server ended with an error");
            }
        });
        tracing::debug!(%vendor, addr = %local, "fake API listening");
        Ok(FakeApi {
            addr: local,
            shared,
            task: Some(task),
        })
    }

    /// Which API this fake speaks.
    pub fn vendor(&self) -> Vendor {
        self.shared.vendor
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no path; Codex's provider `base_url` adds `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().log.clone()
    }

    /// The model requests so far (see [`RequestKind::Model`]).
    pub fn model_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.kind == RequestKind::Model)
            .collect()
    }

    /// Replaces the script and restarts it from its first step (e.g. between two runs of
    /// a resume test). The log is kept.
    pub fn set_script(&self, script: Script) {
        let mut st = self.shared.lock();
        st.script = script;
        st.cursor = 0;
        if let Some(c) = st.conversations.as_mut() {
            c.clear();
        }
    }

    /// Plays the script once per conversation instead of once in all: each CLI session
    /// (Claude's `x-claude-code-session-id`, Codex's `session-id`, else the request's
    /// first message, which holds the working directory) has its own cursor. For several
    /// tasks against one fake, each doing what the script says; a resumed session goes
    /// on where it was.
    pub fn per_conversation(&self) {
        let mut st = self.shared.lock();
        if st.conversations.is_none() {
            st.conversations = Some(Default::default());
        }
    }

    /// Waits until at least `n` model requests have arrived and returns the whole log; or
    /// fails after `timeout` with a message listing what did arrive — a test never hangs
    /// on a CLI that did not call.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, FakeApiError> {
        let mut rx = self.shared.model_requests.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|count| *count >= n)).await;
        match reached {
            Ok(Ok(_)) => Ok(self.requests()),
            Ok(Err(_)) | Err(_) => {
                let log = self.requests();
                let received = log.iter().filter(|r| r.kind == RequestKind::Model).count();
                let seen = if log.is_empty() {
                    "none".to_owned()
                } else {
                    log.iter()
                        .map(RecordedRequest::summary)
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                Err(FakeApiError::Timeout {
                    vendor: self.vendor(),
                    expected: n,
                    received,
                    waited: timeout,
                    seen,
                })
            }
        }
    }

    /// How to point this fake's CLI at it, with [`WiringOptions::default`].
    pub fn wiring(&self) -> CliWiring {
        self.wiring_with(&WiringOptions::default())
    }

    /// How to point this fake's CLI at it. A script with a usage limit signs Claude in
    /// as a subscription (see [`WiringOptions::subscription`]).
    pub fn wiring_with(&self, options: &WiringOptions) -> CliWiring {
        let options = WiringOptions {
            subscription: options.subscription || self.plays_subscription(),
            ..options.clone()
        };
        CliWiring::for_fake(self.vendor(), &self.base_url(), &options)
    }

    /// Whether the script has a usage limit, which only a subscription meets (see
    /// [`WiringOptions::subscription`]).
    pub fn plays_subscription(&self) -> bool {
        self.shared
            .lock()
            .script
            .steps()
            .iter()
            .any(|s| matches!(s, Step::UsageLimit(_)))
    }

    /// Stops the server: hanging answers end, open connections get up to one second to
    /// finish.
    pub async fn shutdown(mut self) {
        self.shared.cancel.cancel();
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(1), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Runs a fake on `addr` until `shutdown` completes (for running one by hand; see the
/// `aicli-fake-api` binary).
pub async fn serve(
    vendor: Vendor,
    script: Script,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()>,
) -> Result<(), FakeApiError> {
    let fake = FakeApi::start_at(vendor, script, addr).await?;
    shutdown.await;
    fake.shutdown().await;
    Ok(())
}

/// What the request is for, by vendor and path.
enum Route {
    Model { model: Option<String> },
    Router { model: String },
    Other(Reply),
}

/// `(model, method)` of `/v1beta/models/<model>:<method>`.
fn gemini_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.split("/models/").nth(1)?;
    rest.rsplit_once(':')
}

fn not_found(vendor: Vendor, path: &str) -> Reply {
    let body = match vendor {
        Vendor::Anthropic => {
            json!({"type": "error", "error": {"type": "not_found_error", "message": format!("Not found: {path}")}})
        }
        Vendor::OpenAi => {
            json!({"error": {"message": format!("Invalid URL (POST {path})"), "type": "invalid_request_error", "param": null, "code": null}})
        }
        Vendor::Gemini => {
            json!({"error": {"code": 404, "message": format!("Not found: {path}"), "status": "NOT_FOUND"}})
        }
    };
    Reply::Json {
        status: 404,
        headers: Vec::new(),
        body,
    }
}

fn route(
    vendor: Vendor,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    usage_input: u64,
) -> Route {
    match vendor {
        Vendor::Anthropic => match (method.as_str(), path) {
            ("POST", "/v1/messages") => Route::Model { model: None },
            ("POST", "/v1/messages/count_tokens") => Route::Other(Reply::Json {
                status: 200,
                headers: Vec::new(),
                body: json!({"input_tokens": usage_input}),
            }),
            ("HEAD" | "GET", "/api/hello") => Route::Other(Reply::Empty { status: 200 }),
            _ => Route::Other(not_found(vendor, path)),
        },
        Vendor::OpenAi => match (method.as_str(), path) {
            ("POST", "/v1/responses") => Route::Model { model: None },
            ("GET", "/v1/responses") if headers.contains_key(header::UPGRADE) => {
                // Refuse the WebSocket transport; Codex falls back to HTTPS POST.
                Route::Other(Reply::Json {
                    status: 426,
                    headers: Vec::new(),
                    body: json!({"error": {"message": "WebSocket transport is not offered by this fake", "type": "invalid_request_error", "param": null, "code": null}}),
                })
            }
            _ => Route::Other(not_found(vendor, path)),
        },
        Vendor::Gemini => match (method.as_str(), gemini_path(path)) {
            ("POST", Some((model, "streamGenerateContent"))) => Route::Model {
                model: Some(model.to_owned()),
            },
            ("POST", Some((model, "generateContent"))) => Route::Router {
                model: model.to_owned(),
            },
            ("POST", Some((_, "countTokens"))) => Route::Other(Reply::Json {
                status: 200,
                headers: Vec::new(),
                body: json!({"totalTokens": usage_input}),
            }),
            _ => Route::Other(not_found(vendor, path)),
        },
    }
}

/// Whether a model request is a call the CLI makes beside the conversation
/// ([`RequestKind::Side`]): Claude Code's session title, Codex's guardian scoring.
fn is_side_call(vendor: Vendor, body: &Value) -> bool {
    match vendor {
        Vendor::Anthropic => anthropic::is_side_call(body),
        Vendor::OpenAi => openai::is_side_call(body),
        Vendor::Gemini => false,
    }
}

/// The key the client sent: `x-api-key`, `Authorization: Bearer`, `x-goog-api-key`, or
/// a `key=` query parameter.
fn api_key(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    header("x-api-key")
        .or_else(|| {
            header("authorization").map(|a| a.strip_prefix("Bearer ").unwrap_or(&a).to_owned())
        })
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| {
            query?
                .split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .map(str::to_owned)
        })
}

/// Keeps a short prefix of a secret: `sk-fak…REDACTED`.
fn redact(secret: &str) -> String {
    let prefix: String = secret.chars().take(6).collect();
    format!("{prefix}…REDACTED")
}

const SECRET_HEADERS: [&str; 5] = [
    "x-api-key",
    "authorization",
    "x-goog-api-key",
    "cookie",
    "proxy-authorization",
];

fn record_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(name, value)| {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let v = if SECRET_HEADERS.contains(&name.as_str()) {
                match v.split_once(' ') {
                    Some((scheme, secret)) if name.as_str().ends_with("authorization") => {
                        format!("{scheme} {}", redact(secret))
                    }
                    _ => redact(&v),
                }
            } else {
                v
            };
            (name.as_str().to_owned(), v)
        })
        .collect()
}

fn record_query(query: Option<&str>) -> Option<String> {
    query.map(|q| {
        q.split('&')
            .map(|kv| match kv.strip_prefix("key=") {
                Some(secret) => format!("key={}", redact(secret)),
                None => kv.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&")
    })
}

/// The one handler: log the request, pick the answer, send it.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query();
    let vendor = shared.vendor;

    let (seq, rendered, delay) = {
        let mut st = shared.lock();
        st.seq += 1;
        let seq = st.seq;
        let usage = st.script.usage_for(vendor);
        let route = route(vendor, &parts.method, &path, &parts.headers, usage.input);
        let model_of = |m: Option<String>| {
            m.or_else(|| body.get("model").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "fake-model".to_owned())
        };
        let api_key = api_key(&parts.headers, query);
        let (kind, step_index, rendered) = match route {
            Route::Model { model } if is_side_call(vendor, &body) => {
                let ctx = Ctx {
                    seq,
                    usage,
                    model: model_of(model),
                    api_key,
                    body: &body,
                };
                let rendered = match vendor {
                    Vendor::Anthropic => anthropic::render_side(&ctx),
                    _ => render(vendor, &ctx, &Step::Text("{}".to_owned())),
                };
                (RequestKind::Side, None, rendered)
            }
            Route::Model { model } => {
                let key = st
                    .conversations
                    .is_some()
                    .then(|| conversation_key(&parts.headers, &body));
                let cursor = match (&st.conversations, key) {
                    (Some(c), Some(k)) => c.get(&k).copied().unwrap_or(0),
                    _ => st.cursor,
                };
                let (index, step, passed) = st.usage_limit(cursor);
                let ctx = Ctx {
                    seq,
                    usage,
                    model: model_of(model),
                    api_key,
                    body: &body,
                };
                let rendered = render(vendor, &ctx, &step);
                let moves = passed.map_or(0, |p| p + usize::from(rendered.advance));
                match (st.conversations.as_mut(), key) {
                    (Some(c), Some(k)) => *c.entry(k).or_insert(0) += moves,
                    _ => st.cursor += moves,
                }
                (RequestKind::Model, Some(index), rendered)
            }
            Route::Router { model } => {
                let ctx = Ctx {
                    seq,
                    usage,
                    model,
                    api_key,
                    body: &body,
                };
                let rendered = gemini::render_generate(&ctx, st.script.router_choice());
                (RequestKind::Router, None, rendered)
            }
            Route::Other(reply) => (RequestKind::Other, None, Rendered::done(reply, "")),
        };
        let status = match &rendered.reply {
            Reply::Json { status, .. } | Reply::Empty { status } => *status,
            Reply::Sse { .. } => 200,
            Reply::Hang => 0,
        };
        let answer = if rendered.note.is_empty() {
            format!("status {status}")
        } else {
            rendered.note.clone()
        };
        st.log.push(RecordedRequest {
            vendor,
            seq,
            kind,
            method: parts.method.to_string(),
            path: path.clone(),
            query: record_query(query),
            headers: record_headers(&parts.headers),
            body: body.clone(),
            body_len: bytes.len(),
            step: step_index,
            status,
            answer,
        });
        if kind == RequestKind::Model {
            shared.model_requests.send_modify(|n| *n += 1);
        }
        tracing::debug!(%vendor, seq, path, note = %rendered.note, "fake API request");
        (seq, rendered, st.script.event_delay())
    };

    respond(&shared, seq, rendered.reply, delay).await
}

fn render(vendor: Vendor, ctx: &Ctx<'_>, step: &Step) -> Rendered {
    match vendor {
        Vendor::Anthropic => anthropic::render(ctx, step),
        Vendor::OpenAi => openai::render(ctx, step),
        Vendor::Gemini => gemini::render(ctx, step),
    }
}

async fn respond(shared: &Shared, seq: u64, reply: Reply, delay: Duration) -> Response {
    let request_id = format!("req_fake{seq:04}");
    let (status, content_type, body, extra) = match reply {
        Reply::Json {
            status,
            headers,
            body,
        } => (
            status,
            Some("application/json"),
            Body::from(body.to_string()),
            headers,
        ),
        Reply::Sse { frames, end } => (
            200,
            Some("text/event-stream"),
            sse::body(frames, end, delay),
            vec![("cache-control".to_owned(), "no-cache".to_owned())],
        ),
        Reply::Empty { status } => (status, None, Body::empty(), Vec::new()),
        Reply::Hang => {
            // Answer only when the fake shuts down.
            shared.cancel.cancelled().await;
            (503, None, Body::empty(), Vec::new())
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = response.headers_mut();
    if let Some(ct) = content_type {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    for name in ["request-id", "x-request-id"] {
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    for (name, value) in extra {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            h.insert(n, v);
        }
    }
    response
}

/// Which conversation a model request belongs to: the CLI's session id where it sends
/// one in a header, else the working directories its first message names (Gemini's
/// session context: the rest of that message changes when a session is resumed: the
/// listing, a temporary directory per run), else that whole first message without its
/// cache markers.
fn conversation_key(headers: &HeaderMap, body: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let session = ["x-claude-code-session-id", "session-id"]
        .iter()
        .find_map(|k| headers.get(*k).and_then(|v| v.to_str().ok()));
    match session {
        Some(s) => s.hash(&mut h),
        None => {
            let first = ["messages", "input", "contents"]
                .iter()
                .find_map(|k| body.get(*k).and_then(Value::as_array))
                .and_then(|items| items.first())
                .cloned()
                .unwrap_or(Value::Null);
            match workspace_lines(&first) {
                Some(lines) => lines.hash(&mut h),
                None => without_cache_markers(first).to_string().hash(&mut h),
            }
        }
    }
    h.finish()
}

fn without_cache_markers(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| k != "cache_control")
                .map(|(k, v)| (k, without_cache_markers(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_cache_markers).collect()),
        v => v,
    }
}

/// The `- PATH` lines under `Workspace Directories:` in a first message's text.
fn workspace_lines(first: &Value) -> Option<String> {
    let text = first.to_string().replace("\\n", "\n");
    let start = text.find("Workspace Directories:")?;
    let lines: Vec<&str> = text[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn secrets_keep_a_prefix_only() {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-fake-secret"),
        );
        h.insert("x-api-key", HeaderValue::from_static("sk-ant-secret"));
        h.insert("user-agent", HeaderValue::from_static("codex"));
        let r = record_headers(&h);
        assert_eq!(r["authorization"], "Bearer sk-fak…REDACTED");
        assert_eq!(r["x-api-key"], "sk-ant…REDACTED");
        assert_eq!(r["user-agent"], "codex");
        assert_eq!(
            record_query(Some("alt=sse&key=AIzaSECRET")).unwrap(),
            "alt=sse&key=AIzaSE…REDACTED"
        );
        assert_eq!(api_key(&h, None).unwrap(), "sk-ant-secret");
    }

    #[test]
    fn gemini_paths() {
        assert_eq!(
            gemini_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(("gemini-2.5-flash", "streamGenerateContent"))
        );
        assert_eq!(gemini_path("/v1beta/models"), None);
    }

    #[test]
    fn a_conversation_is_its_session_id_else_its_workspace() {
        let ctx = |dir: &str, listing: &str| {
            serde_json::json!({"contents": [{"role": "user", "parts": [{"text": format!(
                "<session_context>\nThe project's temporary directory is: /t/{listing}\n- **Workspace Directories:**\n  - {dir}\n- **Directory Structure:**\n{listing}\n"
            )}]}]})
        };
        let none = HeaderMap::new();
        let a1 = conversation_key(&none, &ctx("/w/a", "run-1"));
        assert_eq!(
            a1,
            conversation_key(&none, &ctx("/w/a", "run-2 and more files")),
            "resumed"
        );
        assert_ne!(
            a1,
            conversation_key(&none, &ctx("/w/b", "run-1")),
            "another task"
        );
        let mut h = HeaderMap::new();
        h.insert("session-id", HeaderValue::from_static("s-1"));
        assert_eq!(
            conversation_key(&h, &ctx("/w/a", "x")),
            conversation_key(&h, &ctx("/w/b", "y"))
        );
        let msg = |c: Option<&str>| serde_json::json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": c}]}]});
        assert_eq!(
            conversation_key(&none, &msg(Some("ephemeral"))),
            conversation_key(&none, &msg(None))
        );
    }
}
