//! The boundary between the engine and the agent (MCP) server: the engine asks for a
//! token per run ([`AgentServer::grant`]) and revokes it after; the server
//! ([`crate::McpServer`]) implements the trait and knows nothing of batches beyond it.

use std::path::PathBuf;

use aicli_providers::{AgentEvent, McpEndpoint};
use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::runner::AgentReach;

/// What a task run may reach through aicli's agent server.
#[derive(Debug, Clone)]
pub struct TaskScope {
    /// The batch.
    pub batch_id: String,
    /// The task.
    pub task_id: String,
    /// The task's workspace (its worktree).
    pub workspace: PathBuf,
    /// Skills connected to the task.
    pub skills: Vec<String>,
    /// Credential names the task may read.
    pub credentials: Vec<String>,
    /// MCP tools and upstreams the task may use (`engine.mcp_tools` and its own).
    pub tools: Vec<String>,
    /// The task's record directory (the server logs tool calls there).
    pub record_dir: Option<PathBuf>,
    /// The attempt (1-based).
    pub attempt: u32,
}

/// A token granted to one run.
#[derive(Debug)]
pub struct AgentGrant {
    /// How the CLI reaches the server (URL and token).
    pub endpoint: McpEndpoint,
    /// The server's port.
    pub port: u16,
    /// Events the server makes for this run (logs, questions).
    pub events: mpsc::UnboundedReceiver<AgentEvent>,
}

/// The agent server as the engine sees it: grants a token per run, revokes it after,
/// and hears when a batch ends (what it started for the batch stops then).
#[async_trait]
pub trait AgentServer: Send + Sync + std::fmt::Debug {
    /// A token bound to `scope`, for a CLI that reaches the server as `reach` says (over
    /// loopback when `None`; else the server listens on `reach.bind` too, and the URL
    /// names `reach.url_host`). Errors say why the server cannot be reached that way.
    async fn grant(
        &self,
        scope: TaskScope,
        reach: Option<&AgentReach>,
    ) -> Result<AgentGrant, String>;
    /// The port it listens on at `127.0.0.1` (listening there first if it must), where a
    /// container's egress forwarder made ahead carries the CLI's MCP requests; `None`
    /// when it cannot.
    async fn loopback_port(&self) -> Option<u16> {
        None
    }
    /// Revokes a token: the next request with it is refused.
    fn revoke(&self, token: &str);
    /// From now on only requests from `peer` may use `token`.
    fn restrict(&self, token: &str, peer: std::net::IpAddr);
    /// Every task of `batch_id` is done (in this process): stop what serves only it.
    async fn end_batch(&self, _batch_id: &str) {}
}
