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
//!
//! | module | owns |
//! |---|---|
//! | `token` | [`Tokens`], [`Caller`], [`PeerRule`]: mint, authenticate, restrict, revoke |
//! | `session` | session -> token bindings and the per-token session places |
//! | `reply` | the refusal responses and their JSON bodies |

mod reply;
mod session;
mod token;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

pub(crate) use token::{Caller, PeerRule, Tokens};

use super::server::Shared;
use reply::{
    announced_too_large, forbidden, malformed_body, session_not_found, too_many_sessions,
    unauthorized,
};
use token::{AuthFailure, PENDING_WAIT};

/// The session header of the streamable HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";

/// A request let through to rmcp, and what the gate must do with its response.
struct Admitted {
    /// Who sent it.
    caller: Caller,
    /// Its `Mcp-Session-Id` (owned by `caller`), if it named one.
    session: Option<String>,
    /// A `DELETE` of that session.
    is_delete: bool,
    /// Whether it holds a session place (a `POST` without a session), given back after.
    reserved: bool,
}

/// The middleware in front of rmcp (see the module docs).
pub(crate) async fn gate(
    State(shared): State<Arc<Shared>>,
    mut req: Request<Body>,
    next: Next,
) -> Response {
    let from = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let admitted = match admit(&shared, req.headers(), req.method(), from).await {
        Ok(a) => a,
        Err(refused) => return refused,
    };
    let json_body = is_json(req.headers());
    req.extensions_mut().insert(admitted.caller.clone());
    let resp = next.run(req).await;
    if let Some(refused) = settle_session(&shared, &admitted, &resp) {
        return refused;
    }
    if resp.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE && json_body {
        // rmcp answers a JSON body that does not parse with 415; the media type was
        // right, the body was not: 400 with a JSON-RPC parse error.
        return malformed_body(resp).await;
    }
    resp
}

/// Steps 1 to 5 of the module docs, in order; `Err` is the refusal to send. A request
/// admitted without a session holds a session place until [`settle_session`].
async fn admit(
    shared: &Shared,
    headers: &HeaderMap,
    method: &Method,
    from: Option<IpAddr>,
) -> Result<Admitted, Response> {
    if let Err(why) = shared.hosts.check(headers) {
        tracing::warn!(reason = why, "refused MCP request (DNS rebinding check)");
        return Err(forbidden(why));
    }
    let caller = authenticate(shared, headers, method).await?;
    if let Some(refused) = wrong_peer(&caller, from) {
        return Err(refused);
    }
    if let Some(refused) = announced_too_large(headers, shared.limits.max_body_bytes) {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, "refused MCP request: 413, its Content-Length is over mcp.limits.max_body_bytes");
        return Err(refused);
    }
    let session = headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(sid) = &session
        && shared.tokens.session_owner(sid) != Some(caller.token_id)
    {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, "refused MCP request: session not created by this token");
        return Err(session_not_found());
    }
    // A request without a session may open one: at most `max_sessions_per_token` per
    // token (sessions open plus such requests in flight).
    let limit = shared.limits.max_sessions_per_token;
    let reserved = session.is_none() && method == Method::POST;
    if reserved && !shared.tokens.reserve_session(caller.token_id, limit) {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, limit, "refused MCP request: too many sessions for this token");
        return Err(too_many_sessions(limit));
    }
    Ok(Admitted {
        caller,
        session,
        is_delete: method == Method::DELETE,
        reserved,
    })
}

/// The caller the `Authorization` header names; a [`PeerRule::Pending`] token's
/// request waits (at most [`PENDING_WAIT`]) until its address is known or it is gone.
async fn authenticate(
    shared: &Shared,
    headers: &HeaderMap,
    method: &Method,
) -> Result<Caller, Response> {
    let mut caller = match shared.tokens.authenticate(headers) {
        Ok(c) => c,
        Err(failure) => {
            tracing::info!(
                reason = failure.reason(),
                method = %method,
                "refused MCP request: 401"
            );
            return Err(unauthorized(failure));
        }
    };
    if caller.peer == PeerRule::Pending {
        // The run is starting: wait until its address is known (or the token is gone).
        let deadline = tokio::time::Instant::now() + PENDING_WAIT;
        while caller.peer == PeerRule::Pending && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            caller = shared.tokens.authenticate(headers).map_err(unauthorized)?;
        }
    }
    Ok(caller)
}

/// 403 unless the caller's token is valid from `from` (a token still pending after
/// the wait is valid from nowhere).
fn wrong_peer(caller: &Caller, from: Option<IpAddr>) -> Option<Response> {
    let only = match caller.peer {
        PeerRule::Any => return None,
        PeerRule::Only(ip) => Some(ip),
        PeerRule::Pending => None,
    };
    if only.is_none() || from != only {
        tracing::warn!(token = %caller.prefix, task_id = %caller.ctx.task_id, from = ?from, "refused MCP request: the token is not valid from this address");
        return Some(forbidden("this token is not valid from this address"));
    }
    None
}

/// Whether the request's body is announced as JSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
        })
}

/// After rmcp answered: binds the session it opened to the caller's token (or closes
/// it, and answers 401, when the token was revoked meanwhile), gives back the
/// session place, unbinds a session a `DELETE` closed.
fn settle_session(shared: &Shared, admitted: &Admitted, resp: &Response) -> Option<Response> {
    let caller = &admitted.caller;
    let Some(sid) = &admitted.session else {
        let opened = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok());
        let bound = opened.map(|sid| (sid, shared.tokens.bind_session(sid, caller.token_id)));
        if admitted.reserved {
            shared.tokens.release_session(caller.token_id);
        }
        return match bound {
            Some((_, true)) => {
                tracing::debug!(token = %caller.prefix, task_id = %caller.ctx.task_id, "MCP session opened");
                None
            }
            Some((sid, false)) => {
                // Revoked while initializing: close what rmcp just opened.
                shared.close_sessions(vec![sid.to_owned()]);
                Some(unauthorized(AuthFailure::Unknown))
            }
            None => None,
        };
    };
    if admitted.is_delete && resp.status().is_success() {
        shared.tokens.unbind_session(sid);
    }
    None
}

#[cfg(test)]
mod tests;
