//! [`McpServer`]: the token API, what it counts, and shutdown.
//!
//! | module | owns |
//! |---|---|
//! | `options` | [`McpServerOptions`] and how a config implies them |
//! | `start` | bind, the shared state, the axum router around rmcp, serving (also on more addresses) |
//! | `shared` | [`Shared`]: what every session and the middleware share; the sweep of expired sessions |

mod options;
mod shared;
mod start;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli_providers::McpEndpoint;
use axum::Router;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use options::McpServerOptions;
pub(crate) use shared::Shared;

use super::TaskContext;
use super::auth::PeerRule;
use super::calls::CallRecord;
use crate::http::listener::ConnLimits;
use super::tools::TOOL_NAMES;

/// How long [`McpServer::shutdown`] waits for open connections before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The agent MCP server: streamable HTTP at `/mcp`, `GET /healthz`, bearer tokens per
/// task. The `mcp` module's docs give the whole picture.
pub struct McpServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    url_host: String,
    cancel: CancellationToken,
    serve: Option<JoinHandle<()>>,
    /// The router, to serve on more addresses ([`McpServer::listen_on`]).
    app: Router,
    /// The connection limits of each address served.
    conn_limits: ConnLimits,
    /// Addresses served besides the bound one, and their ports.
    extra: tokio::sync::Mutex<HashMap<IpAddr, u16>>,
    /// Their serving tasks.
    extra_serves: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("addr", &self.addr)
            .field("live_tokens", &self.shared.tokens.live())
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Restricts `token` to requests from `peer` (see the auth module); false when the
    /// token is not live.
    pub fn restrict(&self, token: &str, peer: IpAddr) -> bool {
        self.shared.tokens.restrict(token, peer)
    }

    /// The streamable HTTP endpoint: `http://HOST:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}:{}/mcp", self.url_host, self.addr.port())
    }

    /// The endpoint as reached through another host name, e.g. `host.docker.internal`
    /// from a container (that name must be in [`McpServerOptions::allowed_hosts`]).
    pub fn url_for_host(&self, host: &str) -> String {
        url_for(host, self.addr.port())
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The exact names of the built-in tools (for CLI allowlists such as
    /// `mcp__aicli__<tool>`); a token may see more ([`McpServer::endpoint`]).
    pub fn tool_names() -> Vec<String> {
        TOOL_NAMES.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A new bearer token bound to `ctx`: 32 random bytes as 64 hex characters. A grant
    /// in `ctx.tools` that names no configured tool or upstream is ignored (with a
    /// warning).
    pub fn mint(&self, ctx: TaskContext) -> String {
        self.mint_with(ctx, PeerRule::Any)
    }

    fn mint_with(&self, mut ctx: TaskContext, peer: PeerRule) -> String {
        ctx.tools.retain(|g| {
            let known = self.shared.commands.contains_key(g) || self.shared.upstreams.is_configured(g);
            if !known {
                tracing::warn!(task_id = %ctx.task_id, grant = %g, "ignoring a grant of an MCP tool that is not configured");
            }
            known
        });
        ctx.tools.sort();
        ctx.tools.dedup();
        self.shared
            .tokens
            .mint_with(ctx, peer, self.shared.cancel.child_token())
    }

    /// A new token for `ctx` whose requests wait until [`McpServer::restrict`] names the
    /// one address they may come from (a container that is starting).
    pub fn mint_pending(&self, ctx: TaskContext) -> String {
        self.mint_with(ctx, PeerRule::Pending)
    }

    /// Starts the upstreams the task of `token` was granted that are not running yet
    /// (for its batch); returns the messages of those that are unavailable. A token's
    /// `tools/list` does it too; doing it before the CLI starts lets
    /// [`McpServer::endpoint`] name the upstreams' tools.
    pub async fn start_upstreams(&self, token: &str) -> Vec<String> {
        match self.shared.tokens.caller_of(token) {
            Some(c) => self.shared.start_granted(&c.ctx).await,
            None => Vec::new(),
        }
    }

    /// Stops the upstream instances of `batch_id` (its tasks are done).
    pub async fn end_batch(&self, batch_id: &str) {
        self.shared.upstreams.end_batch(batch_id).await;
    }

    /// Upstream instances running now, over all batches.
    pub fn running_upstreams(&self) -> usize {
        self.shared.upstreams.running()
    }

    /// Revokes `token`: its next request gets 401, its sessions are closed and its tool
    /// calls still running are killed.
    pub fn revoke(&self, token: &str) {
        if let Some(c) = self.shared.tokens.caller_of(token) {
            self.shared.peers.forget(c.token_id);
        }
        let sessions = self.shared.tokens.revoke(token);
        self.shared.close_sessions(sessions);
    }

    /// What one run needs to wire the server into a CLI (`name` is `aicli`): the URL,
    /// the token, and the names the token may call: the built-in tools, its granted
    /// command tools and the tools of its granted upstreams that are running now.
    pub fn endpoint(&self, token: &str) -> McpEndpoint {
        let mut tools = McpServer::tool_names();
        if let Some(c) = self.shared.tokens.caller_of(token) {
            tools.extend(self.shared.granted_names(&c.ctx));
        }
        McpEndpoint {
            name: "aicli".into(),
            url: self.url(),
            token: token.to_owned(),
            tools,
        }
    }

    /// The call log, oldest first (bounded to the last
    /// `CALL_LOG_CAPACITY` calls).
    pub fn calls(&self) -> Vec<CallRecord> {
        self.shared.calls.snapshot()
    }

    /// The calls made by one task, oldest first.
    pub fn calls_for(&self, task_id: &str) -> Vec<CallRecord> {
        self.calls()
            .into_iter()
            .filter(|c| c.task_id == task_id)
            .collect()
    }

    /// Number of live (minted, not revoked) tokens.
    pub fn live_tokens(&self) -> usize {
        self.shared.tokens.live()
    }

    /// Number of MCP sessions bound to live tokens (expired ones go at the next sweep).
    pub fn live_sessions(&self) -> usize {
        self.shared.tokens.bound_sessions().len()
    }

    /// Number of HTTP connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared
            .conns
            .open
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Connections closed at accept because `max_connections` were open, and
    /// connections closed by the idle timeout, since start.
    pub fn closed_connections(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering;
        (
            self.shared.conns.refused.load(Ordering::Relaxed),
            self.shared.conns.idled_out.load(Ordering::Relaxed),
        )
    }

    /// The server's cancellation token (a child of the one given to `start`).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Stops: ends sessions and SSE streams (and the tool calls running), lets open
    /// requests finish for up to five seconds, then cuts what is left; stops every
    /// upstream.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        let extra: Vec<JoinHandle<()>> = self
            .extra_serves
            .lock()
            .map(|mut v| v.drain(..).collect())
            .unwrap_or_default();
        for mut h in extra {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut h).await.is_err() {
                h.abort();
            }
        }
        self.shared.upstreams.stop_all().await;
        if let Some(mut serve) = self.serve.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut serve)
                .await
                .is_err()
        {
            tracing::warn!("MCP server did not stop in time; aborting its connections");
            serve.abort();
            let _ = serve.await;
        }
        tracing::info!(addr = %self.addr, "MCP server stopped");
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        // A safety net: a server dropped without shutdown() still stops serving.
        self.cancel.cancel();
    }
}

/// `http://HOST:PORT/mcp` (an IPv6 host in brackets).
pub(crate) fn url_for(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("http://[{host}]:{port}/mcp")
    } else {
        format!("http://{host}:{port}/mcp")
    }
}

#[cfg(test)]
mod tests;
