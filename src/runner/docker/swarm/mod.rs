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
//!    and stderr back as they come, and when the CLI exits (or the service is removed:
//!    SIGTERM) posts the work as a git bundle, the task's home and the exit status.
//!    aicli fetches the bundle into the task's branch as for a remote engine.
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

use base64::Engine as _;
use bollard::Docker;
use bollard::models::{
    ConfigSpec, Mount, MountTmpfsOptions, MountType, ResourceObject, SecretSpec, ServiceSpec,
    ServiceSpecMode, ServiceSpecModeReplicatedJob, TaskSpec, TaskSpecContainerSpec,
    TaskSpecContainerSpecConfigs, TaskSpecContainerSpecFile, TaskSpecContainerSpecFile1,
    TaskSpecContainerSpecSecrets, TaskSpecResources, TaskSpecRestartPolicy,
    TaskSpecRestartPolicyConditionEnum, TaskState,
};
use tokio_util::sync::CancellationToken;

use super::DockerError;
use super::hosts::{HOST_ALIAS, Host};
use crate::http::listener::{ConnLimits, ConnStats};
use crate::util::lock;

pub mod handle;
pub mod serve;
pub mod up;

pub use serve::{Ended, Slot};

/// The runner the job runs (see the module docs).
pub const RUNNER_JS: &str = include_str!("runner.js");
/// Where the runner is in the job's container.
const RUNNER_PATH: &str = "/aicli-swarm/runner.js";
/// Label on a swarm job's container (not [`super::labels::MANAGED`]: the container is
/// Swarm's to remove, with its service).
pub const JOB_LABEL: &str = "dev.aicli.swarm-job";
/// How often a job's state is asked (one request per running job: the runner's own
/// exit comes over the protocol, this only notices a job that ended without it).
const POLL: Duration = Duration::from_secs(1);
/// How long a runner has to post its exit after its job ended, before the run counts as
/// lost.
const EXIT_GRACE: Duration = Duration::from_secs(3);
/// How long a job's runner has to stop the CLI, pack and post the work once its service
/// is removed (then SIGKILL).
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
    _stop: tokio_util::sync::DropGuard,
}

impl Protocol {
    /// Starts the server on the address `host`'s containers reach aicli at.
    pub async fn start(host: &Host) -> Result<Protocol, DockerError> {
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

    /// Attempt `key`'s base URL.
    pub fn url_of(&self, key: &str) -> String {
        format!("{}/{key}", self.url)
    }
}

/// Checks that `docker` is a swarm manager.
pub async fn check_manager(docker: &Docker, name: &str) -> Result<(), DockerError> {
    let info = docker.info().await.map_err(|e| DockerError::Api {
        what: format!("asking docker host '{name}' about its swarm"),
        message: e.to_string(),
    })?;
    let swarm = info.swarm.unwrap_or_default();
    let state = swarm
        .local_node_state
        .map(|s| s.to_string())
        .unwrap_or_default();
    if state != "active" || swarm.control_available != Some(true) {
        return Err(DockerError::Connect {
            host: name.to_owned(),
            url: String::new(),
            message: format!(
                "the swarm runner needs a swarm manager, and this engine's swarm state is '{}'{}: run `docker swarm init` there (or point engine.docker.hosts at a manager)",
                if state.is_empty() { "unknown" } else { &state },
                if state == "active" { " as a worker" } else { "" }
            ),
        });
    }
    Ok(())
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

/// What a job needs besides its orders.
#[derive(Debug)]
pub struct JobSpec<'a> {
    /// The attempt's key: the service's name and its objects'.
    pub key: &'a str,
    /// The image.
    pub image: &'a str,
    /// `uid:gid`.
    pub user: (u32, u32),
    /// Labels of the service, its secret and its config.
    pub labels: HashMap<String, String>,
    /// Limits.
    pub limits: &'a aicli_providers::DockerConfig,
    /// How long the runner may take to stop the CLI and post its work after SIGTERM.
    pub stop_grace: Duration,
}

/// A job made on the swarm: its service, secret and config (removed by [`Job::remove`]).
#[derive(Debug, Clone)]
pub struct Job {
    /// The manager's client.
    pub docker: Docker,
    /// The engine's name.
    pub host: String,
    /// The attempt's key (the service's name).
    pub key: String,
    /// The service's id, once made.
    pub service: Option<String>,
    /// The secret's id, once made.
    pub secret: Option<String>,
    /// The config's id, once made.
    pub config: Option<String>,
}

fn api(what: String) -> impl FnOnce(bollard::errors::Error) -> DockerError {
    move |e| DockerError::Api {
        what,
        message: e.to_string(),
    }
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

impl Job {
    /// A job of attempt `key` on `host`'s engine, nothing made yet.
    pub fn new(docker: &Docker, host: &str, key: String) -> Job {
        Job {
            docker: docker.clone(),
            host: host.to_owned(),
            key,
            service: None,
            secret: None,
            config: None,
        }
    }

    /// Makes the secret (`orders`), the config (the runner) and the service of `spec` on
    /// `docker`. Whatever was made is in the job, for [`Job::remove`], also on error.
    pub async fn create(
        &mut self,
        spec: &JobSpec<'_>,
        orders: &[u8],
        hosts_entry: Option<&str>,
    ) -> Result<(), DockerError> {
        let secret_name = format!("{}-orders", spec.key);
        let config_name = format!("{}-runner", spec.key);
        let secret = self
            .docker
            .create_secret(SecretSpec {
                name: Some(secret_name.clone()),
                labels: Some(spec.labels.clone()),
                data: Some(b64(orders)),
                ..SecretSpec::default()
            })
            .await
            .map_err(api(format!("creating secret {secret_name} on {}", self.host)))?;
        self.secret = Some(secret.id);
        let config = self
            .docker
            .create_config(ConfigSpec {
                name: Some(config_name.clone()),
                labels: Some(spec.labels.clone()),
                data: Some(b64(RUNNER_JS.as_bytes())),
                ..ConfigSpec::default()
            })
            .await
            .map_err(api(format!("creating config {config_name} on {}", self.host)))?;
        self.config = Some(config.id);
        let service = self
            .docker
            .create_service(self.service_spec(spec, &secret_name, &config_name, hosts_entry), None)
            .await
            .map_err(api(format!("creating service {} on {}", spec.key, self.host)))?;
        self.service = service.id;
        Ok(())
    }

    fn service_spec(
        &self,
        spec: &JobSpec<'_>,
        secret_name: &str,
        config_name: &str,
        hosts_entry: Option<&str>,
    ) -> ServiceSpec {
        let (uid, gid) = (spec.user.0.to_string(), spec.user.1.to_string());
        let l = spec.limits;
        let mut limits = bollard::models::Limit::default();
        if l.memory_mb > 0 {
            limits.memory_bytes = Some((l.memory_mb * 1024 * 1024) as i64);
        }
        if l.cpus > 0.0 {
            limits.nano_cpus = Some((l.cpus * 1e9) as i64);
        }
        if l.pids_limit > 0 {
            limits.pids = Some(l.pids_limit);
        }
        let tmpfs = |target: &str, mode: i64| Mount {
            target: Some(target.to_owned()),
            typ: Some(MountType::TMPFS),
            tmpfs_options: Some(MountTmpfsOptions {
                mode: Some(mode),
                ..MountTmpfsOptions::default()
            }),
            ..Mount::default()
        };
        let container = TaskSpecContainerSpec {
            image: Some(spec.image.to_owned()),
            labels: Some(HashMap::from([(JOB_LABEL.to_owned(), spec.key.to_owned())])),
            command: Some(vec![
                "node".to_owned(),
                RUNNER_PATH.to_owned(),
                format!("/run/secrets/{secret_name}"),
            ]),
            user: Some(format!("{uid}:{gid}")),
            dir: Some("/".to_owned()),
            init: Some(true),
            hosts: hosts_entry.map(|h| vec![h.to_owned()]),
            capability_drop: Some(vec!["ALL".to_owned()]),
            stop_grace_period: Some(spec.stop_grace.as_nanos() as i64),
            // The packing wrapper's directory (the image's root is not the user's).
            mounts: Some(vec![tmpfs("/aicli-runner", 0o1777)]),
            secrets: Some(vec![TaskSpecContainerSpecSecrets {
                file: Some(TaskSpecContainerSpecFile {
                    name: Some(secret_name.to_owned()),
                    uid: Some(uid.clone()),
                    gid: Some(gid.clone()),
                    mode: Some(0o400),
                }),
                secret_id: self.secret.clone(),
                secret_name: Some(secret_name.to_owned()),
            }]),
            configs: Some(vec![TaskSpecContainerSpecConfigs {
                file: Some(TaskSpecContainerSpecFile1 {
                    name: Some(RUNNER_PATH.to_owned()),
                    uid: Some(uid),
                    gid: Some(gid),
                    mode: Some(0o444),
                }),
                config_id: self.config.clone(),
                config_name: Some(config_name.to_owned()),
                ..TaskSpecContainerSpecConfigs::default()
            }]),
            ..TaskSpecContainerSpec::default()
        };
        ServiceSpec {
            name: Some(spec.key.to_owned()),
            labels: Some(spec.labels.clone()),
            task_template: Some(TaskSpec {
                container_spec: Some(container),
                restart_policy: Some(TaskSpecRestartPolicy {
                    condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                    max_attempts: Some(0),
                    ..TaskSpecRestartPolicy::default()
                }),
                resources: Some(TaskSpecResources {
                    limits: Some(limits),
                    reservations: Some(ResourceObject::default()),
                    ..TaskSpecResources::default()
                }),
                ..TaskSpec::default()
            }),
            mode: Some(ServiceSpecMode {
                replicated_job: Some(ServiceSpecModeReplicatedJob {
                    max_concurrent: Some(1),
                    total_completions: Some(1),
                }),
                ..ServiceSpecMode::default()
            }),
            ..ServiceSpec::default()
        }
    }

    /// Removes the service (its container gets SIGTERM, then SIGKILL after the stop
    /// grace), leaving the secret and config.
    pub async fn stop(&mut self) -> Result<(), DockerError> {
        if let Some(id) = self.service.take() {
            match self.docker.delete_service(&id).await {
                Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
                Err(e) => {
                    self.service = Some(id.clone());
                    return Err(api(format!("removing service {} on {}", self.key, self.host))(e));
                }
            }
        }
        Ok(())
    }

    /// Removes the service, its container, the secret and the config (a secret still
    /// used by a service that is going away is asked again for a while).
    pub async fn remove(&mut self) -> Result<(), DockerError> {
        self.stop().await?;
        remove_job_containers(&self.docker, Some(&self.key)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while let Some(id) = self.secret.clone() {
            match self.docker.delete_secret(&id).await {
                Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                    self.secret = None;
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(api(format!("removing the secret of {} on {}", self.key, self.host))(e));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        while let Some(id) = self.config.clone() {
            match self.docker.delete_config(&id).await {
                Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                    self.config = None;
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(api(format!("removing the config of {} on {}", self.key, self.host))(e));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(())
    }
}

/// Removes the containers of swarm jobs on `docker`: those of job `key`, or, without it,
/// those whose service is gone. Swarm (20.10) leaves a finished job's container behind
/// when its service is removed. Returns how many were removed.
async fn remove_job_containers(docker: &Docker, key: Option<&str>) -> usize {
    let label = match key {
        Some(k) => format!("{JOB_LABEL}={k}"),
        None => JOB_LABEL.to_owned(),
    };
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label", vec![label.as_str()])]))
        .build();
    let Ok(found) = docker.list_containers(Some(opts)).await else {
        return 0;
    };
    let services: Vec<String> = if key.is_none() {
        docker
            .list_services(None::<bollard::query_parameters::ListServicesOptions>)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| s.spec.and_then(|s| s.name))
            .collect()
    } else {
        Vec::new()
    };
    let mut n = 0;
    for c in found {
        let job = c.labels.as_ref().and_then(|l| l.get(JOB_LABEL)).cloned().unwrap_or_default();
        if key.is_none() && services.contains(&job) {
            continue;
        }
        let Some(id) = c.id else { continue };
        let removed = docker
            .remove_container(
                &id,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    v: true,
                    link: false,
                }),
            )
            .await;
        match removed {
            Ok(()) => n += 1,
            Err(e) => tracing::debug!(container = %id, error = %e, "removing a swarm job's container"),
        }
    }
    n
}

/// Watches the job's task until it ends; a job that ends without its runner's exit (it
/// could not start, was killed, lost its node) ends `slot` as [`Ended::Lost`] with the
/// engine's words. A removed service (a cancel, a timeout, a prune) gives its runner the
/// stop grace to pack and post the work first.
pub async fn watch(docker: Docker, service: String, slot: Arc<Slot>) {
    let mut ended_at: Option<tokio::time::Instant> = None;
    let mut wait = EXIT_GRACE;
    let mut said = String::new();
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
                    if matches!(
                        state,
                        TaskState::COMPLETE
                            | TaskState::FAILED
                            | TaskState::REJECTED
                            | TaskState::SHUTDOWN
                            | TaskState::ORPHANED
                            | TaskState::REMOVE
                    ) {
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
                                .map(|m| format!(": {m}"))
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

/// One of aicli's swarm jobs, as `aicli containers` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobInfo {
    /// The engine's name.
    pub host: String,
    /// The service's name.
    pub name: String,
    /// Its task's state (`running`, `complete`, …; empty before it has one).
    pub state: String,
    /// When the service was made (Unix seconds).
    pub created: i64,
    /// What its labels say.
    pub labels: super::labels::Labelled,
    /// Whether the aicli that made it is alive.
    pub owner_alive: bool,
}

/// aicli's swarm jobs on `host` (none when it is not a swarm manager).
pub async fn list_jobs(host: &Host) -> Vec<JobInfo> {
    use super::labels::{self, Labelled};
    let filter = HashMap::from([("label", vec![labels::MANAGED])]);
    let services = host
        .docker
        .list_services(Some(
            bollard::query_parameters::ListServicesOptionsBuilder::default()
                .filters(&filter)
                .build(),
        ))
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for s in services {
        let spec = s.spec.unwrap_or_default();
        let Some(l) = spec.labels.as_ref().and_then(Labelled::read) else {
            continue;
        };
        let name = spec.name.unwrap_or_default();
        let opts = bollard::query_parameters::ListTasksOptionsBuilder::default()
            .filters(&HashMap::from([("service", vec![name.as_str()])]))
            .build();
        let state = host
            .docker
            .list_tasks(Some(opts))
            .await
            .ok()
            .and_then(|t| t.into_iter().next())
            .and_then(|t| t.status)
            .and_then(|s| s.state)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let created = s
            .created_at
            .and_then(|c| c.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
            .unwrap_or(0);
        out.push(JobInfo {
            host: host.name.clone(),
            name,
            state,
            created,
            owner_alive: labels::owner_alive(&l.owner),
            labels: l,
        });
    }
    out
}

/// Removes the swarm objects (services, secrets, configs) aicli made for `only` (a
/// batch's task), or, without it, those whose aicli is gone (every one with `all`).
/// Returns a line per service removed.
pub async fn remove_leftovers(host: &Host, only: Option<(&str, &str)>, all: bool) -> Vec<String> {
    use super::labels;
    let docker = &host.docker;
    let mut filters = vec![format!("{}=1", labels::MANAGED)];
    if let Some((b, t)) = only {
        filters.push(format!("{}={b}", labels::BATCH));
        filters.push(format!("{}={t}", labels::TASK));
    }
    let filter = HashMap::from([("label", filters.iter().map(String::as_str).collect::<Vec<_>>())]);
    let wanted = |l: &Option<HashMap<String, String>>| {
        let owner = l.as_ref().and_then(|l| l.get(labels::OWNER)).cloned().unwrap_or_default();
        only.is_some() || all || !labels::owner_alive(&owner)
    };
    let mut lines = Vec::new();
    let services = docker
        .list_services(Some(
            bollard::query_parameters::ListServicesOptionsBuilder::default()
                .filters(&filter)
                .build(),
        ))
        .await
        .unwrap_or_default();
    for s in services {
        let spec = s.spec.unwrap_or_default();
        if !wanted(&spec.labels) {
            continue;
        }
        let name = spec.name.unwrap_or_default();
        let Some(id) = s.id else { continue };
        match docker.delete_service(&id).await {
            Ok(()) => lines.push(format!("removed swarm service {name} on {}", host.name)),
            Err(e) => lines.push(format!("could not remove swarm service {name} on {}: {e}", host.name)),
        }
    }
    let swept = remove_job_containers(docker, None).await;
    if swept > 0 {
        lines.push(format!(
            "removed {swept} container(s) of swarm jobs whose service is gone on {}",
            host.name
        ));
    }
    // The secrets and configs, each removed as a job of that one object.
    let secret_filter = bollard::query_parameters::ListSecretsOptionsBuilder::default()
        .filters(&filter)
        .build();
    let config_filter = bollard::query_parameters::ListConfigsOptionsBuilder::default()
        .filters(&filter)
        .build();
    let mut objects = Vec::new();
    for s in docker.list_secrets(Some(secret_filter)).await.unwrap_or_default() {
        let spec = s.spec.unwrap_or_default();
        let mut job = Job::new(docker, &host.name, spec.name.unwrap_or_default());
        job.secret = s.id;
        objects.push((job, spec.labels));
    }
    for c in docker.list_configs(Some(config_filter)).await.unwrap_or_default() {
        let spec = c.spec.unwrap_or_default();
        let mut job = Job::new(docker, &host.name, spec.name.unwrap_or_default());
        job.config = c.id;
        objects.push((job, spec.labels));
    }
    for (mut job, l) in objects {
        if wanted(&l)
            && let Err(e) = job.remove().await
        {
            lines.push(e.to_string());
        }
    }
    lines
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
    let mut archive = tar::Archive::new(f);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    archive.unpack(&into).map_err(|e| {
        DockerError::Work(format!("cannot unpack the task's home the job sent back: {e}"))
    })?;
    super::remote::replace_home(&into.join("aicli"), home, dir)
}
