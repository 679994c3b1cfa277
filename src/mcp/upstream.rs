//! Upstream MCP servers (`mcp_upstreams` in the config) behind aicli's auth: aicli is
//! their client (rmcp's client side), and its own server offers their tools as
//! `<upstream>__<tool>` to the tasks granted them, forwarding each call.
//!
//! * **Lazy and shared.** An upstream starts the first time a task of a batch that was
//!   granted it needs it (the run about to start, its `tools/list`, a call); one
//!   instance serves every task of that batch granted it, and stops when the batch ends
//!   ([`Upstreams::end_batch`]) or the server shuts down.
//! * **Credentials stay here.** A stdio server gets its `env` (and its
//!   `env_passthrough` from aicli's environment); an HTTP one gets its `headers`. None of
//!   it is in a CLI's environment, MCP config or argv: a CLI only ever holds its own
//!   aicli token.
//! * **Supervised.** A stdio server is a [`LocalProcess`] like a CLI (own process group,
//!   cgroup, subreaper, parent-death signal), killed with its whole tree when it stops.
//! * **Restarted once.** An upstream that dies (its process exits, its connection
//!   closes) is restarted once; if it dies again, or a start fails, it is reported (a
//!   log event in each live task granted it, and a warning) and its tools disappear.
//!   Every change of its tools sends `notifications/tools/list_changed` to the sessions
//!   granted it, and to no one else.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use aicli_providers::McpUpstreamConfig;
use axum::http::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientConfig, ContentBlock,
    Implementation, Tool,
};
use rmcp::service::{NotificationContext, Peer, RunningService, RunningServiceCancellationToken};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use tokio_util::sync::CancellationToken;

use super::command::ToolEnv;
use crate::proc::spawn::{LocalProcess, OutputOptions};

/// Bytes of a stdio upstream's stderr kept (quoted when it fails).
const UPSTREAM_STDERR_TAIL: usize = 16 * 1024;

/// What an upstream tells the server: its tools changed (`reason: None`), or it failed.
pub(crate) type OnChange = Arc<dyn Fn(&str, &str, Option<&str>) + Send + Sync>;

/// Every configured upstream, and the instances running for batches.
pub(crate) struct Upstreams {
    configs: BTreeMap<String, McpUpstreamConfig>,
    env: Arc<ToolEnv>,
    instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
    on_change: OnChange,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("configured", &self.configs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Upstreams {
    /// The configured upstreams; `on_change(batch, upstream, failure)` is called when an
    /// instance's tools change or it fails.
    pub(crate) fn new(
        configs: BTreeMap<String, McpUpstreamConfig>,
        env: Arc<ToolEnv>,
        on_change: OnChange,
    ) -> Upstreams {
        Upstreams {
            configs,
            env,
            instances: Mutex::new(HashMap::new()),
            on_change,
        }
    }

    /// Whether `name` is a configured upstream.
    pub(crate) fn is_configured(&self, name: &str) -> bool {
        self.configs.contains_key(name)
    }

    /// The instance of `name` for `batch` (made, not started, on first use).
    pub(crate) fn instance(
        &self,
        batch: &str,
        name: &str,
        batch_dir: Option<PathBuf>,
    ) -> Option<Arc<Instance>> {
        let config = self.configs.get(name)?;
        let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        let inst = map
            .entry((batch.to_owned(), name.to_owned()))
            .or_insert_with(|| {
                let (deaths, mut dead) = tokio::sync::mpsc::unbounded_channel::<(u64, String)>();
                let inst = Arc::new(Instance {
                    batch: batch.to_owned(),
                    name: name.to_owned(),
                    config: config.clone(),
                    env: self.env.clone(),
                    on_change: self.on_change.clone(),
                    pid_file: batch_dir.map(|d| d.join(format!("pid.upstream-{name}"))),
                    state: tokio::sync::Mutex::new(State::Idle),
                    tools: RwLock::new(Arc::new(Vec::new())),
                    stopped: CancellationToken::new(),
                    restarted: AtomicBool::new(false),
                    generation: AtomicU64::new(0),
                    deaths,
                });
                // The supervisor: handles each connection's end; gone with the instance.
                let weak = Arc::downgrade(&inst);
                tokio::spawn(async move {
                    while let Some((generation, why)) = dead.recv().await {
                        let Some(i) = weak.upgrade() else { return };
                        i.closed(generation, why).await;
                    }
                });
                inst
            });
        Some(inst.clone())
    }

    /// Stops every instance of `batch`.
    pub(crate) async fn end_batch(&self, batch: &str) {
        let ended: Vec<Arc<Instance>> = {
            let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = map.keys().filter(|(b, _)| b == batch).cloned().collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        for i in ended {
            i.stop().await;
        }
    }

    /// Stops every instance.
    pub(crate) async fn stop_all(&self) {
        let all: Vec<Arc<Instance>> = {
            let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            map.drain().map(|(_, v)| v).collect()
        };
        for i in all {
            i.stop().await;
        }
    }

    /// Live instances (for tests and logs).
    pub(crate) fn running(&self) -> usize {
        self.instances
            .lock()
            .map(|m| m.values().filter(|i| !i.tools_now().is_empty()).count())
            .unwrap_or(0)
    }
}

/// One upstream serving one batch.
pub(crate) struct Instance {
    batch: String,
    name: String,
    config: McpUpstreamConfig,
    env: Arc<ToolEnv>,
    on_change: OnChange,
    pid_file: Option<PathBuf>,
    /// Starts, restarts and stops one at a time.
    state: tokio::sync::Mutex<State>,
    /// Its tools as it names them (empty until it runs, and after it failed).
    tools: RwLock<Arc<Vec<Tool>>>,
    /// Set when the batch ended: a closing connection is then no death.
    stopped: CancellationToken,
    /// Whether its one restart was used.
    restarted: AtomicBool,
    generation: AtomicU64,
    /// Where a connection's watcher reports its end: (generation, why).
    deaths: tokio::sync::mpsc::UnboundedSender<(u64, String)>,
}

enum State {
    /// Not started yet.
    Idle,
    /// Connected.
    Up(Box<Conn>),
    /// Failed for good (the message says why).
    Failed(String),
    /// The batch ended.
    Stopped,
}

struct Conn {
    generation: u64,
    peer: Peer<RoleClient>,
    stop: Option<RunningServiceCancellationToken>,
    process: Option<LocalProcess>,
    /// Set when its stdio stream was ended for a line over `max_message_bytes`.
    oversized: Arc<AtomicBool>,
}

/// rmcp's client handler for an upstream: follows its `tools/list_changed`.
#[derive(Clone)]
struct Client {
    inst: Weak<Instance>,
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(i) = self.inst.upgrade() {
            tokio::spawn(async move { i.refresh().await });
        }
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("aicli", env!("CARGO_PKG_VERSION"));
        info
    }
}

impl Instance {
    /// Its tools now (empty when it is not running).
    pub(crate) fn tools_now(&self) -> Arc<Vec<Tool>> {
        self.tools.read().map(|t| t.clone()).unwrap_or_default()
    }

    /// Starts it if it has not started; `Err` says why it is unavailable.
    pub(crate) async fn ensure(self: &Arc<Self>) -> Result<(), String> {
        let mut st = self.state.lock().await;
        match &*st {
            State::Up(_) => Ok(()),
            State::Failed(m) => Err(m.clone()),
            State::Stopped => Err(format!("MCP upstream {} was stopped", self.name)),
            State::Idle => match self.connect().await {
                // (No tools/list_changed: whoever lists tools waits for this start.)
                Ok(conn) => {
                    *st = State::Up(Box::new(conn));
                    Ok(())
                }
                Err(e) => {
                    let m = format!("MCP upstream {} could not start: {e}", self.name);
                    *st = State::Failed(m.clone());
                    drop(st);
                    tracing::warn!(upstream = %self.name, batch = %self.batch, error = %e, "MCP upstream could not start");
                    (self.on_change)(&self.batch, &self.name, Some(&m));
                    Err(m)
                }
            },
        }
    }

    /// Forwards a call of its tool `tool` (its own name).
    pub(crate) async fn call(
        self: &Arc<Self>,
        tool: &str,
        mut params: CallToolRequestParams,
        cancel: &CancellationToken,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Err(m) = self.ensure().await {
            return Ok(CallToolResult::error(vec![ContentBlock::text(m)]).into());
        }
        let (peer, oversized) = {
            let st = self.state.lock().await;
            match &*st {
                State::Up(c) => (c.peer.clone(), c.oversized.clone()),
                State::Idle | State::Failed(_) | State::Stopped => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "MCP upstream {} is not available",
                        self.name
                    ))])
                    .into());
                }
            }
        };
        params.name = tool.to_owned().into();
        let timeout = Duration::from_secs(self.config.timeout_secs);
        let res = tokio::select! {
            r = peer.call_tool_once(params) => r,
            () = tokio::time::sleep(timeout) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "MCP upstream {} did not answer within {} s (mcp_upstreams.{}.timeout_secs)",
                    self.name, self.config.timeout_secs, self.name
                ))]).into());
            }
            () = cancel.cancelled() => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(
                    "the call was cancelled or the task ended",
                )]).into());
            }
        };
        match res {
            Ok(r) => {
                let size = response_size(&r);
                if size > self.config.max_message_bytes {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(
                        self.over_limit(&format!("a result of {size} bytes")),
                    )])
                    .into());
                }
                Ok(r)
            }
            // The upstream's own protocol error goes to the agent as it was.
            Err(rmcp::ServiceError::McpError(e)) => Err(e),
            Err(_) if oversized.load(Ordering::SeqCst) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    self.over_limit("a longer message"),
                )])
                .into())
            }
            Err(e) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "MCP upstream {} failed: {e}",
                self.name
            ))])
            .into()),
        }
    }

    /// Says that it sent `what`, over its `max_message_bytes`.
    fn over_limit(&self, what: &str) -> String {
        format!(
            "MCP upstream {} sent {what}, over its limit of {} bytes (mcp_upstreams.{}.max_message_bytes)",
            self.name, self.config.max_message_bytes, self.name
        )
    }

    /// Connects: starts the process (stdio) or opens the session (HTTP), shakes hands
    /// and lists the tools, within `startup_timeout_secs`.
    async fn connect(self: &Arc<Self>) -> Result<Conn, String> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let handler = Client {
            inst: Arc::downgrade(self),
        };
        let startup = Duration::from_secs(self.config.startup_timeout_secs);
        let oversized = Arc::new(AtomicBool::new(false));
        let (service, process) = if self.config.is_stdio() {
            let (service, process) = self.start_stdio(handler, startup, &oversized).await?;
            (service, Some(process))
        } else {
            (self.start_http(handler, startup).await?, None)
        };
        let peer = service.peer().clone();
        let tools = match tokio::time::timeout(startup, peer.list_all_tools()).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(format!("tools/list failed: {e}")),
            Err(_) => return Err(format!("tools/list took over {} s", startup.as_secs())),
        };
        tracing::info!(upstream = %self.name, batch = %self.batch, tools = tools.len(), "MCP upstream connected");
        if let Ok(mut t) = self.tools.write() {
            *t = Arc::new(tools);
        }
        let stop = service.cancellation_token();
        // The end of the connection goes to the instance's supervisor (a task of its own:
        // it may reconnect, and a watcher that did so itself would be a future that
        // contains itself).
        let deaths = self.deaths.clone();
        tokio::spawn(async move {
            let why = service.waiting().await;
            let _ = deaths.send((generation, format!("{why:?}")));
        });
        Ok(Conn {
            generation,
            peer,
            stop: Some(stop),
            process,
            oversized,
        })
    }

    async fn start_stdio(
        &self,
        handler: Client,
        startup: Duration,
        oversized: &Arc<AtomicBool>,
    ) -> Result<(RunningService<RoleClient, Client>, LocalProcess), String> {
        let c = &self.config;
        let env = self
            .env
            .for_process(&c.env_passthrough, &c.env, &BTreeMap::new());
        let cwd = c.cwd.clone().unwrap_or_else(|| self.env.repo.clone());
        let cmd = super::command::process_spec(&c.command, env, cwd)?;
        let out = OutputOptions {
            stderr_tail: UPSTREAM_STDERR_TAIL,
            raw_pipes: true,
            pid_file: self.pid_file.clone(),
            ..OutputOptions::default()
        };
        let mut p =
            LocalProcess::spawn_in(&cmd, out, self.env.cgroups).map_err(|e| e.to_string())?;
        let (Some(r), Some(w)) = (p.take_stdout(), p.take_stdin()) else {
            p.shutdown(self.env.kill_grace).await;
            return Err("its pipes are missing".into());
        };
        let r = LineCap {
            inner: r,
            cap: c.max_message_bytes,
            line: 0,
            tripped: oversized.clone(),
        };
        match tokio::time::timeout(startup, handler.serve((r, w))).await {
            Ok(Ok(s)) => Ok((s, p)),
            Ok(Err(e)) => {
                p.shutdown(self.env.kill_grace).await;
                p.drain().await;
                Err(format!("{e}; its stderr: {}", p.stderr.text().trim()))
            }
            Err(_) => {
                p.shutdown(self.env.kill_grace).await;
                p.drain().await;
                Err(format!(
                    "no MCP handshake within {} s; its stderr: {}",
                    startup.as_secs(),
                    p.stderr.text().trim()
                ))
            }
        }
    }

    async fn start_http(
        &self,
        handler: Client,
        startup: Duration,
    ) -> Result<RunningService<RoleClient, Client>, String> {
        let url = self.config.url.clone().unwrap_or_default();
        let mut headers = HashMap::new();
        for (k, v) in &self.config.headers {
            let value = expand(v, &self.env.source).map_err(|var| {
                format!("header {k}: ${{{var}}} is not set in aicli's environment")
            })?;
            let name = HeaderName::try_from(k.as_str()).map_err(|e| format!("header {k}: {e}"))?;
            let mut value = HeaderValue::try_from(value)
                .map_err(|_| format!("header {k}: the value is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers),
        );
        match tokio::time::timeout(startup, handler.serve(transport)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no MCP handshake within {} s", startup.as_secs())),
        }
    }

    /// Its connection `generation` closed: a death unless the batch ended. Restarted
    /// once; after that, or if the restart fails, it is failed for good.
    async fn closed(self: &Arc<Self>, generation: u64, why: String) {
        if self.stopped.is_cancelled() {
            return;
        }
        let mut st = self.state.lock().await;
        let conn = match std::mem::replace(&mut *st, State::Idle) {
            State::Up(c) if c.generation == generation => c,
            other => {
                *st = other;
                return;
            }
        };
        let mut reason = format!("its connection ended ({why})");
        let oversized = conn.oversized.load(Ordering::SeqCst);
        if let Some(mut p) = conn.process {
            let code = p.shutdown(self.env.kill_grace).await;
            p.drain().await;
            reason = match code {
                Some(c) => format!("its process exited with code {c}"),
                None => "its process was killed".to_owned(),
            };
            let tail = p.stderr.text();
            if !tail.trim().is_empty() {
                reason.push_str(&format!("; its stderr: {}", tail.trim()));
            }
        }
        if oversized {
            reason = format!(
                "{}, so it was stopped ({reason})",
                self.over_limit("a longer message")
            );
        }
        let before: Vec<String> = self
            .tools_now()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        if let Ok(mut t) = self.tools.write() {
            *t = Arc::new(Vec::new());
        }
        if !self.restarted.swap(true, Ordering::SeqCst) {
            tracing::warn!(upstream = %self.name, batch = %self.batch, %reason, "MCP upstream died; restarting it once");
            match self.connect().await {
                Ok(c) => {
                    *st = State::Up(Box::new(c));
                    drop(st);
                    let after: Vec<String> = self
                        .tools_now()
                        .iter()
                        .map(|t| t.name.to_string())
                        .collect();
                    if after != before {
                        (self.on_change)(&self.batch, &self.name, None);
                    }
                    return;
                }
                Err(e) => reason = format!("{reason}; restarting it failed: {e}"),
            }
        } else {
            reason = format!("{reason} (after its one restart)");
        }
        let m = format!(
            "MCP upstream {} died: {reason}; its tools are gone",
            self.name
        );
        tracing::error!(upstream = %self.name, batch = %self.batch, "{m}");
        *st = State::Failed(m.clone());
        drop(st);
        (self.on_change)(&self.batch, &self.name, Some(&m));
    }

    /// Re-reads its tools after its `tools/list_changed`.
    async fn refresh(self: Arc<Self>) {
        let peer = {
            let st = self.state.lock().await;
            match &*st {
                State::Up(c) => c.peer.clone(),
                State::Idle | State::Failed(_) | State::Stopped => return,
            }
        };
        match peer.list_all_tools().await {
            Ok(tools) => {
                if let Ok(mut t) = self.tools.write() {
                    *t = Arc::new(tools);
                }
                (self.on_change)(&self.batch, &self.name, None);
            }
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "re-reading an MCP upstream's tools failed");
            }
        }
    }

    /// Stops it for good: closes the session, kills the process tree.
    async fn stop(&self) {
        self.stopped.cancel();
        let mut st = self.state.lock().await;
        if let State::Up(mut c) = std::mem::replace(&mut *st, State::Stopped) {
            if let Some(s) = c.stop.take() {
                s.cancel();
            }
            if let Some(mut p) = c.process.take() {
                p.shutdown(self.env.kill_grace).await;
                p.drain().await;
            }
            tracing::info!(upstream = %self.name, batch = %self.batch, "MCP upstream stopped");
        }
        if let Ok(mut t) = self.tools.write() {
            *t = Arc::new(Vec::new());
        }
    }
}

/// `${NAME}` in `value` replaced by `NAME` of `env`; `Err(NAME)` for a missing one.
/// The bytes of a call's response as JSON.
fn response_size(r: &CallToolResponse) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    let _ = match r {
        CallToolResponse::Complete(r) => serde_json::to_writer(&mut n, r),
        CallToolResponse::InputRequired(r) => serde_json::to_writer(&mut n, r),
        CallToolResponse::Task(r) => serde_json::to_writer(&mut n, r),
        _ => Ok(()),
    };
    n.0
}

/// A stdio upstream's stdout, read no further than `cap` bytes into one line (one
/// JSON-RPC message): past it, reading fails, so rmcp ends the connection, and `tripped`
/// is set. rmcp's framing holds at most one line, so this bounds its memory.
struct LineCap<R> {
    inner: R,
    cap: usize,
    /// Bytes of the current line read so far.
    line: usize,
    tripped: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let over = |cap: usize| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line of over {cap} bytes"),
            )
        };
        if this.tripped.load(Ordering::SeqCst) {
            return std::task::Poll::Ready(Err(over(this.cap)));
        }
        let start = buf.filled().len();
        std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let new = &buf.filled()[start..];
        let mut from = 0;
        let newlines = new.iter().enumerate().filter(|(_, b)| **b == b'\n');
        for (nl, _) in newlines {
            if this.line + (nl - from) > this.cap {
                break;
            }
            this.line = 0;
            from = nl + 1;
        }
        this.line += new.len() - from;
        if this.line > this.cap {
            this.tripped.store(true, Ordering::SeqCst);
            buf.set_filled(start);
            return std::task::Poll::Ready(Err(over(this.cap)));
        }
        std::task::Poll::Ready(Ok(()))
    }
}

fn expand(value: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[i..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(env.get(name).ok_or_else(|| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_capped(data: &[u8], cap: usize) -> (std::io::Result<Vec<u8>>, bool) {
        let tripped = Arc::new(AtomicBool::new(false));
        let mut r = LineCap {
            inner: tokio::io::BufReader::with_capacity(7, data),
            cap,
            line: 0,
            tripped: tripped.clone(),
        };
        let mut out = Vec::new();
        let res = r.read_to_end(&mut out).await.map(|_| out);
        (res, tripped.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn lines_up_to_the_cap_pass_a_longer_one_fails_wherever_it_is() {
        // Lines of 10 bytes with a cap of 10, read 7 bytes at a time: all pass.
        let ok = b"0123456789\nabcdefghij\n0123456789".to_vec();
        let (res, tripped) = read_capped(&ok, 10).await;
        assert_eq!(res.unwrap(), ok);
        assert!(!tripped);
        // An 11-byte line between short ones, in one read of 64 bytes: fails.
        let bad = b"ab\n0123456789X\ncd\n";
        let tripped = Arc::new(AtomicBool::new(false));
        let mut r = LineCap {
            inner: &bad[..],
            cap: 10,
            line: 0,
            tripped: tripped.clone(),
        };
        let mut buf = [0u8; 64];
        let err = r.read(&mut buf).await.unwrap_err();
        assert!(err.to_string().contains("over 10 bytes"), "{err}");
        assert!(tripped.load(Ordering::SeqCst));
        // And again on the next read.
        assert!(r.read(&mut buf).await.is_err());
        // A last line without its newline counts too.
        let (res, tripped) = read_capped(b"ab\n0123456789XYZ", 10).await;
        assert!(res.is_err() && tripped);
    }

    #[test]
    fn header_values_expand_variables() {
        let env = BTreeMap::from([("TOKEN".to_owned(), "s3cret".to_owned())]);
        assert_eq!(expand("Bearer ${TOKEN}", &env).unwrap(), "Bearer s3cret");
        assert_eq!(expand("plain", &env).unwrap(), "plain");
        assert_eq!(
            expand("a${TOKEN}b${TOKEN}", &env).unwrap(),
            "as3cretbs3cret"
        );
        assert_eq!(expand("${NOPE}", &env).unwrap_err(), "NOPE");
        assert_eq!(expand("${open", &env).unwrap(), "${open");
    }
}
