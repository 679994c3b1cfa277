//! [`Shared`]: the state every session and the middleware share, and the sweep of
//! session bindings rmcp expired.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::McpLimits;
use rmcp::transport::streamable_http_server::SessionId;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use crate::mcp::CredentialSource;
use crate::http::AllowedHosts;
use crate::mcp::auth::Tokens;
use crate::mcp::calls::CallLog;
use crate::mcp::command::{CommandTool, ToolEnv};
use crate::mcp::granted::Peers;
use crate::http::listener::ConnStats;
use crate::mcp::upstream::Upstreams;

/// State every session and the middleware share.
pub(crate) struct Shared {
    /// Live tokens and session bindings.
    pub tokens: Tokens,
    /// Host/Origin allowlist.
    pub hosts: AllowedHosts,
    /// The skills directory.
    pub skills_dir: PathBuf,
    /// Credential values.
    pub credentials: CredentialSource,
    /// The call log.
    pub calls: CallLog,
    /// rmcp's sessions, to close those of a revoked token.
    pub sessions: Arc<LocalSessionManager>,
    /// The limits (tool argument caps, sessions per token).
    pub limits: McpLimits,
    /// What the listener holds.
    pub conns: Arc<ConnStats>,
    /// The command-backed tools, compiled.
    pub commands: BTreeMap<String, Arc<CommandTool>>,
    /// The upstream MCP servers and their running instances.
    pub upstreams: Upstreams,
    /// What tool and upstream processes get from aicli's side.
    pub tool_env: Arc<ToolEnv>,
    /// Initialized sessions, for `tools/list_changed`.
    pub peers: Peers,
    /// The server's cancellation: each token's is a child of it.
    pub cancel: CancellationToken,
}

impl Shared {
    /// Closes rmcp sessions in the background (no-op outside a runtime).
    pub(crate) fn close_sessions(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let sessions = self.sessions.clone();
        rt.spawn(async move {
            for id in ids {
                let sid: SessionId = id.into();
                if let Err(e) = sessions.close_session(&sid).await {
                    tracing::debug!(error = %e, "closing a revoked token's MCP session");
                }
            }
        });
    }
}

/// Forgets bindings of sessions rmcp closed by itself (idle timeout), which frees their
/// place in their token's `max_sessions_per_token`.
pub(super) async fn sweep(shared: Arc<Shared>, every: Duration, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        for sid in shared.tokens.bound_sessions() {
            let id: SessionId = sid.clone().into();
            if let Ok(false) = shared.sessions.has_session(&id).await {
                shared.tokens.unbind_session(&sid);
            }
        }
    }
}
