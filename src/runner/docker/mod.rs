//! The Docker runner: each run in its own container, on this machine's engine or on
//! remote ones, through the Engine API (bollard).
//!
//! | module | owns |
//! |---|---|
//! | `hosts` | connecting to engines (`DOCKER_HOST` schemes), capacity, how containers reach aicli, choosing the engine with the most free room |
//! | `placement` | [`placement::DockerPlacement`]: one run's container (mounts or upload, limits, labels, user, removal) |
//! | `warm` | containers made ahead of their tasks' turns ([`Runner::warm`]), taken by their runs or removed |
//! | `launch` | how a local container, started before its command is known, runs its CLI: the go line, the launch script |
//! | `home` | the task's home: the login copies, a continued session's store |
//! | `egress` | the allowlist: a container with no network, aicli's proxy and MCP server reached through sockets |
//! | `handle` | the started container as a [`RunHandle`](crate::runner::RunHandle): live stdout/stderr, exit code, signals |
//! | `paths` | this machine's paths as the container sees them |
//! | `idmap` | uid-mapped mounts: the container's unprivileged user in directories root owns |
//! | `remote` | the tar that goes up and the git bundle that comes back |
//! | `tarball` | tars streamed into request bodies (links kept, hard links once, owner set) |
//! | `labels` | the labels on aicli's containers and whether their owner is alive |
//! | `leftovers` | finding and removing the containers a killed aicli left |
//! | `image` | `aicli image build`: a provider's image from a local base, offline |

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aicli_providers::{DockerConfig, SharedProvider};
use async_trait::async_trait;

use super::{PlaceRequest, Placement, Runner, RunnerError};

pub mod egress;
pub mod handle;
pub mod hosts;
mod home;
pub mod idmap;
pub mod image;
pub mod labels;
pub mod launch;
pub mod leftovers;
pub mod paths;
pub mod placement;
pub mod remote;
mod ssh;
pub mod swarm;
pub mod tarball;
mod warm;

pub use home::forget_logins;
pub use hosts::Host;
use home::{COMMON_HOME_FILES, copy_home_files, create_private_dir, seed_home};

/// The runner's name.
const NAME: &str = "docker";
/// The runner's name on a swarm.
const SWARM: &str = "swarm";

/// What went wrong with an engine.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// An engine could not be reached or understood.
    #[error("docker host '{host}' ({url}): {message}")]
    Connect {
        /// Its name.
        host: String,
        /// Its address.
        url: String,
        /// Why.
        message: String,
    },
    /// No engine could be used.
    #[error("no docker engine is available: {0}")]
    NoEngine(String),
    /// The image a run needs is not on the engine.
    #[error("{0}")]
    MissingImage(String),
    /// An Engine API call failed.
    #[error("{what}: {message}")]
    Api {
        /// What was being done.
        what: String,
        /// The engine's answer.
        message: String,
    },
    /// Files or git on this machine.
    #[error("{0}")]
    Work(String),
    /// The task asks what this runner cannot do.
    #[error("{0}")]
    BadRequest(String),
}

impl DockerError {
    /// As the Docker runner's error.
    pub fn into_runner_error(self) -> RunnerError {
        self.into_error_of(NAME)
    }

    /// As the error of runner `runner` (`docker`, `swarm`: what the message starts with).
    pub fn into_error_of(self, runner: &str) -> RunnerError {
        let runner = runner.to_owned();
        match self {
            DockerError::MissingImage(message) => RunnerError::Missing { runner, message },
            DockerError::BadRequest(message) => RunnerError::BadRequest { runner, message },
            other => RunnerError::Backend {
                runner,
                message: other.to_string(),
            },
        }
    }
}

/// `PATH` of an image on an engine, once inspected (a failed inspect is asked again).
type ImagePath = Arc<tokio::sync::OnceCell<String>>;

/// Runs CLIs in containers (see the module docs).
#[derive(Debug)]
pub struct DockerRunner {
    config: Arc<DockerConfig>,
    hosts: Vec<Arc<Host>>,
    /// `PATH` of each (host, image) seen to exist.
    images: Mutex<HashMap<(usize, String), ImagePath>>,
    /// Removals of the containers of dropped placements, still going.
    cleanups: tokio_util::task::TaskTracker,
    /// Placements made ahead ([`Runner::warm`]), until taken or cooled.
    warm: Mutex<HashMap<warm::WarmKey, warm::WarmEntry>>,
    /// As the swarm runner: the protocol server its jobs reach ([`swarm`]).
    swarm: Option<Arc<swarm::Protocol>>,
}

impl DockerRunner {
    /// Connects to the engines of `config` (its `hosts`, else `DOCKER_HOST` from `env`,
    /// else the local socket). Engines that cannot be reached are left out with a
    /// warning; none at all is an error naming each failure.
    pub async fn connect(
        config: &DockerConfig,
        env: &BTreeMap<String, String>,
    ) -> Result<DockerRunner, DockerError> {
        let wanted = hosts::configured_hosts(config, env);
        let connects = wanted.iter().map(|h| Host::connect(h, config));
        let results = futures_util::future::join_all(connects).await;
        let mut hosts = Vec::new();
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok(h) => hosts.push(Arc::new(h)),
                Err(e) => failures.push(e.to_string()),
            }
        }
        // With no engine at all the error names every failure: the caller says it once.
        if hosts.is_empty() {
            return Err(DockerError::NoEngine(failures.join("; ")));
        }
        for e in &failures {
            tracing::warn!(error = %e, "docker engine left out");
        }
        Ok(DockerRunner {
            config: Arc::new(config.clone()),
            hosts,
            images: Mutex::new(HashMap::new()),
            cleanups: closed_tracker(),
            warm: Mutex::new(HashMap::new()),
            swarm: None,
        })
    }

    /// The swarm runner: one manager (the first engine of `config`, else `DOCKER_HOST`,
    /// else the local socket), each run a swarm job (see the `swarm` module).
    pub async fn connect_swarm(
        config: &DockerConfig,
        env: &BTreeMap<String, String>,
    ) -> Result<DockerRunner, DockerError> {
        let wanted = hosts::configured_hosts(config, env);
        let first = wanted
            .first()
            .ok_or_else(|| DockerError::NoEngine("no engine is configured".into()))?;
        let mut host = Host::connect(first, config).await?;
        let manager = swarm::check_manager(&host.docker, &host.name, &first.url).await?;
        // Jobs on any node reach aicli at the manager's swarm address (the one the other
        // nodes join), unless the config names one; a swarm advertised on loopback has
        // one node, whose containers reach aicli as a local engine's do.
        if let Some(addr) = manager.addr
            && !host.remote
            && first.mcp_address.is_none()
            && first.mcp_bind.is_none()
        {
            host.reach = crate::runner::AgentReach {
                url_host: hosts::HOST_ALIAS.to_owned(),
                bind: addr,
                restrict_to_peer: false,
            };
            host.alias_target = addr.to_string();
        }
        // The pool's parallelism is what the swarm's nodes can run (a configured
        // max_containers is the user's word).
        if first.max_containers.is_none() {
            let nodes = swarm::nodes::usable(&host.docker).await?;
            host.capacity = swarm::nodes::capacity(&nodes, config);
            host.slots = Arc::new(tokio::sync::Semaphore::new(host.capacity));
            tracing::info!(nodes = nodes.len(), capacity = host.capacity, mcp = %host.reach.bind, "swarm connected");
        }
        // The other engines of the config are the other nodes' (their jobs' containers
        // are removed there; `aicli image build --swarm` loads images into them).
        let others = futures_util::future::join_all(
            wanted.iter().skip(1).map(|h| Host::connect(h, config)),
        )
        .await;
        let mut nodes = Vec::new();
        for (cfg, h) in wanted.iter().skip(1).zip(others) {
            match h {
                Ok(h) => nodes.push(h.docker),
                Err(e) => tracing::warn!(host = %cfg.name, error = %e, "a swarm node's engine left out: its jobs' containers stay there after they end"),
            }
        }
        let proto = swarm::Protocol::start(&host, nodes).await?;
        Ok(DockerRunner {
            config: Arc::new(config.clone()),
            hosts: vec![Arc::new(host)],
            images: Mutex::new(HashMap::new()),
            cleanups: closed_tracker(),
            warm: Mutex::new(HashMap::new()),
            swarm: Some(Arc::new(proto)),
        })
    }

    /// The connected engines.
    pub fn hosts(&self) -> &[Arc<Host>] {
        &self.hosts
    }

    /// The image `provider` runs in ([`DockerConfig::image_for`]).
    pub fn image_for(config: &DockerConfig, provider: &SharedProvider) -> String {
        config.image_for(provider.name(), provider.config())
    }

    /// `PATH` of `image` on host `idx`, checking that it is there.
    async fn image_path(
        &self,
        idx: usize,
        image: &str,
        provider: &str,
    ) -> Result<String, DockerError> {
        let key = (idx, image.to_owned());
        // One inspect per engine and image, however many runs ask at once (a batch's
        // first places, its containers made ahead): the others wait for its answer.
        let cell = self
            .images
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .clone();
        let host = &self.hosts[idx];
        cell.get_or_try_init(|| async {
            let inspect = host.docker.inspect_image(image).await.map_err(|e| match e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => DockerError::MissingImage(format!(
                    "image {image} is not on docker host '{}'; build it with `aicli image build {provider}`{} (or name another in engine.docker.images.{provider})",
                    host.name,
                    if self.hosts.len() > 1 { format!(" --host {}", host.name) } else { String::new() },
                )),
                other => DockerError::Api {
                    what: format!("inspecting image {image} on {}", host.name),
                    message: other.to_string(),
                },
            })?;
            Ok(image::path_in(&inspect))
        })
        .await
        .cloned()
    }
    /// The placement of the run `req` on engine `idx`, holding `permit` there (none while
    /// it is made ahead): its image checked, its home and private directory made, its
    /// labels and egress plan.
    async fn spec_for(
        &self,
        req: &PlaceRequest<'_>,
        idx: usize,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
        mut steps: crate::runner::Steps,
    ) -> Result<placement::PlacementSpec, RunnerError> {
        let image = Self::image_for(&self.config, req.provider);
        let host = self.hosts[idx].clone();
        let (resources, constraints) = self
            .placing(req)
            .map_err(|e| e.into_error_of(self.kind()))?;
        let image_path = steps
            .time(
                "image inspect",
                self.image_path(idx, &image, req.provider.name()),
            )
            .await
            .map_err(|e| e.into_error_of(self.kind()))?;
        let prepared = std::time::Instant::now();
        let user = container_user(
            self.config.user.as_deref(),
            host.remote || self.swarm.is_some(),
            req.workspace,
        )
            .map_err(|e| e.into_error_of(self.kind()))?;
        let work = |e: std::io::Error, what: &str, p: &Path| {
            DockerError::Work(format!("cannot prepare {what} {}: {e}", p.display()))
                .into_error_of(self.kind())
        };
        if let Some(origin) = req.session_home {
            // The CLI's session lives in the home of the task that made it.
            seed_home(req.task_home, origin)
                .map_err(|e| work(e, "the session's home copied into", req.task_home))?;
        }
        create_private_dir(req.task_home).map_err(|e| work(e, "the task's home", req.task_home))?;
        create_private_dir(req.private_dir)
            .map_err(|e| work(e, "the run's private directory", req.private_dir))?;
        if let Some(user_home) = req.inherited_env.get("HOME").map(PathBuf::from) {
            let mut files: Vec<String> =
                COMMON_HOME_FILES.iter().map(|s| (*s).to_owned()).collect();
            files.extend(req.provider.config().container_home_files.iter().cloned());
            copy_home_files(&user_home, req.task_home, &files)
                .map_err(|e| work(e, "the login copies in", req.task_home))?;
        }
        steps.push("home and private directory", prepared);
        let labels = labels::Labelled {
            batch_id: req.batch_id.to_owned(),
            task_id: req.task_id.to_owned(),
            attempt: req.attempt,
            provider: req.provider.name().to_owned(),
            owner: labels::this_owner(),
            workspace: Some(req.workspace.to_path_buf()),
            home: Some(req.task_home.to_path_buf()),
            branch: req.branch.map(str::to_owned),
            remote: host.remote,
            base: None,
        };
        let scratch = req
            .private_dir
            .with_file_name(format!("{}-{}-transfer", req.task_id, req.attempt));
        let egress = host
            .gateway
            .filter(|_| self.config.egress.enabled && self.swarm.is_none())
            .map(|gateway| egress::Plan {
                patterns: req
                    .provider
                    .config()
                    .egress_hosts
                    .iter()
                    .chain(&self.config.egress.allow)
                    .cloned()
                    .collect(),
                aliases: vec![(hosts::HOST_ALIAS.to_owned(), gateway)],
                config_texts: req
                    .inherited_env
                    .get("HOME")
                    .map(|h| {
                        egress::config_texts(
                            Path::new(h),
                            &req.provider.config().container_home_files,
                        )
                    })
                    .unwrap_or_default(),
            });
        tracing::info!(task = %req.task_id, host = %host.name, %image, user = ?user, egress = egress.is_some(), ahead = permit.is_none(), "placed in a container");
        Ok(placement::PlacementSpec {
            host,
            permit,
            image,
            image_path,
            binary_name: req.provider.binary_name().to_owned(),
            user,
            limits: self.config.clone(),
            resources,
            constraints,
            workspace: req.workspace.to_path_buf(),
            private_dir: req.private_dir.to_path_buf(),
            task_home: req.task_home.to_path_buf(),
            labels,
            scratch,
            cleanups: self.cleanups.clone(),
            steps,
            egress,
            agent_port: req.agent_port,
            swarm: self.swarm.clone(),
        })
    }

}

impl DockerRunner {
    /// What its errors and placements name it: `swarm` or `docker`.
    fn kind(&self) -> &'static str {
        if self.swarm.is_some() { "swarm" } else { NAME }
    }

    /// A run's resources (the task's over `engine.docker`'s) and, for a swarm job, its
    /// placement constraints (the provider's, then the task's); a task's constraints
    /// with a runner that cannot place by them are refused.
    fn placing(
        &self,
        req: &PlaceRequest<'_>,
    ) -> Result<(aicli_providers::Resources, Vec<String>), DockerError> {
        let resources = aicli_providers::Resources::of(&self.config, req.resources);
        resources.check().map_err(|(field, m)| {
            DockerError::BadRequest(format!(
                "task {}: resources.{field} (over engine.docker's): {m}",
                req.task_id
            ))
        })?;
        if self.swarm.is_none() {
            if !req.constraints.is_empty() {
                return Err(DockerError::BadRequest(format!(
                    "task {} has placement constraints ({}), which only the swarm runner places by: run it with --runner swarm, or drop them",
                    req.task_id,
                    req.constraints.join(", ")
                )));
            }
            return Ok((resources, Vec::new()));
        }
        let constraints = self
            .config
            .constraints
            .get(req.provider.name())
            .into_iter()
            .flatten()
            .chain(req.constraints)
            .cloned()
            .collect();
        Ok((resources, constraints))
    }
}

/// Whether a config sends any task to containers by default (engine or provider runner,
/// or engines configured).
pub fn config_uses_docker(config: &aicli_providers::AiCliConfig) -> bool {
    use aicli_providers::RunnerKind;
    config.engine.runner.is_container()
        || config
            .providers
            .values()
            .any(|p| p.runner.is_some_and(RunnerKind::is_container))
        || !config.engine.docker.hosts.is_empty()
}

/// The `Host` names containers reach aicli's MCP server under: `host.docker.internal`
/// and each engine's `mcp_address`.
pub fn container_hosts(config: &DockerConfig) -> Vec<String> {
    let mut v = vec![hosts::HOST_ALIAS.to_owned()];
    v.extend(config.hosts.iter().filter_map(|h| h.mcp_address.clone()));
    v.sort();
    v.dedup();
    v
}

/// A tracker that is closed from the start: tasks can still be spawned on it, and its
/// `wait` ends whenever none is left (it is never reopened).
fn closed_tracker() -> tokio_util::task::TaskTracker {
    let t = tokio_util::task::TaskTracker::new();
    t.close();
    t
}

#[async_trait]
impl Runner for DockerRunner {
    fn name(&self) -> &str {
        if self.swarm.is_some() { SWARM } else { NAME }
    }

    async fn settle(&self) {
        self.cleanups.wait().await;
    }

    async fn place(&self, req: &PlaceRequest<'_>) -> Result<Box<dyn Placement>, RunnerError> {
        if let Some(p) = self.take_warm(req).await {
            return Ok(Box::new(p));
        }
        let mut steps = crate::runner::Steps::default();
        let (idx, permit) = steps
            .time("wait for an engine", hosts::acquire(&self.hosts))
            .await
            .ok_or_else(|| {
                DockerError::NoEngine("no engine is connected".into()).into_runner_error()
            })?;
        let spec = self.spec_for(req, idx, Some(permit), steps).await?;
        Ok(Box::new(placement::DockerPlacement::new(spec)))
    }

    async fn warm(&self, req: &PlaceRequest<'_>) {
        // A swarm job is made at its start (its node is the swarm's choice).
        if self.swarm.is_none() {
            self.make_ahead(req).await;
        }
    }

    async fn cool(&self, batch_id: &str) {
        self.remove_ahead(batch_id).await;
    }

    async fn remove_leftovers(&self, batch_id: &str, task_id: &str) -> Vec<String> {
        if self.swarm.is_some() {
            let mut lines = Vec::new();
            let nodes = self.swarm.as_ref().map(|p| p.nodes()).unwrap_or_default();
            for h in &self.hosts {
                lines.extend(
                    swarm::remove_leftovers(h, nodes, Some((batch_id, task_id)), false).await,
                );
            }
            return lines;
        }
        leftovers::remove(&self.hosts, Some((batch_id, task_id)), false).await
    }
}

/// The `uid:gid` a container's CLI runs as: `engine.docker.user`, else the image's user
/// on a remote engine, else the worktree's owner. Never root: a root-owned worktree (aicli
/// run as root) gets the image's user, working there through uid-mapped mounts (see
/// [`idmap`]); a configured root is refused.
fn container_user(
    configured: Option<&str>,
    remote: bool,
    workspace: &Path,
) -> Result<(u32, u32), DockerError> {
    let image_user = (image::USER_ID, image::USER_ID);
    let user = match configured {
        // A name (the config allows one) is not looked up: the image's user.
        Some(u) => paths::parse_user(u).unwrap_or(image_user),
        None if remote => image_user,
        None => paths::owner_of(workspace).unwrap_or(image_user),
    };
    match (user, configured) {
        ((0, _), Some(u)) => Err(DockerError::Work(format!(
            "engine.docker.user '{u}' is root: containers never run their CLI as root"
        ))),
        ((0, _), None) => Ok(image_user),
        _ => Ok(user),
    }
}

/// `chown -R` of a directory this process made.
pub(crate) fn chown_tree(dir: &Path, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for e in std::fs::read_dir(dir)?.flatten() {
            chown_tree(&e.path(), (uid, gid))?;
        }
    }
    Ok(())
}
