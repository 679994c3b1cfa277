//! One upstream serving one batch: its state (idle, up, failed, stopped), connecting,
//! a connection's end (restarted once, then failed for good), re-reading its tools,
//! stopping it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use aicli_providers::McpUpstreamConfig;
use rmcp::model::{ClientConfig, Implementation, Tool};
use rmcp::service::{NotificationContext, Peer, RunningServiceCancellationToken};
use rmcp::{ClientHandler, RoleClient};
use tokio_util::sync::CancellationToken;

use super::OnChange;
use crate::mcp::command::ToolEnv;
use crate::proc::spawn::LocalProcess;

/// One upstream serving one batch.
pub(crate) struct Instance {
    batch: String,
    /// Its name in `mcp_upstreams`.
    pub(super) name: String,
    /// Its config entry.
    pub(super) config: McpUpstreamConfig,
    /// What its process gets from aicli's side.
    pub(super) env: Arc<ToolEnv>,
    on_change: OnChange,
    /// Where its process is named in the batch's record (for `aicli resume`).
    pub(super) pid_file: Option<PathBuf>,
    /// Starts, restarts and stops one at a time.
    pub(super) state: tokio::sync::Mutex<State>,
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

/// Where an instance is in its life.
pub(super) enum State {
    /// Not started yet.
    Idle,
    /// Connected.
    Up(Box<Conn>),
    /// Failed for good (the message says why).
    Failed(String),
    /// The batch ended.
    Stopped,
}

/// One connection to the upstream.
pub(super) struct Conn {
    generation: u64,
    /// Where calls go.
    pub(super) peer: Peer<RoleClient>,
    stop: Option<RunningServiceCancellationToken>,
    process: Option<LocalProcess>,
    /// Set when its stdio stream was ended for a line over `max_message_bytes`.
    pub(super) oversized: Arc<AtomicBool>,
}

/// rmcp's client handler for an upstream: follows its `tools/list_changed`.
#[derive(Clone)]
pub(super) struct Client {
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

    /// A new instance, not started, with its supervisor: a task that handles each of
    /// its connections' ends, gone with the instance.
    pub(super) fn new(
        batch: &str,
        name: &str,
        config: McpUpstreamConfig,
        env: Arc<ToolEnv>,
        on_change: OnChange,
        pid_file: Option<PathBuf>,
    ) -> Arc<Instance> {
        let (deaths, mut dead) = tokio::sync::mpsc::unbounded_channel::<(u64, String)>();
        let inst = Arc::new(Instance {
            batch: batch.to_owned(),
            name: name.to_owned(),
            config,
            env,
            on_change,
            pid_file,
            state: tokio::sync::Mutex::new(State::Idle),
            tools: RwLock::new(Arc::new(Vec::new())),
            stopped: CancellationToken::new(),
            restarted: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            deaths,
        });
        let weak = Arc::downgrade(&inst);
        tokio::spawn(async move {
            while let Some((generation, why)) = dead.recv().await {
                let Some(i) = weak.upgrade() else { return };
                i.closed(generation, why).await;
            }
        });
        inst
    }

    /// The names of its tools now.
    fn tool_names(&self) -> Vec<String> {
        self.tools_now()
            .iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    /// Replaces its tools.
    fn set_tools(&self, tools: Vec<Tool>) {
        if let Ok(mut t) = self.tools.write() {
            *t = Arc::new(tools);
        }
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
        self.set_tools(tools);
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

    /// Its connection `generation` closed: a death unless the batch ended. Restarted
    /// once; after that, or if the restart fails, it is failed for good.
    async fn closed(self: &Arc<Self>, generation: u64, why: String) {
        if self.stopped.is_cancelled() {
            return;
        }
        let mut st = self.state.lock().await;
        let mut conn = match std::mem::replace(&mut *st, State::Idle) {
            State::Up(c) if c.generation == generation => c,
            other => {
                *st = other;
                return;
            }
        };
        let mut reason = self.death_reason(&mut conn, why).await;
        let before = self.tool_names();
        self.set_tools(Vec::new());
        if !self.restarted.swap(true, Ordering::SeqCst) {
            tracing::warn!(upstream = %self.name, batch = %self.batch, %reason, "MCP upstream died; restarting it once");
            match self.connect().await {
                Ok(c) => {
                    *st = State::Up(Box::new(c));
                    drop(st);
                    if self.tool_names() != before {
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

    /// Why `conn` ended (`why`: what rmcp said): a stdio upstream's process is stopped
    /// and its exit and stderr tail say it; a line over the cap is named first.
    async fn death_reason(&self, conn: &mut Conn, why: String) -> String {
        let mut reason = format!("its connection ended ({why})");
        let oversized = conn.oversized.load(Ordering::SeqCst);
        if let Some(mut p) = conn.process.take() {
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
        reason
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
                self.set_tools(tools);
                (self.on_change)(&self.batch, &self.name, None);
            }
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "re-reading an MCP upstream's tools failed");
            }
        }
    }

    /// Stops it for good: closes the session, kills the process tree.
    pub(super) async fn stop(&self) {
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
        self.set_tools(Vec::new());
    }
}
