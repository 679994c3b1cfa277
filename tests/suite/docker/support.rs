//! The Docker tests' harness: is an engine there (else the tests say why and skip),
//! configs and engines over the real engine, and checks that no container of a test is
//! left. The images and the local host entry are `crate::support::docker`'s (the Docker
//! bench builds the same).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Duration;

use aicli::providers::{AiCliConfig, DockerHostConfig, RunnerKind, SharedProvider, TaskSpec};
use aicli::runner::docker::labels;
use aicli::{BatchOptions, BatchResult, Engine};
use bollard::Docker;
use tokio_util::sync::CancellationToken;

use crate::suite::support::{collect_events, engine_with, replay_provider, test_config};
use crate::support::fake::replay_args;

pub use crate::support::docker::{
    FIXTURES_IN_IMAGE, adapter_fake, bridge_gateway, fake_cli_image, load_image, local_host,
    provider_image, runtime_image,
};

/// Set (to anything) where Docker must be there: the tests fail instead of skipping.
pub const REQUIRE_ENV: &str = "AICLI_REQUIRE_DOCKER";

/// The local engine, or `None` after printing why the calling test is skipped.
pub async fn local_engine(test: &str) -> Option<Docker> {
    let why = match Docker::connect_with_unix(
        "/var/run/docker.sock",
        120,
        bollard::API_DEFAULT_VERSION,
    ) {
        Ok(d) => match d.negotiate_version().await {
            Ok(d) => match d.ping().await {
                Ok(_) => return Some(d),
                Err(e) => format!("the engine does not answer: {e}"),
            },
            Err(e) => format!("the engine does not answer: {e}"),
        },
        Err(e) => format!("cannot connect: {e}"),
    };
    if std::env::var_os(REQUIRE_ENV).is_some() {
        panic!("{test}: Docker is required ({REQUIRE_ENV} is set) but unavailable: {why}");
    }
    eprintln!(
        "skipped {test}: no Docker engine on unix:///var/run/docker.sock ({why}); run .ci/docker-engine.sh"
    );
    None
}

/// A config whose tasks run in containers on `hosts`, the provider `fake` in `image`.
pub fn docker_config(hosts: Vec<DockerHostConfig>, image: &str) -> AiCliConfig {
    let mut c = test_config();
    c.engine.runner = RunnerKind::Docker;
    c.engine.docker.hosts = hosts;
    c.engine.docker.images.insert("fake".into(), image.into());
    c.engine.docker.memory_mb = 512;
    c.engine.docker.cpus = 1.0;
    c
}

/// The `fake` provider: the fake CLI in its image, replaying fixture `scenario` of
/// `adapter`, parsed by that adapter.
pub fn fake_provider(adapter: &str, scenario: &str) -> SharedProvider {
    let fixture = Path::new(FIXTURES_IN_IMAGE).join(adapter).join(scenario);
    Arc::new(replay_provider("fake", adapter, Some(&fixture)))
}

/// Writes a config file in `dir` whose default provider `fake` runs the fake CLI of
/// `image` through the Claude adapter, replaying Claude's `text` transcript, in
/// containers on `hosts`. Returns its path, for `aicli --config`.
pub fn image_fake_config(dir: &Path, image: &str, hosts: &[DockerHostConfig]) -> PathBuf {
    let fixture = Path::new(FIXTURES_IN_IMAGE).join("claude/text");
    let config = serde_json::json!({
        "default_provider": "fake",
        "providers": {"fake": {
            "adapter": "claude",
            "binary_name": "aicli-fake-cli",
            "extra_args": replay_args(&fixture),
        }},
        "engine": {"kill_grace_ms": 300, "docker": {
            "hosts": hosts,
            "images": {"fake": image}
        }}
    });
    let cfg = dir.join("aicli.json");
    std::fs::write(&cfg, config.to_string()).expect("write the config");
    cfg
}

/// Runs `tasks` as one batch on `engine`, its live events collected and dropped; fails
/// when it takes longer than `within`.
pub async fn run_batch_within(
    engine: &Engine,
    tasks: Vec<TaskSpec>,
    opts: BatchOptions,
    within: Duration,
    cancel: CancellationToken,
) -> BatchResult {
    let (tx, events) = collect_events();
    let b = tokio::time::timeout(within, engine.run_batch(tasks, opts, tx, cancel))
        .await
        .expect("the batch ends")
        .expect("batch");
    let _ = events.await;
    b
}

/// The usual set-up of a test of the fake CLI in containers: the local engine (`None`
/// after saying why the test is skipped), a new repository, and an engine whose `fake`
/// provider replays Claude's `text` transcript in the fake CLI's image on it.
pub async fn fake_in_containers(test: &str) -> Option<(Docker, tempfile::TempDir, Engine)> {
    let docker = local_engine(test).await?;
    let image = fake_cli_image(&docker).await;
    let repo = crate::suite::support::git_repo();
    let engine = engine(
        docker_config(vec![local_host()], &image),
        fake_provider("claude", "text"),
    );
    Some((docker, repo, engine))
}

/// An engine over `config` and its providers only.
pub fn config_engine(config: AiCliConfig) -> Engine {
    engine_with(config, Vec::new())
}

/// An engine over `config` with the `fake` provider.
pub fn engine(config: AiCliConfig, fake: SharedProvider) -> Engine {
    engine_with(config, vec![fake])
}

/// The containers on `docker` (any state) labelled `label` (`key` or `key=value`).
pub async fn labelled(docker: &Docker, label: &str) -> Vec<bollard::models::ContainerSummary> {
    let filters = std::collections::HashMap::from([("label".to_owned(), vec![label.to_owned()])]);
    docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .expect("list containers")
}

/// aicli's containers of `batch` on `docker` (any state).
pub async fn containers_of(docker: &Docker, batch: &str) -> Vec<String> {
    labelled(docker, &format!("{}={batch}", labels::BATCH))
        .await
        .into_iter()
        .map(|c| {
            format!(
                "{} {}",
                c.names.unwrap_or_default().join(","),
                c.state.map(|s| s.to_string()).unwrap_or_default()
            )
        })
        .collect()
}

/// Fails when `file` (the agent's, in a worktree of `repo`) is not owned on this machine
/// by `repo`'s owner: the container's user is not root, but what it writes is the owner's
/// (through uid-mapped mounts when the owner is root).
pub fn assert_owned_like_repo(file: &Path, repo: &Path) {
    use std::os::unix::fs::MetadataExt;
    let want = std::fs::metadata(repo).expect("the repository");
    let got = std::fs::metadata(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(
        (got.uid(), got.gid()),
        (want.uid(), want.gid()),
        "{} is not owned like {}",
        file.display(),
        repo.display()
    );
}

/// Fails when a container of `batch` is left on `docker`.
pub async fn assert_no_container(docker: &Docker, batch: &str) {
    let left = containers_of(docker, batch).await;
    assert!(
        left.is_empty(),
        "containers of batch {batch} left: {left:?}"
    );
}

/// Fails when a container of a task of `repo` is left (any batch).
pub async fn assert_no_container_for_repo(docker: &Docker, repo: &Path) {
    let left: Vec<String> = labelled(docker, labels::MANAGED)
        .await
        .into_iter()
        .filter(|c| {
            c.labels
                .as_ref()
                .and_then(|l| l.get(labels::WORKSPACE))
                .is_some_and(|w| Path::new(w).starts_with(repo))
        })
        .map(|c| c.names.unwrap_or_default().join(","))
        .collect();
    assert!(
        left.is_empty(),
        "containers of {} left: {left:?}",
        repo.display()
    );
}

/// Where an e2e contract test runs its CLI in containers: the engines and the address
/// their containers reach this machine under (the fake model API listens there).
#[derive(Clone, Debug)]
pub struct DockerSetup {
    /// The local engine (images are built there).
    pub local: Docker,
    /// The engines of the config.
    pub hosts: Vec<DockerHostConfig>,
    /// What `host.docker.internal` names inside the containers.
    pub gateway: std::net::IpAddr,
    /// The second engine, when the containers run there.
    pub remote: Option<Arc<super::remote_engine::RemoteEngine>>,
    /// `docker`, or `swarm` (the local engine as a swarm manager).
    pub runner: RunnerKind,
}

impl DockerSetup {
    /// Containers on the local engine.
    pub async fn local(local: Docker) -> DockerSetup {
        DockerSetup {
            local,
            hosts: vec![local_host()],
            gateway: bridge_gateway().await,
            remote: None,
            runner: RunnerKind::Docker,
        }
    }

    /// Swarm jobs on the local engine, a swarm manager ([`super::swarm::Swarm`]).
    pub async fn swarm(local: Docker) -> DockerSetup {
        DockerSetup {
            runner: RunnerKind::Swarm,
            ..DockerSetup::local(local).await
        }
    }

    /// Containers on `remote` only (no filesystem shared).
    pub fn on_remote(
        local: Docker,
        remote: Arc<super::remote_engine::RemoteEngine>,
    ) -> DockerSetup {
        DockerSetup {
            local,
            hosts: vec![remote.host("remote")],
            gateway: remote.gateway,
            remote: Some(remote),
            runner: RunnerKind::Docker,
        }
    }

    /// Containers on `remote` only, reached through `sshd` (`ssh://`).
    pub fn on_ssh(
        local: Docker,
        remote: Arc<super::remote_engine::RemoteEngine>,
        sshd: &super::sshd::Sshd,
    ) -> DockerSetup {
        DockerSetup {
            local,
            hosts: vec![sshd.host("ssh")],
            gateway: remote.gateway,
            remote: Some(remote),
            runner: RunnerKind::Docker,
        }
    }

    /// The provider's image where the containers run.
    pub async fn prepare(&self, config: &AiCliConfig, provider: &str) {
        let tag = provider_image(&self.local, config, provider).await;
        if let Some(r) = &self.remote {
            r.load_from(&self.local, &tag).await;
        }
    }

    /// No container of a task of `repo` is left on any engine.
    pub async fn assert_clean(&self, repo: &Path) {
        assert_no_container_for_repo(&self.local, repo).await;
        if self.runner == RunnerKind::Swarm {
            super::swarm::assert_no_job_for_repo(&self.local, repo).await;
        }
        if let Some(r) = &self.remote {
            assert_no_container_for_repo(&r.docker, repo).await;
        }
    }
}
