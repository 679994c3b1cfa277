//! Who may call: bearer tokens bound to a [`TaskContext`], sessions bound to the token
//! that created them, and the Host/Origin checks against DNS rebinding.
//!
//! Every request to `/mcp` passes [`gate`] before rmcp sees it:
//!
//! 1. `Host` (and `Origin`, when a browser sent one) must name loopback, the bind host or
//!    a configured extra host; otherwise 403.
//! 2. `Authorization: Bearer <64 hex chars>` must name a live token; otherwise 401 with
//!    `WWW-Authenticate: Bearer` and a JSON body. The scheme is case-insensitive and
//!    one or more spaces follow it (RFC 9110 §11.4, `auth-scheme 1*SP token68`); the
//!    token has one spelling, lower-case hex as minted (upper-case hex, a tab, anything
//!    after the token: 401). The token is compared in constant time
//!    ([`subtle`]) against the live tokens that share its first 8 hex characters (the
//!    only part of a token that is ever logged).
//! 3. An `Mcp-Session-Id` must have been created by the same token; another token's (or
//!    an unknown) session id gets 404, as for a session that does not exist.
//! 4. A token restricted to an address (a container's on the bridge, see
//!    [`Tokens::restrict`]) works only in requests from that address; from anywhere else
//!    403. A token minted [`PeerRule::Pending`] (its container is starting) holds its
//!    requests until the address is known (at most [`PENDING_WAIT`]), so no request
//!    slips through before the restriction.
//! 5. A `Content-Length` over `mcp.limits.max_body_bytes` gets 413 from the head alone,
//!    before any of the body is read (rmcp's own limit counts bytes as they arrive).
//! 6. The caller ([`Caller`]: the token's id and its task context) goes into the request
//!    extensions, where rmcp hands it on to the tools inside `http::request::Parts`.
//!
//! A new session id in a response is bound to the caller's token; a successful `DELETE`
//! unbinds it. Revoking a token drops it, unbinds its sessions and closes them in rmcp.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::RngCore;
use subtle::ConstantTimeEq;

use super::TaskContext;
use super::server::Shared;

/// The session header of the streamable HTTP transport.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";

/// Bytes of randomness in a token (64 hex characters).
const TOKEN_BYTES: usize = 32;
/// Bytes of a token that may appear in logs and index the table (8 hex characters).
const PREFIX_BYTES: usize = 4;

/// The first 8 characters of a token: all that is ever logged.
pub(crate) fn token_prefix(token: &str) -> &str {
    let end = token
        .char_indices()
        .nth(2 * PREFIX_BYTES)
        .map_or(token.len(), |(i, _)| i);
    &token[..end]
}

/// The authenticated caller of one request.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    /// Internal id of the token (sessions are bound to it).
    pub token_id: u64,
    /// The token's 8-character prefix, for logs.
    pub prefix: Arc<str>,
    /// The task the token was minted for.
    pub ctx: Arc<TaskContext>,
    /// Where requests with this token may come from.
    pub peer: PeerRule,
    /// Cancelled when the token is revoked (its task run ended) or the server stops:
    /// what its tool calls are still running is killed then.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// Where requests with a token may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRule {
    /// Anywhere that reaches the server.
    Any,
    /// One address, not known yet (the run is starting): requests wait for it.
    Pending,
    /// Only this address.
    Only(IpAddr),
}

/// How long a request with a [`PeerRule::Pending`] token waits for its address.
pub(crate) const PENDING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

struct Entry {
    id: u64,
    secret: [u8; TOKEN_BYTES],
    caller: Caller,
}

#[derive(Default)]
struct Inner {
    /// Live tokens by their first bytes (almost always one per bucket).
    by_prefix: HashMap<[u8; PREFIX_BYTES], Vec<Entry>>,
    /// Session id -> the token id that created it.
    sessions: HashMap<String, u64>,
    /// Token id -> its sessions, to close them on revoke.
    sessions_by_token: HashMap<u64, HashSet<String>>,
    /// Token id -> requests without a session in flight (each may open one).
    pending: HashMap<u64, usize>,
    next_id: u64,
}

/// Live tokens and session bindings.
#[derive(Default)]
pub(crate) struct Tokens {
    inner: RwLock<Inner>,
}

/// Why a request was refused with 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No `Authorization` header, or not the Bearer scheme.
    Missing,
    /// A Bearer token that is not 64 lower-case hex characters.
    Malformed,
    /// A well-formed token that is not live (never minted, or revoked).
    Unknown,
}

impl AuthFailure {
    fn describe(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing bearer token: send 'Authorization: Bearer <token>'",
            AuthFailure::Malformed => "malformed bearer token",
            AuthFailure::Unknown => "unknown or revoked bearer token",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Malformed => "malformed",
            AuthFailure::Unknown => "unknown_or_revoked",
        }
    }
}

impl Tokens {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh token for `ctx` (32 random bytes, hex) usable from where `peer` says.
    /// `cancel` is the token's own cancellation (a child of the server's), cancelled
    /// when it is revoked.
    pub(crate) fn mint_with(
        &self,
        ctx: TaskContext,
        peer: PeerRule,
        cancel: tokio_util::sync::CancellationToken,
    ) -> String {
        let mut secret = [0u8; TOKEN_BYTES];
        rand::rng().fill_bytes(&mut secret);
        let token = hex::encode(secret);
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix.copy_from_slice(&secret[..PREFIX_BYTES]);
        let mut inner = self.write();
        inner.next_id += 1;
        let id = inner.next_id;
        let caller = Caller {
            token_id: id,
            prefix: Arc::from(token_prefix(&token)),
            ctx: Arc::new(ctx),
            peer,
            cancel,
        };
        tracing::debug!(token = %caller.prefix, task_id = %caller.ctx.task_id, batch_id = %caller.ctx.batch_id, "minted MCP token");
        inner
            .by_prefix
            .entry(prefix)
            .or_default()
            .push(Entry { id, secret, caller });
        token
    }

    /// The caller of a live `token`, if it is one.
    pub(crate) fn caller_of(&self, token: &str) -> Option<Caller> {
        let secret = parse_token(token).ok()?;
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix.copy_from_slice(&secret[..PREFIX_BYTES]);
        let inner = self.read();
        inner
            .by_prefix
            .get(&prefix)?
            .iter()
            .find(|e| bool::from(e.secret.ct_eq(&secret)))
            .map(|e| e.caller.clone())
    }

    /// Every live token's caller.
    pub(crate) fn callers(&self) -> Vec<Caller> {
        self.read()
            .by_prefix
            .values()
            .flatten()
            .map(|e| e.caller.clone())
            .collect()
    }

    /// Drops `token` (cancelling its calls); returns its sessions (now unbound) for the
    /// caller to close.
    pub(crate) fn revoke(&self, token: &str) -> Vec<String> {
        let Ok(secret) = parse_token(token) else {
            return Vec::new();
        };
        let mut inner = self.write();
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix.copy_from_slice(&secret[..PREFIX_BYTES]);
        let mut removed = None;
        if let Some(bucket) = inner.by_prefix.get_mut(&prefix) {
            if let Some(pos) = bucket
                .iter()
                .position(|e| bool::from(e.secret.ct_eq(&secret)))
            {
                removed = Some(bucket.swap_remove(pos));
            }
            if bucket.is_empty() {
                inner.by_prefix.remove(&prefix);
            }
        }
        let Some(entry) = removed else {
            return Vec::new();
        };
        entry.caller.cancel.cancel();
        inner.pending.remove(&entry.id);
        let sessions: Vec<String> = inner
            .sessions_by_token
            .remove(&entry.id)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        for s in &sessions {
            inner.sessions.remove(s);
        }
        tracing::debug!(token = %entry.caller.prefix, task_id = %entry.caller.ctx.task_id, sessions = sessions.len(), "revoked MCP token");
        sessions
    }

    /// Restricts `token` to requests from `peer`; false when it is not live.
    pub(crate) fn restrict(&self, token: &str, peer: IpAddr) -> bool {
        let Ok(secret) = parse_token(token) else {
            return false;
        };
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix.copy_from_slice(&secret[..PREFIX_BYTES]);
        let mut inner = self.write();
        let Some(bucket) = inner.by_prefix.get_mut(&prefix) else {
            return false;
        };
        for e in bucket.iter_mut() {
            if bool::from(e.secret.ct_eq(&secret)) {
                e.caller.peer = PeerRule::Only(peer);
                tracing::debug!(token = %e.caller.prefix, task_id = %e.caller.ctx.task_id, %peer, "MCP token restricted to one address");
                return true;
            }
        }
        false
    }

    /// The caller named by the request's `Authorization` header.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthFailure> {
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or(AuthFailure::Missing)?
            .to_str()
            .map_err(|_| AuthFailure::Malformed)?;
        // RFC 9110 §5.5: whitespace around a field value is not part of it (hyper strips
        // it; so does this, whatever carried the header).
        let value = value.trim_matches([' ', '\t']);
        // RFC 9110 §11.4 (and RFC 6750 §2.1): `auth-scheme 1*SP token68`, the scheme in
        // any case; between them one or more spaces, never a tab.
        let (scheme, rest) = value.split_once(' ').ok_or(AuthFailure::Missing)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthFailure::Missing);
        }
        let secret =
            parse_token(rest.trim_start_matches(' ')).map_err(|()| AuthFailure::Malformed)?;
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix.copy_from_slice(&secret[..PREFIX_BYTES]);
        let inner = self.read();
        let bucket = inner.by_prefix.get(&prefix).ok_or(AuthFailure::Unknown)?;
        // Constant-time over the whole secret; the bucket key is the loggable prefix.
        let mut found = None;
        for e in bucket {
            if bool::from(e.secret.ct_eq(&secret)) {
                found = Some(e.caller.clone());
            }
        }
        found.ok_or(AuthFailure::Unknown)
    }

    /// The token id that created `session`, if any.
    pub(crate) fn session_owner(&self, session: &str) -> Option<u64> {
        self.read().sessions.get(session).copied()
    }

    /// Binds a new session to a token; false when the token was revoked meanwhile.
    pub(crate) fn bind_session(&self, session: &str, token_id: u64) -> bool {
        let mut inner = self.write();
        let live = inner
            .by_prefix
            .values()
            .any(|b| b.iter().any(|e| e.id == token_id));
        if !live {
            return false;
        }
        inner.sessions.insert(session.to_owned(), token_id);
        inner
            .sessions_by_token
            .entry(token_id)
            .or_default()
            .insert(session.to_owned());
        true
    }

    /// Holds a place for a session `token_id` may open, if it holds fewer than `limit`
    /// (counting the places already held); `false` when it may not open one more.
    pub(crate) fn reserve_session(&self, token_id: u64, limit: usize) -> bool {
        let mut inner = self.write();
        let open = inner
            .sessions_by_token
            .get(&token_id)
            .map_or(0, HashSet::len);
        let pending = inner.pending.get(&token_id).copied().unwrap_or(0);
        if open + pending >= limit {
            return false;
        }
        *inner.pending.entry(token_id).or_default() += 1;
        true
    }

    /// Gives back a place [`Tokens::reserve_session`] held (the session, if one was
    /// opened, is bound by then).
    pub(crate) fn release_session(&self, token_id: u64) {
        let mut inner = self.write();
        if let Some(n) = inner.pending.get_mut(&token_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.pending.remove(&token_id);
            }
        }
    }

    /// Forgets a session (closed by the client or expired in rmcp).
    pub(crate) fn unbind_session(&self, session: &str) {
        let mut inner = self.write();
        if let Some(id) = inner.sessions.remove(session)
            && let Some(set) = inner.sessions_by_token.get_mut(&id)
        {
            set.remove(session);
            if set.is_empty() {
                inner.sessions_by_token.remove(&id);
            }
        }
    }

    /// All bound session ids (for the sweep of sessions rmcp expired).
    pub(crate) fn bound_sessions(&self) -> Vec<String> {
        self.read().sessions.keys().cloned().collect()
    }

    /// Number of live tokens.
    pub(crate) fn live(&self) -> usize {
        self.read().by_prefix.values().map(Vec::len).sum()
    }
}

/// Decodes a token spelled as minted: exactly 64 lower-case hex characters. The same
/// bytes in upper-case hex are another spelling, refused: a token has one. (What is
/// checked here is the presented string's shape; the secret itself is compared in
/// constant time after.)
fn parse_token(token: &str) -> Result<[u8; TOKEN_BYTES], ()> {
    let mut out = [0u8; TOKEN_BYTES];
    if token.len() != 2 * TOKEN_BYTES
        || !token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(());
    }
    hex::decode_to_slice(token, &mut out).map_err(|_| ())?;
    Ok(out)
}

/// Hosts a request may name (Host, and Origin's host), compiled from the options.
#[derive(Debug, Clone)]
pub(crate) struct AllowedHosts {
    /// (lower-case host without brackets, port if the entry pins one).
    entries: Vec<(String, Option<u16>)>,
}

impl AllowedHosts {
    /// Loopback names, plus `extra` (the bind host and the configured hosts).
    pub(crate) fn new<'a>(extra: impl IntoIterator<Item = &'a str>) -> AllowedHosts {
        let mut entries: Vec<(String, Option<u16>)> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|h| ((*h).to_owned(), None))
            .collect();
        for e in extra {
            if let Some(parsed) = parse_authority(e) {
                entries.push(parsed);
            }
        }
        entries.sort();
        entries.dedup();
        AllowedHosts { entries }
    }

    /// The entries as rmcp's `allowed_hosts` wants them.
    pub(crate) fn for_rmcp(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|(h, p)| {
                let h = if h.contains(':') {
                    format!("[{h}]")
                } else {
                    h.clone()
                };
                match p {
                    Some(p) => format!("{h}:{p}"),
                    None => h,
                }
            })
            .collect()
    }

    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        self.entries
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| Some(p) == port))
    }

    /// Checks `Host` and, when present, `Origin`.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or("missing or unreadable Host header")?;
        let (h, p) = parse_authority(host).ok_or("malformed Host header")?;
        if !self.allows(&h, p) {
            return Err("Host header is not allowed");
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().map_err(|_| "unreadable Origin header")?;
            let rest = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .ok_or("Origin is not allowed")?;
            let (h, p) = parse_authority(rest.trim_end_matches('/')).ok_or("malformed Origin")?;
            if !self.allows(&h, p) {
                return Err("Origin is not allowed");
            }
        }
        Ok(())
    }
}

/// `host[:port]` or `[v6][:port]` -> (lower-case host without brackets, port).
fn parse_authority(s: &str) -> Option<(String, Option<u16>)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((h.to_ascii_lowercase(), port));
    }
    match s.matches(':').count() {
        0 => Some((s.to_ascii_lowercase(), None)),
        1 => {
            let (h, p) = s.split_once(':')?;
            Some((h.to_ascii_lowercase(), Some(p.parse().ok()?)))
        }
        // A bare IPv6 address (only in configuration).
        _ => Some((s.to_ascii_lowercase(), None)),
    }
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// 413 for a request whose `Content-Length` is over `max` (`mcp.limits.max_body_bytes`),
/// answered from the head alone: rmcp counts a body's bytes only as they arrive, so a
/// client announcing more than it sends would hold the connection until the idle close.
/// The body is never read, so the connection is closed after the answer.
fn announced_too_large(headers: &HeaderMap, max: usize) -> Option<Response> {
    let length: u64 = headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if length <= u64::try_from(max).unwrap_or(u64::MAX) {
        return None;
    }
    let mut resp = json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        serde_json::json!({
            "error": "payload_too_large",
            "error_description": format!(
                "the request body (Content-Length {length}) is over mcp.limits.max_body_bytes ({max} bytes)"
            ),
        }),
    );
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    Some(resp)
}

/// 401 with `WWW-Authenticate: Bearer` and a JSON body.
pub(crate) fn unauthorized(failure: AuthFailure) -> Response {
    let (challenge, error) = match failure {
        AuthFailure::Missing => (r#"Bearer realm="aicli""#.to_owned(), "unauthorized"),
        AuthFailure::Malformed | AuthFailure::Unknown => (
            format!(
                r#"Bearer realm="aicli", error="invalid_token", error_description="{}""#,
                failure.describe()
            ),
            "invalid_token",
        ),
    };
    let mut resp = json_response(
        StatusCode::UNAUTHORIZED,
        serde_json::json!({"error": error, "error_description": failure.describe()}),
    );
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

fn session_not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        serde_json::json!({"error": "not_found", "error_description": "session not found"}),
    )
}

/// The middleware in front of rmcp (see the module docs).
pub(crate) async fn gate(
    State(shared): State<Arc<Shared>>,
    mut req: Request<Body>,
    next: Next,
) -> Response {
    if let Err(why) = shared.hosts.check(req.headers()) {
        tracing::warn!(reason = why, "refused MCP request (DNS rebinding check)");
        return json_response(
            StatusCode::FORBIDDEN,
            serde_json::json!({"error": "forbidden", "error_description": why}),
        );
    }
    let caller = match shared.tokens.authenticate(req.headers()) {
        Ok(c) => c,
        Err(failure) => {
            tracing::info!(
                reason = failure.reason(),
                method = %req.method(),
                "refused MCP request: 401"
            );
            return unauthorized(failure);
        }
    };
    let mut caller = caller;
    if caller.peer == PeerRule::Pending {
        // The run is starting: wait until its address is known (or the token is gone).
        let deadline = tokio::time::Instant::now() + PENDING_WAIT;
        while caller.peer == PeerRule::Pending && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            match shared.tokens.authenticate(req.headers()) {
                Ok(c) => caller = c,
                Err(failure) => return unauthorized(failure),
            }
        }
    }
    let only = match caller.peer {
        PeerRule::Any => None,
        PeerRule::Only(ip) => Some(Some(ip)),
        PeerRule::Pending => Some(None),
    };
    if let Some(only) = only {
        let from = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        if only.is_none() || from != only {
            tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, from = ?from, "refused MCP request: the token is not valid from this address");
            return json_response(
                StatusCode::FORBIDDEN,
                serde_json::json!({"error": "forbidden", "error_description": "this token is not valid from this address"}),
            );
        }
    }
    if let Some(refused) = announced_too_large(req.headers(), shared.limits.max_body_bytes) {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, "refused MCP request: 413, its Content-Length is over mcp.limits.max_body_bytes");
        return refused;
    }
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(sid) = &session
        && shared.tokens.session_owner(sid) != Some(caller.token_id)
    {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, "refused MCP request: session not created by this token");
        return session_not_found();
    }
    let is_delete = req.method() == Method::DELETE;
    // A request without a session may open one: at most `max_sessions_per_token` per
    // token (sessions open plus such requests in flight).
    let limit = shared.limits.max_sessions_per_token;
    let reserved = session.is_none() && req.method() == Method::POST;
    if reserved && !shared.tokens.reserve_session(caller.token_id, limit) {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, limit, "refused MCP request: too many sessions for this token");
        return json_response(
            StatusCode::TOO_MANY_REQUESTS,
            serde_json::json!({
                "error": "too_many_sessions",
                "error_description": format!(
                    "this token holds {limit} MCP sessions (mcp.limits.max_sessions_per_token); close one (DELETE) or wait for an idle one to expire"
                ),
            }),
        );
    }
    let json_body = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
        });
    req.extensions_mut().insert(caller.clone());
    let resp = next.run(req).await;
    match &session {
        None => {
            let opened = resp
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bound = opened
                .as_deref()
                .map(|sid| (sid, shared.tokens.bind_session(sid, caller.token_id)));
            if reserved {
                shared.tokens.release_session(caller.token_id);
            }
            match bound {
                Some((_, true)) => {
                    tracing::debug!(token = %caller.prefix, task_id = %caller.ctx.task_id, "MCP session opened");
                }
                Some((sid, false)) => {
                    // Revoked while initializing: close what rmcp just opened.
                    shared.close_sessions(vec![sid.to_owned()]);
                    return unauthorized(AuthFailure::Unknown);
                }
                None => {}
            }
        }
        Some(sid) => {
            if is_delete && resp.status().is_success() {
                shared.tokens.unbind_session(sid);
            }
        }
    }
    if resp.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE && json_body {
        // rmcp answers a JSON body that does not parse with 415; the media type was
        // right, the body was not: 400 with a JSON-RPC parse error.
        return malformed_body(resp).await;
    }
    resp
}

/// 400 with a JSON-RPC parse error carrying rmcp's reason (cut to 1,000 characters).
async fn malformed_body(resp: Response) -> Response {
    let reason = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .map(|b| {
            String::from_utf8_lossy(&b)
                .chars()
                .take(1000)
                .collect::<String>()
        })
        .unwrap_or_default();
    json_response(
        StatusCode::BAD_REQUEST,
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32700, "message": format!("Parse error: the request body is not a JSON-RPC message ({reason})")},
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> TaskContext {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        TaskContext {
            batch_id: "b".into(),
            task_id: "t".into(),
            workspace: "/tmp".into(),
            skills: vec![],
            credentials: vec![],
            tools: vec![],
            record_dir: None,
            attempt: 1,
            events: tx,
        }
    }

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
        h
    }

    #[test]
    fn mint_authenticate_revoke() {
        let tokens = Tokens::default();
        let t = tokens.mint_with(
            ctx(),
            PeerRule::Any,
            tokio_util::sync::CancellationToken::new(),
        );
        assert_eq!(t.len(), 64);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
        let c = tokens.authenticate(&bearer(&t)).unwrap();
        assert_eq!(c.ctx.task_id, "t");
        assert_eq!(&*c.prefix, &t[..8]);
        assert_eq!(
            tokens.authenticate(&HeaderMap::new()).unwrap_err(),
            AuthFailure::Missing
        );
        assert_eq!(
            tokens.authenticate(&bearer("abc")).unwrap_err(),
            AuthFailure::Malformed
        );
        let mut other = t.clone().into_bytes();
        other[63] = if other[63] == b'0' { b'1' } else { b'0' };
        let other = String::from_utf8(other).unwrap();
        assert_eq!(
            tokens.authenticate(&bearer(&other)).unwrap_err(),
            AuthFailure::Unknown
        );
        assert!(tokens.bind_session("s1", c.token_id));
        assert_eq!(tokens.session_owner("s1"), Some(c.token_id));
        assert_eq!(tokens.revoke(&t), vec!["s1".to_owned()]);
        assert_eq!(tokens.session_owner("s1"), None);
        assert_eq!(
            tokens.authenticate(&bearer(&t)).unwrap_err(),
            AuthFailure::Unknown
        );
        assert!(!tokens.bind_session("s2", c.token_id));
    }

    #[test]
    fn the_scheme_is_any_case_the_token_has_one_spelling() {
        let tokens = Tokens::default();
        let t = tokens.mint_with(
            ctx(),
            PeerRule::Any,
            tokio_util::sync::CancellationToken::new(),
        );
        let auth = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            tokens.authenticate(&h).map(|_| ())
        };
        for ok in [
            format!("Bearer {t}"),
            format!("bearer {t}"),
            format!("BEARER {t}"),
            // 1*SP (RFC 9110 §11.4), and whitespace around the field value (§5.5).
            format!("Bearer  {t}"),
            format!(" Bearer {t}\t"),
        ] {
            assert_eq!(auth(&ok), Ok(()), "{ok:?}");
        }
        let upper = t.to_ascii_uppercase();
        // One letter upper-cased (64 hex digits without a letter: odds of 1e-13).
        let at = t.find(|c: char| c.is_ascii_alphabetic()).unwrap();
        let mut mixed = t.clone();
        mixed.replace_range(at..=at, &t[at..=at].to_ascii_uppercase());
        for (bad, why) in [
            (format!("Bearer {upper}"), AuthFailure::Malformed),
            (format!("Bearer {mixed}"), AuthFailure::Malformed),
            (format!("Bearer \t{t}"), AuthFailure::Malformed),
            (format!("Bearer {t} x"), AuthFailure::Malformed),
            (format!("Bearer {t}0"), AuthFailure::Malformed),
            (format!("Bearer\t{t}"), AuthFailure::Missing),
            (format!("Bearer{t}"), AuthFailure::Missing),
            (format!("Token {t}"), AuthFailure::Missing),
        ] {
            assert_eq!(auth(&bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn host_checks() {
        let hosts = AllowedHosts::new(["172.17.0.1", "host.docker.internal:8080"]);
        let check = |host: &str, origin: Option<&str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            if let Some(o) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
            }
            hosts.check(&h)
        };
        assert!(check("127.0.0.1:4000", None).is_ok());
        assert!(check("localhost", None).is_ok());
        assert!(check("[::1]:4000", None).is_ok());
        assert!(check("172.17.0.1:4000", None).is_ok());
        assert!(check("host.docker.internal:8080", None).is_ok());
        assert!(check("host.docker.internal:9090", None).is_err());
        assert!(check("evil.example:4000", None).is_err());
        assert!(check("127.0.0.1:4000", Some("http://localhost:3000")).is_ok());
        assert!(check("127.0.0.1:4000", Some("http://evil.example")).is_err());
        assert!(check("127.0.0.1:4000", Some("null")).is_err());
        assert!(
            hosts
                .for_rmcp()
                .contains(&"host.docker.internal:8080".to_owned())
        );
        assert!(hosts.for_rmcp().contains(&"[::1]".to_owned()));
    }

    #[test]
    fn a_pending_token_gets_one_address() {
        let tokens = Tokens::default();
        let t = tokens.mint_with(
            ctx(),
            PeerRule::Pending,
            tokio_util::sync::CancellationToken::new(),
        );
        assert_eq!(
            tokens.authenticate(&bearer(&t)).unwrap().peer,
            PeerRule::Pending
        );
        let ip: IpAddr = "172.17.0.9".parse().unwrap();
        assert!(tokens.restrict(&t, ip));
        assert_eq!(
            tokens.authenticate(&bearer(&t)).unwrap().peer,
            PeerRule::Only(ip)
        );
        let plain = tokens.mint_with(
            ctx(),
            PeerRule::Any,
            tokio_util::sync::CancellationToken::new(),
        );
        assert_eq!(
            tokens.authenticate(&bearer(&plain)).unwrap().peer,
            PeerRule::Any
        );
        tokens.revoke(&t);
        assert!(!tokens.restrict(&t, ip));
    }

    #[test]
    fn prefix_is_eight_chars() {
        assert_eq!(token_prefix("0123456789abcdef"), "01234567");
        assert_eq!(token_prefix("ab"), "ab");
    }
}
