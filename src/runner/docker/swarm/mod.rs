//! The swarm runner: each attempt is one Docker Swarm `replicated-job` service (one
//! replica, no restart: a retry is aicli's decision, never Swarm's), and its workspace
//! travels by protocol, not by filesystem, so the job can land on any node.
//!
//! 1. aicli serves the attempt's start commit (and the worktree's uncommitted changes)
//!    as a git bundle, and the run's other files (its private directory, the task's
//!    home, the packing wrapper) as a tar ([`up`]), over HTTP behind the attempt's token
//!    ([`serve`]), on the address the engine's containers reach aicli at.
//! 2. The attempt's orders (that address, the token, the CLI's argv, directory,
//!    environment and stdin: the prompt and the credentials) are a Swarm **secret**,
//!    mounted on tmpfs at `/run/secrets/`: never in the service's env, args or labels.
//!    The runner ([`RUNNER_JS`], run by the image's node) is a Swarm config.
//! 3. The runner fetches the files, runs the CLI under the wrapper, streams its stdout
//!    and stderr back as they come, and when the CLI exits (or aicli answers its held
//!    `signal` request: a cancel, a timeout) posts the work as a git bundle, the task's
//!    home and the exit status. aicli fetches the bundle into the task's branch as for a
//!    remote engine.
//! 4. The CLI reaches aicli's MCP server with the run's token, as in a container.
//!
//! The service, its secret and its config are removed when the run ends, on cancel and
//! timeout, by a dropped placement, and by `aicli containers prune` (by their labels,
//! when the aicli that made them is gone).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::models::TaskState;
use tokio_util::sync::CancellationToken;

use super::DockerError;
use super::hosts::{HOST_ALIAS, Host};
use crate::http::listener::{ConnLimits, ConnStats};
use crate::util::lock;

pub mod handle;
mod job;
pub mod images;
pub mod leftovers;
pub mod nodes;
pub mod serve;
pub mod up;

pub use job::{Job, JobSpec};
pub use leftovers::{list_jobs, remove_leftovers};
pub use nodes::check_manager;
pub use serve::{Ended, Slot};

/// The runner the job runs (see the module docs).
pub const RUNNER_JS: &str = include_str!("runner.js");
/// Where the runner is in the job's container.
pub(crate) const RUNNER_PATH: &str = "/aicli-swarm/runner.js";
/// Label on a swarm job's container (not [`super::labels::MANAGED`]: the container is
/// Swarm's to remove, with its service).
pub const JOB_LABEL: &str = "dev.aicli.swarm-job";
/// How often a job's state is asked (one request per running job: the runner's own
/// exit comes over the protocol, this only notices a job that ended without it).
const POLL: Duration = Duration::from_secs(1);
/// How long a runner has to post its exit after its job ended, before the run counts as
/// lost.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// How often (in polls) the job's node is asked whether it is up.
const NODE_EVERY: u32 = 3;
/// How long a job whose node went down has for its runner's word before the run counts
/// as lost with its node.
const NODE_LOST_GRACE: Duration = Duration::from_secs(10);
/// How long a job's runner has to stop the CLI, pack and post the work once aicli told
/// it to stop (then the job is removed whatever it did).
pub const STOP_GRACE: Duration = Duration::from_secs(40);
/// The largest orders (a Swarm secret holds at most 500 KiB).
pub const MAX_ORDERS: usize = 500 * 1024;

/// aicli's side of the protocol on one swarm: the HTTP server the jobs reach, and the
/// attempts it serves.
#[derive(Debug)]
pub struct Protocol {
    /// `http://HOST:PORT/swarm` as the jobs reach it.
    url: String,
    /// The `/etc/hosts` line a job's container needs for that host (`IP name`).
    hosts_entry: Option<String>,
    slots: serve::Slots,
    /// The other nodes' engines aicli knows.
    nodes: Vec<Docker>,
    _stop: tokio_util::sync::DropGuard,
}

impl Protocol {
    /// Starts the server on the address `host`'s containers reach aicli at; `nodes` are
    /// the other nodes' engines aicli knows.
    pub async fn start(host: &Host, nodes: Vec<Docker>) -> Result<Protocol, DockerError> {
        let bind = host.reach.bind;
        let listener = tokio::net::TcpListener::bind((bind, 0)).await.map_err(|e| {
            DockerError::Work(format!(
                "cannot listen on {bind} for the swarm's jobs: {e}"
            ))
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| DockerError::Work(e.to_string()))?
            .port();
        let slots: serve::Slots = Arc::default();
        let stop = CancellationToken::new();
        // Output streams stay open as long as the CLI runs (it may think for minutes);
        // a request's head must come quickly.
        let limits = ConnLimits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(3600),
        };
        tokio::spawn(crate::http::listener::serve(
            listener,
            serve::router(slots.clone()),
            limits,
            Arc::new(ConnStats::default()),
            stop.clone(),
            None,
        ));
        let alias_ip = host
            .alias_target
            .parse::<IpAddr>()
            .ok()
            .or(host.gateway);
        let hosts_entry = (host.reach.url_host == HOST_ALIAS)
            .then_some(alias_ip)
            .flatten()
            .map(|ip| format!("{ip} {HOST_ALIAS}"));
        tracing::info!(%bind, port, url_host = %host.reach.url_host, "swarm protocol server listening");
        Ok(Protocol {
            url: format!("http://{}:{port}/swarm", host.reach.url_host),
            hosts_entry,
            slots,
            nodes,
            _stop: stop.drop_guard(),
        })
    }

    /// Serves `slot` as attempt `key`.
    pub fn open(&self, key: &str, slot: Arc<Slot>) {
        lock(&self.slots).insert(key.to_owned(), slot);
    }

    /// Stops serving attempt `key`.
    pub fn close(&self, key: &str) {
        lock(&self.slots).remove(key);
    }

    /// The `/etc/hosts` line a job's container needs to reach aicli, if any.
    pub fn hosts_entry(&self) -> Option<&str> {
        self.hosts_entry.as_deref()
    }

    /// The other nodes' engines aicli knows.
    pub fn nodes(&self) -> &[Docker] {
        &self.nodes
    }

    /// Attempt `key`'s base URL.
    pub fn url_of(&self, key: &str) -> String {
        format!("{}/{key}", self.url)
    }
}

/// The attempt's orders: what the runner reads from its secret.
#[derive(Debug, serde::Serialize)]
pub struct Orders<'a> {
    /// The attempt's base URL.
    pub url: String,
    /// The attempt's token.
    pub token: &'a str,
    /// The command (the packing wrapper, then the CLI's argv).
    pub argv: &'a [String],
    /// Its directory.
    pub cwd: &'a str,
    /// Its environment (over the image's).
    pub env: HashMap<&'a str, &'a str>,
    /// What its stdin gets (the prompt).
    pub stdin: Option<&'a str>,
    /// The start commit.
    pub base: &'a str,
    /// The task's branch (absent: a detached HEAD).
    pub branch: Option<&'a str>,
    /// Whether the start bundle holds an uncommitted carry.
    pub carry: bool,
}

/// Watches the job's task until it ends; a job that ends without its runner's exit (it
/// could not start, was killed, lost its node) ends `slot` as [`Ended::Lost`] with the
/// engine's words. A removed service (a cancel, a timeout, a prune) gives its runner the
/// stop grace to pack and post the work first.
pub async fn watch(docker: Docker, service: String, slot: Arc<Slot>) {
    let mut ended_at: Option<tokio::time::Instant> = None;
    let mut wait = EXIT_GRACE;
    let mut said = String::new();
    let mut waiting = String::new();
    let mut polls = 0u32;
    let mut node_down_at: Option<tokio::time::Instant> = None;
    loop {
        if slot.ended.borrow().is_some() {
            return;
        }
        if let Some(t) = ended_at
            && t.elapsed() >= wait
        {
            slot.end(Ended::Lost(said));
            return;
        }
        let opts = bollard::query_parameters::ListTasksOptionsBuilder::default()
            .filters(&HashMap::from([("service", vec![service.as_str()])]))
            .build();
        match docker.list_tasks(Some(opts)).await {
            Ok(tasks) if ended_at.is_none() => {
                if let Some(t) = tasks.first() {
                    let status = t.status.clone().unwrap_or_default();
                    let state = status.state.unwrap_or(TaskState::NEW);
                    placed(&docker, t, &slot, &mut waiting).await;
                    polls += 1;
                    if let Some(node) = t.node_id.as_deref().filter(|n| !n.is_empty())
                        && polls.is_multiple_of(NODE_EVERY)
                        && node_gone(&docker, node, &slot, &mut node_down_at).await
                    {
                        return;
                    }
                    if matches!(
                        state,
                        TaskState::COMPLETE
                            | TaskState::FAILED
                            | TaskState::REJECTED
                            | TaskState::SHUTDOWN
                            | TaskState::ORPHANED
                            | TaskState::REMOVE
                    ) {
                        let hint = if status.err.as_deref().is_some_and(|e| e.contains("No such image")) {
                            " (the image is not on that node: `aicli image build --swarm` loads it on every node)"
                        } else {
                            ""
                        };
                        let code = status
                            .container_status
                            .and_then(|c| c.exit_code)
                            .map(|c| format!(", exit code {c}"))
                            .unwrap_or_default();
                        said = format!(
                            "the swarm job ended ({state}{code}) without its runner's exit{}",
                            status
                                .err
                                .or(status.message)
                                .map(|m| format!(": {m}{hint}"))
                                .unwrap_or_default()
                        );
                        ended_at = Some(tokio::time::Instant::now());
                    }
                }
            }
            Ok(_) => {}
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
                if ended_at.is_none() =>
            {
                ended_at = Some(tokio::time::Instant::now());
                wait = STOP_GRACE + EXIT_GRACE;
                said = "the swarm job's service was removed and its runner posted no exit"
                    .to_owned();
            }
            Err(e) => tracing::debug!(%service, error = %e, "asking for the swarm job's state"),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the job's `node` went down for good: once the manager says it is down, the
/// runner is told to stop (if it still can, it posts the work), and after
/// [`NODE_LOST_GRACE`] without its exit the run ends as [`Ended::NodeLost`].
async fn node_gone(
    docker: &Docker,
    node: &str,
    slot: &Slot,
    down_at: &mut Option<tokio::time::Instant>,
) -> bool {
    use bollard::models::NodeState;
    if let Some(t) = down_at {
        if t.elapsed() < NODE_LOST_GRACE {
            return false;
        }
        let words = lock(&slot.node).clone().unwrap_or_else(|| format!("node {node}"));
        slot.end(Ended::NodeLost(format!(
            "the swarm {words} went down mid-run (the manager lost its engine) and its runner said nothing more: the work on it since the start is lost, what it streamed is kept; `aicli resume` runs the task again"
        )));
        return true;
    }
    let state = match docker.inspect_node(node).await {
        Ok(n) => n.status.and_then(|s| s.state),
        Err(e) => {
            tracing::debug!(%node, error = %e, "asking for the swarm node's state");
            return false;
        }
    };
    if matches!(state, Some(NodeState::DOWN | NodeState::DISCONNECTED)) {
        *down_at = Some(tokio::time::Instant::now());
        slot.notice(format!(
            "the swarm node of this job is {}: telling its runner to stop, {} s for its word",
            state.map(|s| s.to_string()).unwrap_or_default(),
            NODE_LOST_GRACE.as_secs()
        ));
        slot.request_stop();
    }
    false
}

/// Notes where the swarm put job task `t`: its node once it has one (in `slot`, and said
/// on the run's stream), or, while no node takes it, the scheduler's reason (said each
/// time it changes; `waiting` holds the last).
async fn placed(docker: &Docker, t: &bollard::models::Task, slot: &Slot, waiting: &mut String) {
    if let Some(node) = t.node_id.as_deref().filter(|n| !n.is_empty()) {
        if lock(&slot.node).is_none() {
            let words = nodes::describe(docker, node).await;
            slot.notice(format!("running as a swarm job on {words}"));
            *lock(&slot.node) = Some(words);
        }
        return;
    }
    // A job the scheduler cannot place stays pending with its reason in `err`
    // ("no suitable node (scheduling constraints not satisfied on 2 nodes)",
    // "insufficient resources on 2 nodes"); it waits, as long as the task's timeout.
    let why = t.status.as_ref().and_then(|s| s.err.clone()).unwrap_or_default();
    if !why.is_empty() && why != *waiting {
        slot.notice(format!("waiting for a swarm node to take the job: {why}"));
        *waiting = why;
    }
}

/// An attempt's key: a service name (letters, digits, `-`; at most 63 characters) made of
/// the batch, task and attempt and a random end.
pub fn key_of(batch: &str, task: &str, attempt: u32) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
            .collect()
    };
    let end = hex::encode(rand::random::<[u8; 3]>());
    let mut head = format!("aicli-{}-{}-{attempt}", clean(batch), clean(task));
    head.truncate(63 - end.len() - 1);
    format!("{}-{end}", head.trim_end_matches('-'))
}

/// Unpacks the home tar a runner posted (`dir/home.tar`) and puts it in the place of
/// `home`; nothing when none was posted.
pub fn apply_home(dir: &Path, home: &Path) -> Result<(), DockerError> {
    let tar = dir.join("home.tar");
    let Ok(f) = std::fs::File::open(&tar) else {
        return Ok(());
    };
    let into = dir.join("home");
    let _ = std::fs::remove_dir_all(&into);
    std::fs::create_dir_all(&into).map_err(|e| DockerError::Work(e.to_string()))?;
    super::remote::unpack(f, &into).0.map_err(|e| {
        DockerError::Work(format!("cannot unpack the task's home the job sent back: {e}"))
    })?;
    super::remote::replace_home(&into.join("aicli"), home, dir)
}
