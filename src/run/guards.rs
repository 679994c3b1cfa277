//! [`RunGuards`]: every resource one run holds, as fields dropped in a defined order.
//!
//! 1. the process tree and its cgroup (the run's handle: its `Drop` kills what is left);
//! 2. the scaffold: the command's links and files, the IDE lockfile;
//! 3. the MCP token (revoked);
//! 4. the placement (a container: removed);
//! 5. the private directory (removed);
//! 6. the budget reservation (settled: with the run's charge on the graceful path, with
//!    what it streamed otherwise).
//!
//! [`RunGuards::close`] is the graceful path: the tree's shutdown with its grace, the
//! placement's finish (a remote run's work brought back), the budget's charge. `Drop` is
//! the backstop for every other way out — an early return, a panic, a dropped future —
//! and releases the same things in the same order without waiting.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::{AgentEvent, CommandSpec, ErrorKind, LiveSpend, McpEndpoint, SessionResult};
use tokio::sync::mpsc::UnboundedReceiver;

use super::NotStarted;
use super::scaffold::Scaffold;
use crate::budget::Reservation;
use crate::engine::{AgentGrant, AgentServer};
use crate::proc::spawn::OutputOptions;
use crate::record::AttemptBudget;
use crate::runner::{Placement, RunHandle, RunnerError};

/// What one run holds (see the module docs). Fields drop in declaration order.
#[derive(Debug)]
pub(crate) struct RunGuards {
    process: Option<Box<dyn RunHandle>>,
    pub(super) scaffold: Scaffold,
    token: Option<TokenGuard>,
    placement: Option<Box<dyn Placement>>,
    private_dir: PrivateDir,
    budget: Option<Arc<Reservation>>,
    /// The command that was started (for the record), once it was.
    argv: Vec<String>,
}

/// What closing a run's guards found, for its outcome.
#[derive(Debug)]
pub(crate) struct Closed {
    /// The command that ran; empty when none started.
    pub argv: Vec<String>,
    /// Where it ran, when it was placed.
    pub place: Option<String>,
    /// Whether the CLI was started.
    pub started: bool,
    /// The reservation and the charge, when the batch has a budget.
    pub budget: Option<AttemptBudget>,
    /// Why the placement's finish failed (a remote run's work not brought back).
    pub finish_error: Option<String>,
    /// The runner's timed steps.
    pub steps: Vec<crate::record::SetupStep>,
    /// What the run's egress proxy refused.
    pub egress_denied: Vec<crate::record::EgressDenial>,
    /// What the run laid out for its CLI ([`super::scaffold::Scaffold::laid_out`]).
    pub scaffold: Vec<PathBuf>,
    /// Why the run ended with its place ([`crate::runner::RunHandle::lost_place`]).
    pub lost_place: Option<String>,
}

impl RunGuards {
    /// Guards holding nothing yet but the run's private directory (removed at the end
    /// whether or not anything made it) and its budget reservation.
    pub(crate) fn new(private_dir: PathBuf, budget: Option<Arc<Reservation>>) -> RunGuards {
        RunGuards {
            process: None,
            scaffold: Scaffold::default(),
            token: None,
            placement: None,
            private_dir: PrivateDir(Some(private_dir)),
            budget,
            argv: Vec::new(),
        }
    }

    /// Holds the run's placement; returns it.
    pub(super) fn placed(&mut self, p: Box<dyn Placement>) -> &dyn Placement {
        &**self.placement.insert(p)
    }

    /// The placement (the run is placed before anything else is taken).
    pub(super) fn placement(&self) -> Result<&dyn Placement, NotStarted> {
        self.placement
            .as_deref()
            .ok_or_else(|| NotStarted::new(ErrorKind::Unknown, "internal: the run has no place"))
    }

    /// Holds the run's MCP token; returns the events the server makes for the run.
    pub(super) fn granted(
        &mut self,
        server: Arc<dyn AgentServer>,
        grant: AgentGrant,
    ) -> UnboundedReceiver<AgentEvent> {
        self.token = Some(TokenGuard {
            server,
            endpoint: grant.endpoint,
            port: grant.port,
        });
        grant.events
    }

    /// The run's MCP endpoint and the server's port, when it has a token.
    pub(super) fn mcp(&self) -> Option<(&McpEndpoint, u16)> {
        self.token.as_ref().map(|t| (&t.endpoint, t.port))
    }

    /// Starts `cmd` in the placement and holds its process. With `restrict`, the token
    /// only works from the address the started run's requests come from.
    pub(super) async fn start(
        &mut self,
        cmd: &CommandSpec,
        out: OutputOptions,
        restrict: bool,
    ) -> Result<(), NotStarted> {
        let placement = self
            .placement
            .as_deref_mut()
            .ok_or_else(|| NotStarted::new(ErrorKind::Unknown, "internal: the run has no place"))?;
        if let Some(t) = &self.token {
            placement.agent_port(t.port);
        }
        let handle = placement
            .start(cmd, out)
            .await
            .map_err(|e: RunnerError| NotStarted::new(e.kind(), e.to_string()))?;
        match (handle.peer(), &self.token, restrict) {
            (Some(ip), Some(t), true) => t.restrict(ip),
            (None, Some(_), true) => {
                tracing::warn!(task = ?cmd.cwd, "the run's address is unknown: its MCP token stays unusable")
            }
            _ => {}
        }
        self.argv = std::iter::once(cmd.program.display().to_string())
            .chain(cmd.args.iter().cloned())
            .collect();
        self.process = Some(handle);
        Ok(())
    }

    /// The started run.
    pub(super) fn process(&mut self) -> Result<&mut Box<dyn RunHandle>, NotStarted> {
        self.process
            .as_mut()
            .ok_or_else(|| NotStarted::new(ErrorKind::Unknown, "internal: the run did not start"))
    }

    /// The graceful end, in the guards' order: the tree shut down (with `grace`), the
    /// scaffold removed, the token revoked, the placement finished (a remote run's work
    /// brought back, a container removed), the private directory removed, and the
    /// budget reservation settled with the run's charge (its cost from `result`, else
    /// its reservation or what it `streamed`, if more).
    pub(crate) async fn close(
        mut self,
        grace: Duration,
        result: &SessionResult,
        streamed: &LiveSpend,
    ) -> Closed {
        let started = self.process.is_some();
        let mut lost_place = None;
        if let Some(mut p) = self.process.take() {
            let _ = p.shutdown(grace).await;
            lost_place = p.lost_place();
        }
        self.scaffold.remove();
        drop(self.token.take());
        let mut place = None;
        let mut finish_error = None;
        let mut steps = Vec::new();
        let mut egress_denied = Vec::new();
        if let Some(mut p) = self.placement.take() {
            place = Some(p.describe());
            if let Err(e) = p.finish().await {
                finish_error = Some(e.to_string());
            }
            steps = p.steps();
            egress_denied = p.egress_denied();
        }
        self.private_dir.remove();
        let budget = self
            .budget
            .take()
            .map(|r| r.settle_run(result.cost_usd, streamed.priced_usd()));
        Closed {
            argv: std::mem::take(&mut self.argv),
            place,
            started,
            budget,
            finish_error,
            steps,
            egress_denied,
            scaffold: self.scaffold.laid_out().to_vec(),
            lost_place,
        }
    }
}

/// A run's MCP token: revoked when dropped.
#[derive(Debug)]
struct TokenGuard {
    server: Arc<dyn AgentServer>,
    endpoint: McpEndpoint,
    port: u16,
}

impl TokenGuard {
    fn restrict(&self, peer: IpAddr) {
        self.server.restrict(&self.endpoint.token, peer);
    }
}

impl Drop for TokenGuard {
    fn drop(&mut self) {
        self.server.revoke(&self.endpoint.token);
    }
}

/// A run's private directory: removed when dropped (or by [`PrivateDir::remove`]).
#[derive(Debug)]
struct PrivateDir(Option<PathBuf>);

impl PrivateDir {
    fn remove(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        self.remove();
    }
}
