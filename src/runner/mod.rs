//! Where a CLI process runs. The session layer talks to a [`Runner`], the [`Placement`] it
//! hands out for one run, and the [`RunHandle`] of the started run only, so the
//! [`docker::DockerRunner`] slots in beside the [`local::LocalRunner`] without touching
//! sessions, pool or service.
//!
//! A run goes through three steps:
//!
//! 1. [`Runner::place`]: where the run goes (a container engine with free capacity), how
//!    the CLI there reaches aicli's MCP server ([`Placement::agent_reach`]), which binary
//!    it runs, which environment it starts from. Chosen before the run's MCP token is
//!    granted, because the token's URL depends on it.
//! 2. [`Placement::start`]: the provider's [`CommandSpec`] (built with this machine's
//!    paths, as for a local run) is started; a container runner maps those paths into
//!    the container.
//! 3. [`Placement::finish`]: after the run, however it ended: the work comes back (from a
//!    remote engine) and whatever the placement held is released.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aicli_providers::{BinaryLocation, CommandSpec, SharedProvider};
use async_trait::async_trait;

use crate::proc::lines::{LineReceiver, StderrTail};
use crate::proc::spawn::{OutputOptions, SpawnError};
use crate::proc::stdin::StdinWriter;

pub mod docker;
pub mod local;

pub use docker::DockerRunner;
pub use local::LocalRunner;

/// Errors placing or starting a run.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A local process could not start.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// What the run needs is missing (a container image, say); the message says how to
    /// make it.
    #[error("{runner} runner: {message}")]
    Missing {
        /// The runner's name.
        runner: String,
        /// What is missing and how to get it.
        message: String,
    },
    /// The task asks what the runner cannot do (say, placement constraints off a swarm).
    #[error("{runner} runner: {message}")]
    BadRequest {
        /// The runner's name.
        runner: String,
        /// What was asked, and why it cannot be.
        message: String,
    },
    /// The runner's backend failed (e.g. the container engine).
    #[error("{runner} runner: {message}")]
    Backend {
        /// The runner's name.
        runner: String,
        /// What failed.
        message: String,
    },
}

impl RunnerError {
    /// The task error a run that could not be placed or started ends with: a missing
    /// executable or image is `not_installed`, anything else `crashed`.
    pub fn kind(&self) -> aicli_providers::ErrorKind {
        use aicli_providers::ErrorKind;
        match self {
            RunnerError::Spawn(SpawnError::Start { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                ErrorKind::NotInstalled
            }
            RunnerError::Missing { .. } => ErrorKind::NotInstalled,
            RunnerError::BadRequest { .. } => ErrorKind::BadRequest,
            RunnerError::Spawn(_) | RunnerError::Backend { .. } => ErrorKind::Crashed,
        }
    }
}

/// What a runner needs to know to place one run.
#[derive(Debug, Clone, Copy)]
pub struct PlaceRequest<'a> {
    /// The batch.
    pub batch_id: &'a str,
    /// The task.
    pub task_id: &'a str,
    /// The attempt's number (1-based, over the task's whole record).
    pub attempt: u32,
    /// The provider.
    pub provider: &'a SharedProvider,
    /// What the CLI may change: the task's worktree (or the repository itself when tasks
    /// run without worktrees).
    pub workspace: &'a Path,
    /// Where the CLI starts: the workspace or its `cwd` subdirectory.
    pub workdir: &'a Path,
    /// The run's private directory on this machine (config files, links; removed after
    /// the run). Never inside the workspace.
    pub private_dir: &'a Path,
    /// A directory of this task kept across its attempts (a container run's home: the
    /// CLI's sessions, so that an answer resumes them, and copies of its login).
    pub task_home: &'a Path,
    /// The home of another task whose CLI session this run continues (its
    /// `resume_session_id`): a container run's home starts as a copy of it.
    pub session_home: Option<&'a Path>,
    /// The task's branch, when it has a worktree.
    pub branch: Option<&'a str>,
    /// The environment the engine would give a local CLI.
    pub inherited_env: &'a BTreeMap<String, String>,
    /// The port of aicli's MCP server on loopback, when the run will have a token and
    /// it is known before the grant: a container made ahead needs it (its egress
    /// forwarder listens there from the start).
    pub agent_port: Option<u16>,
    /// The task's resources, over the runner's (a container runner's limits, a swarm
    /// job's reservations).
    pub resources: Option<&'a aicli_providers::TaskResources>,
    /// The task's swarm placement constraints (only the swarm runner places by them).
    pub constraints: &'a [String],
}

/// How a CLI reaches aicli's MCP server from where it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentReach {
    /// The host name in the URL (`host.docker.internal`, a configured address).
    pub url_host: String,
    /// The local address the server must listen on for it (the bridge gateway).
    pub bind: IpAddr,
    /// Requests of the run come from the address its handle reports
    /// ([`RunHandle::peer`]): its token is restricted to that address.
    pub restrict_to_peer: bool,
}

/// A runner's timed steps for one run, in order (the attempt record's `setup`); each is
/// also a debug line (`-v`).
#[derive(Debug, Clone)]
pub struct Steps {
    began: std::time::Instant,
    done: Vec<crate::record::SetupStep>,
}

impl Default for Steps {
    fn default() -> Steps {
        Steps {
            began: std::time::Instant::now(),
            done: Vec::new(),
        }
    }
}

impl Steps {
    /// Runs `f` as step `step`.
    pub async fn time<T>(&mut self, step: &str, f: impl std::future::Future<Output = T>) -> T {
        let start = std::time::Instant::now();
        let out = f.await;
        self.push(step, start);
        out
    }

    /// Step `step`, begun at `start`, is done.
    pub fn push(&mut self, step: &str, start: std::time::Instant) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let s = crate::record::SetupStep {
            step: step.to_owned(),
            at_ms: ms(start.saturating_duration_since(self.began)),
            ms: ms(start.elapsed()),
        };
        tracing::debug!(step, at_ms = s.at_ms, ms = s.ms, "runner step");
        self.done.push(s);
    }

    /// Puts `ahead`, steps done before the run's place was chosen (its container made
    /// ahead), first, each named `ahead: <step>` (their times from their own start).
    pub fn ahead(&mut self, ahead: Vec<crate::record::SetupStep>) {
        let ahead = ahead.into_iter().map(|mut s| {
            s.step = format!("ahead: {}", s.step);
            s
        });
        self.done.splice(0..0, ahead);
    }

    /// The steps so far, taken.
    pub fn take(&mut self) -> Vec<crate::record::SetupStep> {
        std::mem::take(&mut self.done)
    }
}

/// Starts CLI runs somewhere.
#[async_trait]
pub trait Runner: Send + Sync + std::fmt::Debug {
    /// A short name (`local`, `docker`).
    fn name(&self) -> &str;

    /// Chooses where a run goes (and holds that place until the placement is dropped).
    async fn place(&self, req: &PlaceRequest<'_>) -> Result<Box<dyn Placement>, RunnerError>;

    /// Removes what an interrupted run of `task_id` in batch `batch_id` left (containers
    /// of an aicli that was killed), bringing its work back first where it is elsewhere.
    /// Returns a line per thing removed.
    async fn remove_leftovers(&self, batch_id: &str, task_id: &str) -> Vec<String> {
        let _ = (batch_id, task_id);
        Vec::new()
    }

    /// Waits until what dropped placements left to undo (the container of a run that
    /// panicked) is undone. The engine calls it before a batch, an answer or a resume
    /// returns.
    async fn settle(&self) {}

    /// Makes ahead what placing `req` will need (a started container), while the run
    /// waits for its turn; [`Runner::place`] of the same batch, task and attempt takes
    /// it. Default: nothing.
    async fn warm(&self, req: &PlaceRequest<'_>) {
        let _ = req;
    }

    /// Removes what was made ahead for batch `batch_id` and never taken (its tasks never
    /// started). The batch calls it when it ends.
    async fn cool(&self, batch_id: &str) {
        let _ = batch_id;
    }
}

/// One run's place: made by [`Runner::place`], used for one start, then finished.
#[async_trait]
pub trait Placement: Send + Sync + std::fmt::Debug {
    /// For logs: the runner and where (`local`, `docker local/aicli-…`).
    fn describe(&self) -> String;

    /// How the CLI reaches aicli's MCP server; `None`: over loopback, as a local process.
    fn agent_reach(&self) -> Option<&AgentReach>;

    /// The environment the CLI starts from (the provider's and the task's variables come
    /// on top), given what the engine gives a local CLI.
    fn env(&self, inherited: &BTreeMap<String, String>) -> BTreeMap<String, String>;

    /// The CLI's executable where the run happens, when the placement provides its own
    /// (a container image's); `None`: the provider finds it on this machine.
    fn binary(&self) -> Option<BinaryLocation>;

    /// Whether the CLI runs as root.
    fn runs_as_root(&self) -> bool;

    /// A path of this machine as the CLI sees it (a link's target, say).
    fn visible_path(&self, path: &Path) -> PathBuf;

    /// Starts `cmd`; its stdout arrives as lines, its stderr in a tail.
    async fn start(
        &mut self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<Box<dyn RunHandle>, RunnerError>;

    /// After the run, however it ended: brings the work back where it happened elsewhere,
    /// releases what the placement held. Errors say what could not be brought back.
    async fn finish(&mut self) -> Result<(), RunnerError>;

    /// What it did, timed ([`Steps`]), taken after [`Placement::finish`]; none for a
    /// local process.
    fn steps(&mut self) -> Vec<crate::record::SetupStep> {
        Vec::new()
    }

    /// The port of aicli's MCP server the run's token was granted on (told before
    /// [`Placement::start`] when the run has one): a placement that carries the CLI's
    /// MCP traffic itself needs it.
    fn agent_port(&mut self, _port: u16) {}

    /// The connections its egress proxy refused, taken after [`Placement::finish`];
    /// none where the run has no proxy.
    fn egress_denied(&mut self) -> Vec<crate::record::EgressDenial> {
        Vec::new()
    }
}

/// A started run.
#[async_trait]
pub trait RunHandle: Send + std::fmt::Debug {
    /// Stdout lines as they arrive (bounded in bytes: `proc::lines::line_channel`);
    /// closed at EOF. Taken once (later calls get a closed channel), so a session can
    /// wait for lines and for the exit at the same time.
    fn take_lines(&mut self) -> LineReceiver;
    /// The stderr tail.
    fn stderr(&self) -> StderrTail;
    /// The process id on this machine, when there is one.
    fn pid(&self) -> Option<u32>;
    /// Why the run ended with the place it ran on (a swarm node that went down), when it
    /// did: not the task's doing, so the run ends interrupted, for `aicli resume`.
    fn lost_place(&self) -> Option<String> {
        None
    }

    /// What the runner says about the run while it waits or starts (a swarm job's
    /// placement), for the task's live stream; taken once.
    fn notices(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        None
    }
    /// The address the run's network requests come from, when it has its own (a
    /// container's on a local bridge).
    fn peer(&self) -> Option<IpAddr> {
        None
    }
    /// Waits for the run to exit: `Some(code)`, `None` when killed by a signal.
    async fn wait(&mut self) -> Option<i32>;
    /// Stops the run and everything it started: SIGTERM, `grace`, SIGKILL.
    async fn shutdown(&mut self, grace: Duration) -> Option<i32>;
    /// Waits until its output is fully read and recorded.
    async fn drain(&mut self);
    /// A two-way run's stdin ([`CommandSpec::stdin_open`]), taken once; `None` when the
    /// command did not ask for it, or the runner cannot keep a CLI's stdin open.
    fn take_stdin(&mut self) -> Option<StdinWriter> {
        None
    }
}
