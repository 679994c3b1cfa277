//! What one token may see and call beyond the built-in tools: exactly the command tools
//! and upstreams its task was granted ([`TaskContext::tools`]). Nothing here is global:
//! `tools/list` is computed per caller, a call resolves only through the caller's
//! grants (an ungranted name gets the very answer an unknown one does), and
//! `notifications/tools/list_changed` reaches only the sessions of tokens granted the
//! upstream whose tools changed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aicli_providers::mcp_tools::UPSTREAM_SEPARATOR;
use rmcp::RoleServer;
use rmcp::model::Tool;
use rmcp::service::Peer;

use super::TaskContext;
use super::auth::Caller;
use super::command::CommandTool;
use super::server::Shared;
use super::upstream::Instance;

/// Where a granted dynamic tool's call goes.
pub(crate) enum Target {
    /// A command-backed tool.
    Command(Arc<CommandTool>),
    /// An upstream's tool (the instance, and the tool's own name there).
    Upstream(Arc<Instance>, String),
}

/// The batch record directory of a task record directory (`<batch>/tasks/<task>`).
fn batch_dir(ctx: &TaskContext) -> Option<PathBuf> {
    ctx.record_dir
        .as_deref()
        .and_then(|d| d.parent())
        .and_then(|d| d.parent())
        .map(PathBuf::from)
}

impl Shared {
    /// The upstream instance `name` of the caller's batch, if the caller was granted it.
    fn granted_upstream(&self, ctx: &TaskContext, name: &str) -> Option<Arc<Instance>> {
        if !ctx.tools.iter().any(|g| g == name) {
            return None;
        }
        self.upstreams.instance(&ctx.batch_id, name, batch_dir(ctx))
    }

    /// Starts the upstreams `ctx` was granted (those not running yet); the messages of
    /// those that are unavailable.
    pub(crate) async fn start_granted(&self, ctx: &TaskContext) -> Vec<String> {
        let mut failed = Vec::new();
        for g in &ctx.tools {
            if let Some(i) = self.granted_upstream(ctx, g)
                && let Err(m) = i.ensure().await
            {
                failed.push(m);
            }
        }
        failed
    }

    /// The names the caller sees beyond the built-ins, as `tools/list` shows them
    /// (upstream tools only of the upstreams running now).
    pub(crate) fn granted_names(&self, ctx: &TaskContext) -> Vec<String> {
        self.granted_tools_now(ctx)
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    fn granted_tools_now(&self, ctx: &TaskContext) -> Vec<Tool> {
        let mut out = Vec::new();
        for g in &ctx.tools {
            if let Some(t) = self.commands.get(g) {
                out.push(t.tool.clone());
            } else if let Some(i) = self.granted_upstream(ctx, g) {
                for t in i.tools_now().iter() {
                    let mut t = t.clone();
                    t.name = format!("{g}{UPSTREAM_SEPARATOR}{}", t.name).into();
                    out.push(t);
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name);
        out
    }

    /// The caller's granted tools for `tools/list`, starting its upstreams first.
    pub(crate) async fn granted_tools(&self, caller: &Caller) -> Vec<Tool> {
        let failed = self.start_granted(&caller.ctx).await;
        for m in failed {
            tracing::debug!(task_id = %caller.ctx.task_id, "{m}");
        }
        self.granted_tools_now(&caller.ctx)
    }

    /// Where a call of `name` by `ctx` goes, if it names a tool `ctx` was granted.
    pub(crate) async fn resolve(&self, ctx: &TaskContext, name: &str) -> Option<Target> {
        if let Some(t) = self.commands.get(name) {
            return ctx
                .tools
                .iter()
                .any(|g| g == name)
                .then(|| Target::Command(t.clone()));
        }
        let (upstream, tool) = name.split_once(UPSTREAM_SEPARATOR)?;
        let inst = self.granted_upstream(ctx, upstream)?;
        // Started on first use; an upstream that cannot start answers with its error.
        if inst.ensure().await.is_ok() && !inst.tools_now().iter().any(|t| t.name == tool) {
            return None;
        }
        Some(Target::Upstream(inst, tool.to_owned()))
    }

    /// An upstream of `batch` changed its tools (`failure: None`) or failed: the sessions
    /// granted it are told to list their tools again; on a failure, each live task
    /// granted it gets the message in its event stream.
    pub(crate) fn on_upstream_change(&self, batch: &str, upstream: &str, failure: Option<&str>) {
        let granted =
            |ctx: &TaskContext| ctx.batch_id == batch && ctx.tools.iter().any(|g| g == upstream);
        self.peers.notify(&granted);
        if let Some(m) = failure {
            for c in self.tokens.callers() {
                if granted(&c.ctx) {
                    let _ = c.ctx.events.send(aicli_providers::AgentEvent::synthetic(
                        aicli_providers::EventKind::Log {
                            level: aicli_providers::LogLevel::Error,
                            message: m.to_owned(),
                            source: "aicli".to_owned(),
                        },
                    ));
                }
            }
        }
    }
}

/// The sessions that may be told their tool list changed: one entry per initialized
/// session, with its token's context.
#[derive(Default)]
pub(crate) struct Peers {
    list: Mutex<Vec<SessionPeer>>,
}

/// An initialized session: its token's id and context, and the way to notify it.
type SessionPeer = (u64, Arc<TaskContext>, Peer<RoleServer>);

impl Peers {
    /// Remembers an initialized session of `caller`.
    pub(crate) fn register(&self, caller: &Caller, peer: Peer<RoleServer>) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|(_, _, p)| !p.is_transport_closed());
        l.push((caller.token_id, caller.ctx.clone(), peer));
    }

    /// Forgets the sessions of a revoked token.
    pub(crate) fn forget(&self, token_id: u64) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|(t, _, _)| *t != token_id);
    }

    /// Sends `notifications/tools/list_changed` to every live session whose context
    /// `which` selects.
    pub(crate) fn notify(&self, which: &dyn Fn(&TaskContext) -> bool) {
        let targets: Vec<Peer<RoleServer>> = {
            let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
            l.retain(|(_, _, p)| !p.is_transport_closed());
            l.iter()
                .filter(|(_, c, _)| which(c))
                .map(|(_, _, p)| p.clone())
                .collect()
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for p in targets {
            rt.spawn(async move {
                if let Err(e) = p.notify_tool_list_changed().await {
                    tracing::debug!(error = %e, "could not send tools/list_changed");
                }
            });
        }
    }
}
