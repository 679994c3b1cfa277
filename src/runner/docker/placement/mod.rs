//! One run in a container: the [`Placement`] the Docker runner hands out.
//!
//! The command comes with this machine's paths; [`DockerPlacement::start`] maps them
//! (see [`super::paths`]) and runs it in the container:
//!
//! - a local engine bind-mounts the worktree at `/workspace`, the run's private
//!   directory at `/aicli`, the task's home at `/home/aicli` and the repository's git
//!   directory at its own path (the worktree's `.git` file points there), so the work
//!   lands in the worktree as it happens. The container is made and started before the
//!   command is known ([`DockerPlacement::warm_up`]: ahead of the task's turn when the
//!   runner warms it, else at the start): its first process waits for a `go` line on its
//!   stdin, then runs the launch script aicli wrote in the run's private directory (the
//!   directory, the environment, `exec` of the CLI; the script removes itself first), and
//!   the CLI reads the rest of stdin, the prompt. Neither the command nor its environment
//!   is in what `docker inspect` shows;
//! - a remote engine gets the same files uploaded (see [`super::remote`]) and runs the
//!   CLI under a wrapper that packs the work into a git bundle when it ends.
//!
//! The container is labelled (batch, task, attempt, owner), limited (memory, CPUs, pids,
//! network), runs with `--init`, `no-new-privileges` and `host.docker.internal` naming
//! aicli's machine, and is removed in [`DockerPlacement::finish`] (or, as a safety net,
//! when the placement is dropped).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::{BinaryLocation, CommandSpec, DockerConfig};
use async_trait::async_trait;
use tokio::sync::OwnedSemaphorePermit;

use super::egress::Egress;
use super::handle::{Container, ContainerHandle, ContainerStdin, Warm, remove_container};
use super::hosts::Host;
use super::labels::Labelled;
use super::paths::{HOME, PRIVATE, PathMap, WORKSPACE};
use super::{DockerError, launch, remote, swarm};

mod access;
mod request;
mod swarm_job;
use crate::proc::spawn::OutputOptions;
use crate::record::EgressDenial;
use crate::runner::{AgentReach, Placement, RunHandle, RunnerError};

/// Variables of a local run's environment that name this machine (its paths, its user)
/// and so stay out of a container.
const HOST_ONLY: [&str; 12] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "SHELL",
    "XDG_*",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

/// How long a remote run may take to pack its work after SIGTERM, on top of the grace.
const PACK_ALLOWANCE: Duration = Duration::from_secs(30);


/// Everything [`DockerPlacement`] needs, decided by the runner.
#[derive(Debug)]
pub struct PlacementSpec {
    /// The engine.
    pub host: Arc<Host>,
    /// The place held on it (released when the placement is dropped); none while the
    /// placement is warm, waiting for its task's turn.
    pub permit: Option<OwnedSemaphorePermit>,
    /// The image.
    pub image: String,
    /// `PATH` in the image.
    pub image_path: String,
    /// The CLI's executable name (found on the image's `PATH`).
    pub binary_name: String,
    /// `uid:gid` the CLI runs as.
    pub user: (u32, u32),
    /// Limits.
    pub limits: Arc<DockerConfig>,
    /// The run's CPU and memory limits and reservations (`limits`', over which the
    /// task's).
    pub resources: aicli_providers::Resources,
    /// A swarm job's placement constraints (the provider's, then the task's).
    pub constraints: Vec<String>,
    /// The task's worktree.
    pub workspace: PathBuf,
    /// The run's private directory.
    pub private_dir: PathBuf,
    /// The task's home.
    pub task_home: PathBuf,
    /// The labels.
    pub labels: Labelled,
    /// Where downloads wait before they are applied (on this machine).
    pub scratch: PathBuf,
    /// The runner's clean-ups: a dropped placement removes its container on it, and
    /// [`crate::runner::Runner::settle`] waits for them.
    pub cleanups: tokio_util::task::TaskTracker,
    /// The steps timed so far (placing it), and those to come.
    pub steps: crate::runner::Steps,
    /// The egress allowlist's plan (a local engine with `egress.enabled`): the container
    /// gets no network, and aicli's proxy and MCP server through sockets.
    pub egress: Option<super::egress::Plan>,
    /// The MCP server's port on loopback: known before the run's grant when made ahead
    /// ([`crate::runner::PlaceRequest::agent_port`]), the grant's once told.
    pub agent_port: Option<u16>,
    /// The swarm's protocol server, when the run is a swarm job ([`super::swarm`]).
    pub swarm: Option<Arc<swarm::Protocol>>,
}

/// A run in a container (see the module docs).
#[derive(Debug)]
pub struct DockerPlacement {
    spec: PlacementSpec,
    map: PathMap,
    container: Option<Arc<Container>>,
    /// The started container, waiting for its go (a local engine's); in a mutex only to
    /// be `Sync` (its attach streams are not).
    warm: Option<std::sync::Mutex<Warm>>,
    /// How the CLI reaches aicli's MCP server.
    reach: AgentReach,
    /// The run's proxy, while it runs.
    egress: Option<Egress>,
    /// What the proxy refused (once it stopped).
    denied: Vec<EgressDenial>,
    /// The swarm job, once made.
    job: Option<SwarmRun>,
}

/// A swarm run's job, the key it is served under, and its slot.
#[derive(Debug)]
pub(super) struct SwarmRun {
    job: swarm::Job,
    key: String,
    slot: Arc<swarm::Slot>,
}

impl DockerPlacement {
    /// A placement of `spec`.
    pub fn new(spec: PlacementSpec) -> DockerPlacement {
        let map = PathMap::new([
            (spec.workspace.as_path(), WORKSPACE),
            (spec.private_dir.as_path(), PRIVATE),
            (spec.task_home.as_path(), HOME),
        ]);
        // Behind the egress proxy the MCP server is on the container's own loopback (a
        // forwarder to this run's socket), and the run's requests reach it from a
        // loopback address of the run's own: its token works from there only.
        let reach = if spec.egress.is_some() {
            AgentReach {
                url_host: "127.0.0.1".to_owned(),
                bind: std::net::IpAddr::from([127, 0, 0, 1]),
                restrict_to_peer: true,
            }
        } else if spec.swarm.is_some() {
            // A job's address is not known ahead (nor fixed, on an overlay): the token
            // alone admits it.
            AgentReach {
                restrict_to_peer: false,
                ..spec.host.reach.clone()
            }
        } else {
            spec.host.reach.clone()
        };
        DockerPlacement {
            spec,
            map,
            container: None,
            warm: None,
            reach,
            egress: None,
            denied: Vec::new(),
            job: None,
        }
    }

    fn err(&self, e: DockerError) -> RunnerError {
        e.into_error_of(if self.spec.swarm.is_some() { "swarm" } else { "docker" })
    }

    /// Makes and starts a local engine's container, its first process waiting for its
    /// go: the mounts (uid-mapped where they must be), the egress sockets. Ahead of the
    /// task's turn when the runner warms it (see [`super::DockerRunner::warm`]), else at
    /// the start.
    pub async fn warm_up(&mut self) -> Result<(), RunnerError> {
        let name = self.name();
        // The container's user must read the run's files (written by this process), keep
        // its sessions in the task's home and work in the worktree. The uid-mapped mounts
        // are needed until the container has started (it then holds its own copies).
        let access_started = std::time::Instant::now();
        let mut dirs = self.bind_dirs();
        let staged = self
            .give_access(&name, &mut dirs)
            .map_err(|e| self.err(e))?;
        self.spec.steps.push("give access (uid-mapped mounts)", access_started);
        if let Some(stub) = super::paths::root_stub(&self.spec.private_dir, &dirs)
            .map_err(|e| self.err(DockerError::Work(e.to_string())))?
        {
            dirs.push(stub);
        }
        if self.spec.egress.is_some() {
            let e = Egress::bind(self.spec.user, self.spec.agent_port).map_err(|e| {
                self.err(DockerError::Work(format!(
                    "cannot make the run's egress sockets: {e}"
                )))
            })?;
            dirs.push(e.mount());
            self.egress = Some(e);
        }
        let body = self.body(None, &dirs).map_err(|e| self.err(e))?;
        let container = self.create(&name, body).await?;
        let peer = self.egress.as_ref().map(Egress::peer);
        let started = self.start_container(container, &name, true, peer).await;
        drop(staged);
        self.warm = Some(std::sync::Mutex::new(started?));
        Ok(())
    }

    /// Takes the place `permit` on its engine: the warm placement becomes the run's;
    /// `steps`: the run's so far (those made ahead go first, named so).
    pub fn hold(&mut self, permit: OwnedSemaphorePermit, mut steps: crate::runner::Steps) {
        self.spec.permit = Some(permit);
        steps.ahead(self.spec.steps.take());
        self.spec.steps = steps;
    }

    /// The engine it is on.
    pub fn host(&self) -> &Arc<Host> {
        &self.spec.host
    }

    /// Whether it was made for a run in `workspace` with `private_dir`, in `image`.
    pub fn is_for(&self, workspace: &Path, private_dir: &Path, image: &str) -> bool {
        self.spec.workspace == workspace
            && self.spec.private_dir == private_dir
            && self.spec.image == image
    }

    /// A local run: the started container gets its launch script and its go.
    async fn go_local(
        &mut self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<ContainerHandle, RunnerError> {
        let exited = self
            .warm
            .as_ref()
            .is_some_and(|w| w.lock().is_ok_and(|w| w.exited()));
        // Its forwarder listens for another MCP port than the run's grant (made ahead
        // with a guess that proved wrong).
        let other_port = self
            .egress
            .as_ref()
            .is_some_and(|e| e.mcp_port() != self.spec.agent_port);
        if self.warm.is_some() && (exited || other_port) {
            // Made ahead and gone since (the engine restarted, say): made again.
            tracing::warn!(task = %self.spec.labels.task_id, exited, other_port, "the warm container cannot run the CLI: making another");
            self.warm = None;
            let _ = self.remove().await;
            self.egress = None;
        }
        if self.warm.is_none() {
            self.warm_up().await?;
        }
        if let (Some(e), Some(plan)) = (self.egress.as_mut(), &self.spec.egress) {
            e.serve(plan, cmd);
        }
        let (cwd, argv, env) = self.in_container(cmd).map_err(|e| self.err(e))?;
        let script = launch::script(&cwd, &argv, &env).map_err(|e| self.err(e))?;
        launch::write(&self.spec.private_dir, &script).map_err(|e| {
            self.err(DockerError::Work(format!(
                "cannot write the run's launch script in {}: {e}",
                self.spec.private_dir.display()
            )))
        })?;
        let warm = self
            .warm
            .take()
            .map(|w| w.into_inner().unwrap_or_else(|e| e.into_inner()))
            .ok_or_else(|| {
                self.err(DockerError::Work("internal: no started container".to_owned()))
            })?;
        let go_started = std::time::Instant::now();
        let handle = ContainerHandle::go(warm, Some(launch::GO), stdin_of(cmd), out, Duration::ZERO).await;
        self.spec.steps.push("go", go_started);
        Ok(handle)
    }

    /// A remote run: the container is made for `cmd`, the run's files uploaded, then it
    /// starts.
    async fn start_remote(
        &mut self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<ContainerHandle, RunnerError> {
        let name = self.name();
        let body = self.body(Some(cmd), &[]).map_err(|e| self.err(e))?;
        let container = self.create(&name, body).await?;
        let up = remote::Upload {
            workspace: self.spec.workspace.clone(),
            private_dir: self.spec.private_dir.clone(),
            task_home: self.spec.task_home.clone(),
            uid: u64::from(self.spec.user.0),
            gid: u64::from(self.spec.user.1),
        };
        let upload_started = std::time::Instant::now();
        let uploaded = remote::upload(&container, &up, &self.spec.scratch).await;
        self.spec.steps.push("upload", upload_started);
        uploaded.map_err(|e| self.err(e))?;
        let stdin = stdin_of(cmd);
        let warm = self
            .start_container(container, &name, stdin.attached(), None)
            .await?;
        Ok(ContainerHandle::go(warm, None, stdin, out, PACK_ALLOWANCE).await)
    }

    async fn remove(&mut self) -> Result<(), DockerError> {
        let Some(c) = self.container.take() else {
            return Ok(());
        };
        remove_container(&c).await
    }
}

/// What the container's stdin gets: the command's text, and whether it stays open (a
/// two-way CLI, an ACP agent).
fn stdin_of(cmd: &CommandSpec) -> ContainerStdin {
    ContainerStdin {
        text: cmd.stdin.clone(),
        open: cmd.stdin_open,
    }
}

#[async_trait]
impl Placement for DockerPlacement {
    fn describe(&self) -> String {
        if self.spec.swarm.is_some() {
            let node = self
                .job
                .as_ref()
                .and_then(|j| crate::util::lock(&j.slot.node).clone())
                .map(|n| format!(" on {n}"))
                .unwrap_or_default();
            return format!("swarm {} ({}){node}", self.spec.host.name, self.spec.image);
        }
        format!("docker {} ({})", self.spec.host.name, self.spec.image)
    }

    fn agent_reach(&self) -> Option<&AgentReach> {
        Some(&self.reach)
    }

    fn env(&self, inherited: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        // What a local run of the CLI would get, minus what names this machine's paths.
        let mut env: BTreeMap<String, String> = inherited
            .iter()
            .filter(|(k, _)| !HOST_ONLY.iter().any(|p| crate::env::matches(p, k)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // The task's home, as this machine knows it (providers may read it); the path
        // map makes it /home/aicli in the container.
        env.insert("HOME".to_owned(), self.spec.task_home.display().to_string());
        env.insert("PATH".to_owned(), self.spec.image_path.clone());
        env.entry("LANG".to_owned())
            .or_insert_with(|| "C.UTF-8".to_owned());
        // This machine's time zone, so that a time the CLI prints in words (codex's "try
        // again at 10:36 PM") means what aicli reads it as.
        if let Some(zone) = jiff::tz::TimeZone::system().iana_name() {
            env.entry("TZ".to_owned()).or_insert_with(|| zone.to_owned());
        }
        env
    }

    fn binary(&self) -> Option<BinaryLocation> {
        Some(BinaryLocation::Path(PathBuf::from(&self.spec.binary_name)))
    }

    fn runs_as_root(&self) -> bool {
        self.spec.user.0 == 0
    }

    fn visible_path(&self, path: &Path) -> PathBuf {
        self.map
            .container_path(path)
            .unwrap_or_else(|| path.to_path_buf())
    }

    async fn start(
        &mut self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<Box<dyn RunHandle>, RunnerError> {
        if let Some(proto) = self.spec.swarm.clone() {
            let handle = self.start_swarm(proto, cmd, out).await?;
            tracing::info!(host = %self.spec.host.name, image = %self.spec.image, task = %self.spec.labels.task_id, "swarm job made");
            return Ok(handle);
        }
        let handle = if self.spec.host.remote {
            self.start_remote(cmd, out).await?
        } else {
            self.go_local(cmd, out).await?
        };
        tracing::info!(host = %self.spec.host.name, image = %self.spec.image, task = %self.spec.labels.task_id, "container running");
        Ok(Box::new(handle))
    }

    fn steps(&mut self) -> Vec<crate::record::SetupStep> {
        self.spec.steps.take()
    }

    fn agent_port(&mut self, port: u16) {
        self.spec.agent_port = Some(port);
    }

    fn egress_denied(&mut self) -> Vec<EgressDenial> {
        std::mem::take(&mut self.denied)
    }

    async fn finish(&mut self) -> Result<(), RunnerError> {
        if self.spec.swarm.is_some() {
            return self.finish_swarm().await;
        }
        let mut result = Ok(());
        if self.spec.host.remote
            && let Some(c) = self.container.clone()
        {
            let tag = format!(
                "{}-{}-{}",
                self.spec.labels.batch_id, self.spec.labels.task_id, self.spec.labels.attempt
            );
            let back_started = std::time::Instant::now();
            let back = remote::bring_back(
                &c,
                Some(&self.spec.workspace),
                Some(&self.spec.task_home),
                &self.spec.scratch,
                &tag,
            )
            .await;
            self.spec.steps.push("bring back", back_started);
            match back {
                Ok(true) => {
                    let _ = std::fs::remove_dir_all(&self.spec.scratch);
                }
                Ok(false) => {
                    let _ = std::fs::remove_dir_all(&self.spec.scratch);
                    tracing::warn!(host = %c.host, container = %c.id, "the remote run left no bundle: its work since the start is not brought back");
                }
                Err(e) => result = Err(self.err(e)),
            }
        }
        let remove_started = std::time::Instant::now();
        let removed = self.remove().await;
        self.spec.steps.push("remove container", remove_started);
        if let Err(e) = removed {
            tracing::warn!(error = %e, "removing the container");
            if result.is_ok() {
                result = Err(self.err(e));
            }
        }
        if let Some(mut e) = self.egress.take() {
            self.denied = e.stop();
        }
        result
    }
}

impl Drop for DockerPlacement {
    fn drop(&mut self) {
        // Safety net: finish() is the normal path.
        if let Some(SwarmRun { mut job, key, .. }) = self.job.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            if let Some(p) = &self.spec.swarm {
                p.close(&key);
            }
            self.spec.cleanups.spawn_on(async move {
                if let Err(e) = job.remove().await {
                    tracing::warn!(error = %e, "removing a swarm job left by a dropped run");
                }
            }, &rt);
        }
        if let Some(c) = self.container.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            self.spec.cleanups.spawn_on(async move {
                if let Err(e) = remove_container(&c).await {
                    tracing::warn!(error = %e, "removing a container left by a dropped run");
                }
            }, &rt);
        }
    }
}
