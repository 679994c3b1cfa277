//! Starting the server: bind, the shared state, the axum router around rmcp, the
//! serving tasks (and serving on more addresses later).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::shared::sweep;
use super::{McpServer, McpServerOptions, Shared};
use crate::mcp::McpError;
use crate::http::AllowedHosts;
use crate::mcp::auth::{Tokens, gate};
use crate::mcp::calls::CallLog;
use crate::mcp::command::{CommandTool, ToolEnv};
use crate::mcp::granted::Peers;
use crate::http::listener::{self, ConnLimits, ConnStats};
use crate::mcp::tools::AgentTools;
use crate::mcp::upstream::{OnChange, Upstreams};

/// How often, at most, bindings of sessions that rmcp expired are swept (more often
/// when sessions expire sooner).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The bound listener and what the address implies.
struct Bound {
    listener: TcpListener,
    addr: SocketAddr,
    /// Loopback, the bind host (unless it is all interfaces) and the configured hosts.
    hosts: AllowedHosts,
    /// The host in [`McpServer::url`].
    url_host: String,
}

impl McpServer {
    /// Binds, and serves until `cancel` fires or [`McpServer::shutdown`] is called.
    pub async fn start(
        opts: McpServerOptions,
        cancel: CancellationToken,
    ) -> Result<McpServer, McpError> {
        let bound = bind(&opts.bind, &opts.allowed_hosts).await?;
        let cancel = cancel.child_token();
        let session_idle = Duration::from_secs(opts.limits.session_idle_timeout_secs);
        let sessions = Arc::new(session_manager(session_idle));
        let conns = Arc::new(ConnStats::default());
        let shared = shared_state(
            opts,
            bound.hosts.clone(),
            sessions.clone(),
            conns.clone(),
            cancel.clone(),
        )?;
        let app = router(&shared, sessions, &bound.hosts, &cancel);
        // Every connection: a limit on how many, a header-read and an idle timeout, and
        // TCP_NODELAY (rmcp writes small SSE frames; with Nagle + delayed ACK each call
        // would wait ~40 ms).
        let limits = &shared.limits;
        let conn_limits = ConnLimits {
            max_connections: limits.max_connections,
            header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(limits.idle_timeout_secs),
        };
        let serve = tokio::spawn(listener::serve(
            bound.listener,
            app.clone(),
            conn_limits,
            conns,
            cancel.clone(),
            None,
        ));
        let sweep_every = SWEEP_EVERY.min((session_idle / 2).max(Duration::from_millis(100)));
        tokio::spawn(sweep(shared.clone(), sweep_every, cancel.clone()));
        tracing::info!(addr = %bound.addr, "MCP server listening");
        Ok(McpServer {
            shared,
            addr: bound.addr,
            url_host: bound.url_host,
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
            None,
        ));
        if let Ok(mut v) = self.extra_serves.lock() {
            v.push(handle);
        }
        extra.insert(ip, port);
        tracing::info!(addr = %SocketAddr::new(ip, port), "MCP server listening");
        Ok(port)
    }
}

/// Binds `bind` (`host:port`); the hosts a request may name are loopback, `allowed`
/// and the bind host (unless it is all interfaces).
async fn bind(bind: &str, allowed: &[String]) -> Result<Bound, McpError> {
    let host = bind_host(bind).ok_or_else(|| McpError::BadBind {
        bind: bind.to_owned(),
        reason: "expected host:port".into(),
    })?;
    let listener = TcpListener::bind(bind)
        .await
        .map_err(|source| McpError::Bind {
            bind: bind.to_owned(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| McpError::Bind {
        bind: bind.to_owned(),
        source,
    })?;
    let unspecified = addr.ip().is_unspecified();
    let mut extra: Vec<&str> = allowed.iter().map(String::as_str).collect();
    if !unspecified {
        extra.push(host);
    } else if allowed.is_empty() {
        tracing::warn!(bind = %bind, "MCP server bound to all interfaces but only loopback Host headers are allowed: set mcp.allowed_hosts");
    }
    let url_host = if unspecified {
        "127.0.0.1".to_owned()
    } else if addr.is_ipv6() {
        format!("[{}]", addr.ip())
    } else {
        addr.ip().to_string()
    };
    Ok(Bound {
        listener,
        addr,
        hosts: AllowedHosts::new(extra),
        url_host,
    })
}

/// Splits `host:port` / `[v6]:port` into the host part.
pub(super) fn bind_host(bind: &str) -> Option<&str> {
    if let Some(rest) = bind.strip_prefix('[') {
        return rest.split_once(']').map(|(h, _)| h);
    }
    bind.rsplit_once(':').map(|(h, _)| h)
}

/// rmcp's sessions: no SSE "priming" events (an empty `data:` line with a retry hint:
/// gemini 0.61 runs JSON.parse("") on them and drops the server; Claude and Codex
/// ignore them), and a session idle for `idle` is closed and its memory freed (the
/// sweep drops its binding).
fn session_manager(idle: Duration) -> LocalSessionManager {
    let mut session_manager = LocalSessionManager::default();
    session_manager.session_config.sse_retry = None;
    session_manager.session_config.keep_alive = Some(idle);
    session_manager
}

/// The state the sessions share: the options' tools compiled (a schema that does not
/// compile is [`McpError::BadTool`]), the upstreams, fresh token and call tables.
fn shared_state(
    opts: McpServerOptions,
    hosts: AllowedHosts,
    sessions: Arc<LocalSessionManager>,
    conns: Arc<ConnStats>,
    cancel: CancellationToken,
) -> Result<Arc<Shared>, McpError> {
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
    Ok(Arc::new_cyclic(|weak: &Weak<Shared>| {
        let weak = weak.clone();
        let on_change: OnChange = Arc::new(move |batch, upstream, failure| {
            if let Some(s) = weak.upgrade() {
                s.on_upstream_change(batch, upstream, failure);
            }
        });
        Shared {
            tokens: Tokens::default(),
            hosts,
            skills_dir: opts.skills_dir,
            credentials: opts.credentials,
            calls: CallLog::default(),
            sessions,
            limits: opts.limits,
            conns,
            commands,
            upstreams: Upstreams::new(upstream_configs, tool_env.clone(), on_change),
            tool_env,
            peers: Peers::default(),
            cancel,
        }
    }))
}

/// `/mcp` (rmcp's streamable HTTP service behind the [`gate`]) and `GET /healthz`.
fn router(
    shared: &Arc<Shared>,
    sessions: Arc<LocalSessionManager>,
    hosts: &AllowedHosts,
    cancel: &CancellationToken,
) -> Router {
    let limits = &shared.limits;
    let mut config = StreamableHttpServerConfig::default()
        .with_sse_retry(None)
        .with_allowed_hosts(hosts.for_rmcp())
        .with_cancellation_token(cancel.child_token());
    config.max_request_body_bytes = limits.max_body_bytes;
    let tool_router = Arc::new(AgentTools::build_router());
    let factory_shared = shared.clone();
    let service: StreamableHttpService<AgentTools, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(AgentTools::new(factory_shared.clone(), tool_router.clone())),
            sessions,
            config,
        );
    // Clients that honour it (undici, for one) stop reusing a kept-alive connection
    // before the server closes it for idling: no request is sent into a closing one.
    let keep_alive = HeaderValue::from_str(&format!("timeout={}", limits.header_read_timeout_secs))
        .unwrap_or_else(|_| HeaderValue::from_static("timeout=10"));
    Router::new()
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
        ))
}

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}
