//! The agent MCP server: the tools each running agent calls back into.
//!
//! aicli starts one [`McpServer`] per `aicli run` / `aicli batch` (and `aicli serve` runs
//! one alone). It speaks MCP over rmcp's streamable HTTP transport (sessions + SSE) at
//! `/mcp`, nested in an axum router that also answers `GET /healthz` without auth. Each
//! task gets its own bearer token, bound to its [`TaskContext`]; a tool only ever sees
//! the context of the token that called it.
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | `server` | [`McpServer`], [`McpServerOptions`]: bind, the axum router, the token API, session expiry, graceful shutdown |
//! | `listener` | the HTTP/1.1 accept loop: connection limit, header-read and idle timeouts, TCP_NODELAY |
//! | `auth` | tokens (mint, constant-time check, revoke), session -> token binding, Host/Origin checks, the middleware in front of rmcp, 401/403/404 bodies |
//! | `tools` | the built-in tools: `getWorkspaceFiles`, `listSkills`, `getSkill`, `getCredential`, `broadcastLog`, `ask_user` (also `askUser`, the name Gemini CLI can see) (names in [`TOOL_NAMES`]) |
//! | `handler` | the rmcp handler: `tools/list` (built-ins, then the token's granted tools), `tools/call` (a built-in, or a granted tool after its size check), the call log and record |
//! | `granted` | per token: the granted command tools and upstream tools in `tools/list`, where a call goes, `tools/list_changed` to the sessions granted an upstream |
//! | `command` | command-backed tools (`mcp_tools`): arguments checked against `input_schema`, one supervised process per call, output capped |
//! | `upstream` | upstream MCP servers (`mcp_upstreams`, stdio or HTTP) behind aicli's auth: started lazily per batch, shared by its tasks, restarted once, stopped with the batch |
//! | `record` | the run record's log of tool calls ([`McpCallRecord`], `mcp-calls.ndjson`) |
//! | `workspace` | listing/reading files under a worktree without leaving it (symlinks and TOCTOU included) |
//! | `skills` | `<skills_dir>/<name>/SKILL.md` frontmatter, scripts and references |
//! | `credentials` | [`CredentialSource`]: credentials file, then the environment |
//! | `calls` | the bounded call log ([`CallRecord`]) tests and the engine read |
//! | `error` | [`McpError`] |
//!
//! # How the engine uses it
//!
//! ```no_run
//! # async fn demo() -> Result<(), aicli::mcp::McpError> {
//! use aicli::mcp::{McpServer, McpServerOptions, TaskContext};
//! use tokio_util::sync::CancellationToken;
//!
//! let cancel = CancellationToken::new();
//! let server = McpServer::start(McpServerOptions::default(), cancel.clone()).await?;
//! // At task start: a token bound to the task, and the task's event channel.
//! let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
//! let token = server.mint(TaskContext {
//!     batch_id: "b1".into(),
//!     task_id: "t1".into(),
//!     workspace: "/repo/.aicli/worktrees/t1".into(),
//!     skills: vec!["pdf-tools".into()],
//!     credentials: vec!["GITHUB_TOKEN".into()],
//!     tools: vec![], // names from the config's `mcp_tools` / `mcp_upstreams`
//!     record_dir: None,
//!     attempt: 1,
//!     events,
//! });
//! let endpoint = server.endpoint(&token); // url + token + tool names, for the provider
//! // ... run the CLI with `endpoint`; drain `rx` into the task's event stream: a
//! // `Question` event means the run ends blocked on that question ...
//! # let _ = (&endpoint, rx.try_recv());
//! // At task end:
//! server.revoke(&token);
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Security model
//!
//! * Every `/mcp` request needs `Authorization: Bearer <token>`; missing, malformed,
//!   unknown and revoked tokens get 401 with `WWW-Authenticate: Bearer` and a JSON body.
//!   Tokens are compared in constant time; logs show at most their first 8 characters.
//! * A session id works only with the token that created it (404 otherwise).
//! * `Host` must be loopback, the bind host or one of [`McpServerOptions::allowed_hosts`]
//!   (403 otherwise); a browser `Origin`, when sent, must name such a host too.
//! * Credential values never reach our logs. rmcp itself logs whole responses at `debug`
//!   level under the `rmcp` target: a subscriber must cap that target (see
//!   [`LOG_FILTER_DIRECTIVES`]).
//!
//! # Tool errors
//!
//! A refused or failed tool call is a tool result with `isError: true` and a message
//! for the model (getCredential's carries a `status`: 403 for a name outside the task's
//! allowlist, 404 for a missing value). Protocol errors are kept for malformed calls.

mod auth;
mod benign;
mod calls;
mod command;
mod credentials;
mod error;
mod granted;
mod handler;
mod record;
mod server;
mod skills;
mod tools;
mod upstream;
mod workspace;

use std::path::PathBuf;

use aicli_providers::AgentEvent;

pub use benign::benign_log;
pub use credentials::{CredentialError, CredentialSource, EnvLookup};
pub use error::McpError;
pub use record::{McpCallRecord, read_calls};
pub use server::{McpServer, McpServerOptions};
#[cfg(feature = "test-helpers")]
pub use tools::{ASK_USER_REPLY, TOOL_NAMES};
#[cfg(feature = "test-helpers")]
pub use workspace::MAX_ENTRIES;

/// `tracing_subscriber::EnvFilter` directives a subscriber should add: rmcp logs whole
/// JSON-RPC responses (a served credential included) at `debug`.
pub const LOG_FILTER_DIRECTIVES: &str = "rmcp=info";

/// What a task's token grants: the task's identity, its worktree, the skills and
/// credentials it may read, and where its events go.
#[derive(Debug, Clone)]
pub struct TaskContext {
    /// The batch the task belongs to.
    pub batch_id: String,
    /// The task's id in its batch.
    pub task_id: String,
    /// The task's worktree: `getWorkspaceFiles` never leaves it.
    pub workspace: PathBuf,
    /// Skills connected to this task (names of directories in the skills dir).
    pub skills: Vec<String>,
    /// Credential names this task may read with `getCredential`.
    pub credentials: Vec<String>,
    /// Names in the config's `mcp_tools` and `mcp_upstreams` this task may use: its
    /// `tools/list` holds the built-in tools plus exactly these (an upstream's as
    /// `<upstream>__<tool>`), and a call of anything else is answered as a call of a tool
    /// that does not exist.
    pub tools: Vec<String>,
    /// The task's record directory: each tool call is logged there
    /// (`mcp-calls.ndjson`), and a command tool's running processes are named there for
    /// `aicli resume`.
    pub record_dir: Option<PathBuf>,
    /// The attempt of the task this token serves (1-based), for the call log.
    pub attempt: u32,
    /// The task's live event stream: `broadcastLog` sends [`EventKind::Log`] and
    /// `askUser` sends [`EventKind::Question`] here; the session records and broadcasts
    /// what arrives.
    ///
    /// [`EventKind::Log`]: aicli_providers::EventKind::Log
    /// [`EventKind::Question`]: aicli_providers::EventKind::Question
    pub events: tokio::sync::mpsc::UnboundedSender<AgentEvent>,
}

#[async_trait::async_trait]
impl crate::engine::AgentServer for McpServer {
    async fn grant(
        &self,
        scope: crate::engine::TaskScope,
        reach: Option<&crate::runner::AgentReach>,
    ) -> Result<crate::engine::AgentGrant, String> {
        // Where the CLI reaches us: loopback (the bound address), or an address such as
        // the bridge gateway that the server must then listen on too.
        let (url, port) = match reach {
            None => (self.url(), self.local_addr().port()),
            Some(r) => {
                let port = self.listen_on(r.bind).await.map_err(|e| e.to_string())?;
                (server::url_for(&r.url_host, port), port)
            }
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = TaskContext {
            batch_id: scope.batch_id,
            task_id: scope.task_id,
            workspace: scope.workspace,
            skills: scope.skills,
            credentials: scope.credentials,
            tools: scope.tools,
            record_dir: scope.record_dir,
            attempt: scope.attempt,
            events: tx.clone(),
        };
        // A container's token works only from its address, known once it has started:
        // until then its requests wait.
        let token = match reach {
            Some(r) if r.restrict_to_peer => self.mint_pending(ctx),
            Some(_) | None => self.mint(ctx),
        };
        // The granted upstreams start now (once per batch), so that the CLI's allowlist
        // can name their tools; one that cannot start is reported in the task's stream.
        for m in self.start_upstreams(&token).await {
            let _ = tx.send(AgentEvent::synthetic(aicli_providers::EventKind::Log {
                level: aicli_providers::LogLevel::Error,
                message: m,
                source: "aicli".to_owned(),
            }));
        }
        let mut endpoint = self.endpoint(&token);
        endpoint.url = url;
        Ok(crate::engine::AgentGrant {
            endpoint,
            port,
            events: rx,
        })
    }

    async fn loopback_port(&self) -> Option<u16> {
        self.listen_on(std::net::IpAddr::from([127, 0, 0, 1]))
            .await
            .ok()
    }

    fn revoke(&self, token: &str) {
        McpServer::revoke(self, token);
    }

    fn restrict(&self, token: &str, peer: std::net::IpAddr) {
        McpServer::restrict(self, token, peer);
    }

    async fn end_batch(&self, batch_id: &str) {
        McpServer::end_batch(self, batch_id).await;
    }
}
