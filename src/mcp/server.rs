//! [`McpServer`]: binding, the axum router around rmcp, the token API and shutdown.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli_providers::{
    AiCliConfig, CgroupMode, McpEndpoint, McpLimits, McpToolConfig, McpUpstreamConfig,
};
use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionId, SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::auth::{AllowedHosts, Tokens, gate};
use super::calls::{CallLog, CallRecord};
use super::command::{CommandTool, ToolEnv};
use super::granted::Peers;
use super::listener::{self, ConnLimits, ConnStats};
use super::tools::{AgentTools, TOOL_NAMES};
use super::upstream::Upstreams;
use super::{CredentialSource, EnvLookup, McpError, TaskContext};

/// How long [`McpServer::shutdown`] waits for open connections before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often, at most, bindings of sessions that rmcp expired are swept (more often
/// when sessions expire sooner).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// How to start the server.
#[derive(Debug, Clone)]
pub struct McpServerOptions {
    /// Address to bind: `127.0.0.1:0` (loopback, ephemeral port) by default; e.g.
    /// `172.17.0.1:0` for agents in Docker containers.
    pub bind: String,
    /// Extra `Host` values to accept (`host` or `host:port`), besides loopback and the
    /// bind host; e.g. `host.docker.internal`.
    pub allowed_hosts: Vec<String>,
    /// Where skills live (`<dir>/<name>/SKILL.md`).
    pub skills_dir: PathBuf,
    /// Where `getCredential` finds values.
    pub credentials: CredentialSource,
    /// Timeouts, connection and session limits, caps on tool arguments.
    pub limits: McpLimits,
    /// Command-backed tools, by name (served only to the tokens granted them).
    pub tools: BTreeMap<String, McpToolConfig>,
    /// Upstream MCP servers, by name (their tools served, as `<name>__<tool>`, only to
    /// the tokens granted them).
    pub upstreams: BTreeMap<String, McpUpstreamConfig>,
    /// aicli's environment: where the tools' and stdio upstreams' `env_passthrough` and
    /// the base set come from, and what `${NAME}` in an upstream's headers names.
    pub env: BTreeMap<String, String>,
    /// The base set every tool and stdio upstream gets from `env`
    /// (`engine.env_passthrough`).
    pub env_passthrough: Vec<String>,
    /// Whether each tool call and upstream gets a cgroup of its own.
    pub cgroups: CgroupMode,
    /// Between SIGTERM and SIGKILL of a tool's or upstream's process tree.
    pub kill_grace: Duration,
    /// The repository: a stdio upstream's working directory unless it names one.
    pub repo: PathBuf,
}

impl Default for McpServerOptions {
    fn default() -> McpServerOptions {
        McpServerOptions {
            bind: "127.0.0.1:0".into(),
            allowed_hosts: Vec::new(),
            skills_dir: PathBuf::from(".aicli/skills"),
            credentials: CredentialSource::default(),
            limits: McpLimits::default(),
            tools: BTreeMap::new(),
            upstreams: BTreeMap::new(),
            env: crate::env::process_env(),
            env_passthrough: aicli_providers::config::default_env_passthrough(),
            cgroups: CgroupMode::Auto,
            kill_grace: Duration::from_secs(3),
            repo: PathBuf::from("."),
        }
    }
}

impl McpServerOptions {
    /// The options a config implies for a repository: `mcp.bind`, `mcp.allowed_hosts`,
    /// `skills_dir` (default `<repo>/.aicli/skills`), `credentials_file` over the process
    /// environment, the `mcp_tools` and `mcp_upstreams` with the engine's base
    /// environment, cgroups and kill grace.
    pub fn from_config(config: &AiCliConfig, repo: &Path) -> McpServerOptions {
        let engine = &config.engine;
        McpServerOptions {
            bind: engine.mcp.bind.clone(),
            allowed_hosts: engine.mcp.allowed_hosts.clone(),
            skills_dir: engine
                .skills_dir
                .clone()
                .unwrap_or_else(|| repo.join(".aicli").join("skills")),
            credentials: CredentialSource {
                env: EnvLookup::Process,
                file: engine.credentials_file.clone(),
            },
            limits: engine.mcp.limits.clone(),
            tools: config.mcp_tools.clone(),
            upstreams: config.mcp_upstreams.clone(),
            env: crate::env::process_env(),
            env_passthrough: engine.env_passthrough.clone(),
            cgroups: engine.cgroups,
            kill_grace: Duration::from_millis(engine.kill_grace_ms),
            repo: repo.to_path_buf(),
        }
    }
}

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

/// The agent MCP server: streamable HTTP at `/mcp`, `GET /healthz`, bearer tokens per
/// task. See the [module docs](super) for the whole picture.
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

/// Splits `host:port` / `[v6]:port` into the host part.
fn bind_host(bind: &str) -> Option<&str> {
    if let Some(rest) = bind.strip_prefix('[') {
        return rest.split_once(']').map(|(h, _)| h);
    }
    bind.rsplit_once(':').map(|(h, _)| h)
}

impl McpServer {
    /// Binds, and serves until `cancel` fires or [`McpServer::shutdown`] is called.
    pub async fn start(
        opts: McpServerOptions,
        cancel: CancellationToken,
    ) -> Result<McpServer, McpError> {
        let host = bind_host(&opts.bind).ok_or_else(|| McpError::BadBind {
            bind: opts.bind.clone(),
            reason: "expected host:port".into(),
        })?;
        let listener = TcpListener::bind(&opts.bind)
            .await
            .map_err(|source| McpError::Bind {
                bind: opts.bind.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| McpError::Bind {
            bind: opts.bind.clone(),
            source,
        })?;
        let unspecified = addr.ip().is_unspecified();
        let mut extra: Vec<&str> = opts.allowed_hosts.iter().map(String::as_str).collect();
        if !unspecified {
            extra.push(host);
        } else if opts.allowed_hosts.is_empty() {
            tracing::warn!(bind = %opts.bind, "MCP server bound to all interfaces but only loopback Host headers are allowed: set mcp.allowed_hosts");
        }
        let hosts = AllowedHosts::new(extra);
        let url_host = if unspecified {
            "127.0.0.1".to_owned()
        } else if addr.is_ipv6() {
            format!("[{}]", addr.ip())
        } else {
            addr.ip().to_string()
        };

        let cancel = cancel.child_token();
        // No SSE "priming" events (an empty `data:` line with a retry hint): gemini 0.61
        // runs JSON.parse("") on them and drops the server. Claude and Codex ignore them.
        let limits = opts.limits;
        let session_idle = Duration::from_secs(limits.session_idle_timeout_secs);
        let mut session_manager = LocalSessionManager::default();
        session_manager.session_config.sse_retry = None;
        // An idle session is closed and its memory freed (the sweep drops its binding).
        session_manager.session_config.keep_alive = Some(session_idle);
        let sessions = Arc::new(session_manager);
        let conns = Arc::new(ConnStats::default());
        let mut commands = BTreeMap::new();
        for (name, c) in opts.tools {
            let tool = CommandTool::new(&name, c).map_err(|reason| McpError::BadTool {
                name: name.clone(),
                reason: format!("input_schema {reason}"),
            })?;
            commands.insert(name, Arc::new(tool));
        }
        let tool_env = Arc::new(ToolEnv {
            source: opts.env,
            base: opts.env_passthrough,
            cgroups: opts.cgroups,
            kill_grace: opts.kill_grace,
            repo: opts.repo,
        });
        let upstream_configs = opts.upstreams;
        let shared = Arc::new_cyclic(|weak: &std::sync::Weak<Shared>| {
            let weak = weak.clone();
            let on_change: super::upstream::OnChange = Arc::new(move |batch, upstream, failure| {
                if let Some(s) = weak.upgrade() {
                    s.on_upstream_change(batch, upstream, failure);
                }
            });
            Shared {
                tokens: Tokens::default(),
                hosts: hosts.clone(),
                skills_dir: opts.skills_dir,
                credentials: opts.credentials,
                calls: CallLog::default(),
                sessions: sessions.clone(),
                limits: limits.clone(),
                conns: conns.clone(),
                commands,
                upstreams: Upstreams::new(upstream_configs, tool_env.clone(), on_change),
                tool_env,
                peers: Peers::default(),
                cancel: cancel.clone(),
            }
        });
        let mut config = StreamableHttpServerConfig::default()
            .with_sse_retry(None)
            .with_allowed_hosts(hosts.for_rmcp())
            .with_cancellation_token(cancel.child_token());
        config.max_request_body_bytes = limits.max_body_bytes;
        let router = Arc::new(AgentTools::build_router());
        let factory_shared = shared.clone();
        let service: StreamableHttpService<AgentTools, LocalSessionManager> =
            StreamableHttpService::new(
                move || Ok(AgentTools::new(factory_shared.clone(), router.clone())),
                sessions,
                config,
            );
        // Clients that honour it (undici, for one) stop reusing a kept-alive connection
        // before the server closes it for idling: no request is sent into a closing one.
        let keep_alive = axum::http::HeaderValue::from_str(&format!(
            "timeout={}",
            limits.header_read_timeout_secs
        ))
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static("timeout=10"));
        let app = Router::new()
            .nest_service("/mcp", service)
            .layer(from_fn_with_state(shared.clone(), gate))
            .route("/healthz", get(healthz))
            .layer(axum::middleware::map_response(
                move |mut r: axum::response::Response| {
                    let v = keep_alive.clone();
                    async move {
                        r.headers_mut().insert("keep-alive", v);
                        r
                    }
                },
            ));
        // Every connection: a limit on how many, a header-read and an idle timeout, and
        // TCP_NODELAY (rmcp writes small SSE frames; with Nagle + delayed ACK each call
        // would wait ~40 ms).
        let conn_limits = ConnLimits {
            max_connections: limits.max_connections,
            header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(limits.idle_timeout_secs),
        };
        let serve = tokio::spawn(listener::serve(
            listener,
            app.clone(),
            conn_limits,
            conns,
            cancel.clone(),
        ));
        let sweep_every = SWEEP_EVERY.min((session_idle / 2).max(Duration::from_millis(100)));
        tokio::spawn(sweep(shared.clone(), sweep_every, cancel.clone()));
        tracing::info!(%addr, "MCP server listening");
        Ok(McpServer {
            shared,
            addr,
            url_host,
            cancel,
            serve: Some(serve),
            app,
            conn_limits,
            extra: tokio::sync::Mutex::new(HashMap::new()),
            extra_serves: Mutex::new(Vec::new()),
        })
    }

    /// Serves on `ip` too (an ephemeral port) and returns the port; the bound address's
    /// port when `ip` is the bound one (or the server listens on all addresses). For
    /// containers on a bridge: the server listens on the bridge gateway, never on all
    /// interfaces. The `Host` a request names must still be allowed.
    pub async fn listen_on(&self, ip: IpAddr) -> Result<u16, McpError> {
        if ip == self.addr.ip() || self.addr.ip().is_unspecified() {
            return Ok(self.addr.port());
        }
        let mut extra = self.extra.lock().await;
        if let Some(port) = extra.get(&ip) {
            return Ok(*port);
        }
        let bind = SocketAddr::new(ip, 0).to_string();
        let listener = TcpListener::bind(&bind)
            .await
            .map_err(|source| McpError::Bind {
                bind: bind.clone(),
                source,
            })?;
        let port = listener
            .local_addr()
            .map_err(|source| McpError::Bind { bind, source })?
            .port();
        let handle = tokio::spawn(listener::serve(
            listener,
            self.app.clone(),
            self.conn_limits,
            self.shared.conns.clone(),
            self.cancel.clone(),
        ));
        if let Ok(mut v) = self.extra_serves.lock() {
            v.push(handle);
        }
        extra.insert(ip, port);
        tracing::info!(addr = %SocketAddr::new(ip, port), "MCP server listening");
        Ok(port)
    }

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
        self.mint_with(ctx, super::auth::PeerRule::Any)
    }

    fn mint_with(&self, mut ctx: TaskContext, peer: super::auth::PeerRule) -> String {
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
        self.mint_with(ctx, super::auth::PeerRule::Pending)
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
    /// [`CALL_LOG_CAPACITY`](super::CALL_LOG_CAPACITY) calls).
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

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// Forgets bindings of sessions rmcp closed by itself (idle timeout), which frees their
/// place in their token's `max_sessions_per_token`.
async fn sweep(shared: Arc<Shared>, every: Duration, cancel: CancellationToken) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_engine_config() {
        let mut cfg = AiCliConfig::builtin().unwrap();
        let o = McpServerOptions::from_config(&cfg, Path::new("/repo"));
        assert_eq!(o.bind, "127.0.0.1:0");
        assert_eq!(o.skills_dir, PathBuf::from("/repo/.aicli/skills"));
        assert!(o.credentials.file.is_none());
        cfg.engine.mcp.bind = "172.17.0.1:0".into();
        cfg.engine.mcp.allowed_hosts = vec!["host.docker.internal".into()];
        cfg.engine.skills_dir = Some("/skills".into());
        cfg.engine.credentials_file = Some("/creds.json".into());
        let o = McpServerOptions::from_config(&cfg, Path::new("/repo"));
        assert_eq!(o.bind, "172.17.0.1:0");
        assert_eq!(o.allowed_hosts, ["host.docker.internal"]);
        assert_eq!(o.skills_dir, PathBuf::from("/skills"));
        assert_eq!(o.credentials.file, Some(PathBuf::from("/creds.json")));
    }

    #[test]
    fn bind_hosts() {
        assert_eq!(bind_host("127.0.0.1:0"), Some("127.0.0.1"));
        assert_eq!(bind_host("[::1]:0"), Some("::1"));
        assert_eq!(bind_host("172.17.0.1:8080"), Some("172.17.0.1"));
        assert_eq!(bind_host("nope"), None);
    }
}
