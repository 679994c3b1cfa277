//! A swarm job on the engine: its secret (the orders), its config (the runner), its
//! service, and their removal with the job's container.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use bollard::Docker;
use bollard::models::{
    ConfigSpec, Mount, MountTmpfsOptions, MountType, ResourceObject, SecretSpec, ServiceSpec,
    ServiceSpecMode, ServiceSpecModeReplicatedJob, TaskSpec, TaskSpecContainerSpec,
    TaskSpecContainerSpecConfigs, TaskSpecContainerSpecFile, TaskSpecContainerSpecFile1,
    TaskSpecContainerSpecSecrets, TaskSpecPlacement, TaskSpecResources, TaskSpecRestartPolicy,
    TaskSpecRestartPolicyConditionEnum,
};

use super::super::DockerError;
use super::super::handle::{Container, remove_container};
use super::{JOB_LABEL, RUNNER_JS, RUNNER_PATH};

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
    /// Limits (`pids_limit`).
    pub limits: &'a aicli_providers::DockerConfig,
    /// CPU and memory limits and reservations.
    pub resources: aicli_providers::Resources,
    /// Placement constraints.
    pub constraints: &'a [String],
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
    /// The other nodes' engines aicli knows (its container is removed wherever it ran).
    pub nodes: Vec<Docker>,
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
            nodes: Vec::new(),
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
        let (l, r) = (spec.limits, &spec.resources);
        let mib = |mb: u64| (mb > 0).then_some((mb * 1024 * 1024) as i64);
        let nano = |cpus: f64| (cpus > 0.0).then_some((cpus * 1e9) as i64);
        let limits = bollard::models::Limit {
            memory_bytes: mib(r.memory_mb),
            nano_cpus: nano(r.cpus),
            pids: (l.pids_limit > 0).then_some(l.pids_limit),
        };
        let reservations = ResourceObject {
            memory_bytes: mib(r.reserve_memory_mb),
            nano_cpus: nano(r.reserve_cpus),
            ..ResourceObject::default()
        };
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
                    reservations: Some(reservations),
                    ..TaskSpecResources::default()
                }),
                placement: (!spec.constraints.is_empty()).then(|| TaskSpecPlacement {
                    constraints: Some(spec.constraints.to_vec()),
                    ..TaskSpecPlacement::default()
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

    /// Removes the service, leaving the secret and config. Swarm 20.10 does not stop a
    /// removed job's container (measured: see `docs/swarm.md`): the runner is stopped over
    /// the protocol first, and [`Job::remove`] removes the container.
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
        let engines: Vec<Docker> = std::iter::once(self.docker.clone())
            .chain(self.nodes.iter().cloned())
            .collect();
        remove_job_containers(&engines, &self.docker, Some(&self.key)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        if let Some(id) = self.secret.clone() {
            self.delete_until(deadline, "secret", &id).await?;
            self.secret = None;
        }
        if let Some(id) = self.config.clone() {
            self.delete_until(deadline, "config", &id).await?;
            self.config = None;
        }
        Ok(())
    }

    /// Deletes the job's `kind` (`secret` or `config`) `id`, asked again until
    /// `deadline` while the engine still holds it (in use by a service going away);
    /// one that is gone already counts as deleted.
    async fn delete_until(
        &self,
        deadline: tokio::time::Instant,
        kind: &str,
        id: &str,
    ) -> Result<(), DockerError> {
        loop {
            let deleted = match kind {
                "secret" => self.docker.delete_secret(id).await,
                _ => self.docker.delete_config(id).await,
            };
            match deleted {
                Ok(())
                | Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(api(format!(
                        "removing the {kind} of {} on {}",
                        self.key, self.host
                    ))(e));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Removes the containers of swarm jobs on `engines` (the manager's and the other nodes'
/// engines aicli knows): those of job `key`, or, without it, those whose service is gone
/// from `manager`. Swarm (20.10) leaves a finished job's container behind when its
/// service is removed. Returns how many were removed.
pub(super) async fn remove_job_containers(
    engines: &[Docker],
    manager: &Docker,
    key: Option<&str>,
) -> usize {
    let label = match key {
        Some(k) => format!("{JOB_LABEL}={k}"),
        None => JOB_LABEL.to_owned(),
    };
    let services: Vec<String> = if key.is_none() {
        // Without the manager's list, no container can be told to be a leftover.
        let Ok(list) = manager
            .list_services(None::<bollard::query_parameters::ListServicesOptions>)
            .await
        else {
            return 0;
        };
        list.into_iter()
            .filter_map(|s| s.spec.and_then(|s| s.name))
            .collect()
    } else {
        Vec::new()
    };
    let opts = bollard::query_parameters::ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label", vec![label.as_str()])]))
        .build();
    let mut n = 0;
    for docker in engines {
        let Ok(found) = docker.list_containers(Some(opts.clone())).await else {
            continue;
        };
        for c in found {
            let job = c.labels.as_ref().and_then(|l| l.get(JOB_LABEL)).cloned().unwrap_or_default();
            if key.is_none() && services.contains(&job) {
                continue;
            }
            let Some(id) = c.id else { continue };
            let container = Container {
                docker: docker.clone(),
                id,
                host: String::new(),
            };
            match remove_container(&container).await {
                Ok(()) => n += 1,
                Err(e) => tracing::debug!(error = %e, "removing a swarm job's container"),
            }
        }
    }
    n
}
