//! The Docker tests' harness: is an engine there (else the tests say why and skip), the
//! images they run (built once per test process, reused across runs by tag), configs
//! and engines over the real engine, and checks that no container of a test is left.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aicli::Engine;
use aicli::providers::{
    AiCliConfig, DockerHostConfig, ProviderRegistry, RunnerKind, SharedProvider,
};
use aicli::runner::docker::image::{self, RuntimeSpec};
use aicli::runner::docker::labels;
use bollard::Docker;
use tokio::sync::OnceCell;

use crate::suite::support::{fake_cli, fixtures, replay_provider, test_config};

/// Set (to anything) where Docker must be there: the tests fail instead of skipping.
pub const REQUIRE_ENV: &str = "AICLI_REQUIRE_DOCKER";

/// Where the fixtures are inside the fake CLI's image.
pub const FIXTURES_IN_IMAGE: &str = "/opt/aicli-test/fixtures";

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

/// The local engine as a host entry.
pub fn local_host() -> DockerHostConfig {
    DockerHostConfig {
        name: "local".into(),
        url: "unix:///var/run/docker.sock".into(),
        tls: None,
        remote: None,
        max_containers: None,
        mcp_address: None,
        mcp_bind: None,
    }
}

fn deb_cache() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/aicli/debs")
}

/// The runtime layer (node, git, user aicli) on local/base: built once.
pub async fn runtime_image(docker: &Docker) -> String {
    static RUNTIME: OnceCell<String> = OnceCell::const_new();
    RUNTIME
        .get_or_init(|| async {
            let spec = RuntimeSpec {
                base: "local/base".into(),
                search_path: std::env::var("PATH").unwrap_or_default(),
                deb_cache: deb_cache(),
            };
            image::runtime_image(docker, &spec, &|l| eprintln!("[image] {l}"))
                .await
                .unwrap_or_else(|e| panic!("the runtime image does not build: {e}"))
        })
        .await
        .clone()
}

/// An image with `aicli-fake-cli` on PATH and the fixtures at [`FIXTURES_IN_IMAGE`],
/// on the runtime layer (git for remote runs). Its tag follows the binary, so a rebuilt
/// fake CLI makes a new image.
pub async fn fake_cli_image(docker: &Docker) -> String {
    static FAKE: OnceCell<String> = OnceCell::const_new();
    FAKE.get_or_init(|| async {
        let runtime = runtime_image(docker).await;
        let bin = fake_cli();
        let meta = std::fs::metadata(&bin).expect("fake cli");
        let stamp = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let tag = format!("aicli-test/fake-cli:{stamp}-{}", meta.len());
        if docker.inspect_image(&tag).await.is_ok() {
            return tag;
        }
        // Images of earlier builds of the fake CLI go.
        let old = docker
            .list_images(Some(bollard::query_parameters::ListImagesOptions {
                filters: Some(std::collections::HashMap::from([(
                    "reference".to_owned(),
                    vec!["aicli-test/fake-cli".to_owned()],
                )])),
                ..Default::default()
            }))
            .await
            .unwrap_or_default();
        for i in old {
            for t in i.repo_tags {
                let _ = docker
                    .remove_image(
                        &t,
                        None::<bollard::query_parameters::RemoveImageOptions>,
                        None,
                    )
                    .await;
            }
        }
        image::files_image(
            docker,
            &runtime,
            &tag,
            vec![
                (bin, "/usr/local/bin/aicli-fake-cli".into()),
                (fixtures(), FIXTURES_IN_IMAGE.into()),
            ],
            "aicli-fake-cli --replay /opt/aicli-test/fixtures/claude/text.ndjson >/dev/null",
        )
        .await
        .unwrap_or_else(|e| panic!("the fake CLI image does not build: {e}"));
        tag
    })
    .await
    .clone()
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

/// A config provider `fake` run by the built-in `adapter` (its argv, the prompt on the
/// CLI's stdin) with the fake CLI of the fake image replaying fixture `scenario`, and
/// `args` after.
pub fn adapter_fake(
    config: &mut AiCliConfig,
    adapter: &str,
    scenario: &str,
    args: &[&str],
) -> aicli::providers::ProviderConfig {
    let fx = format!("{FIXTURES_IN_IMAGE}/{adapter}/{scenario}");
    let mut extra: Vec<String> = vec![
        "--replay".into(),
        format!("{fx}.ndjson"),
        "--stderr-file".into(),
        format!("{fx}.stderr"),
        "--exit-file".into(),
        format!("{fx}.exit"),
    ];
    extra.extend(args.iter().map(|a| (*a).to_owned()));
    let p: aicli::providers::ProviderConfig = serde_json::from_value(serde_json::json!({
        "adapter": adapter,
        "package": "aicli-fake-cli",
        "binary_name": "aicli-fake-cli",
        "extra_args": extra,
    }))
    .expect("provider config");
    config.providers.insert("fake".into(), p.clone());
    p
}

/// An engine over `config` and its providers only.
pub fn config_engine(config: AiCliConfig) -> Engine {
    let reg = ProviderRegistry::from_config(&config).expect("registry");
    let env: BTreeMap<String, String> = std::env::vars().collect();
    Engine::new(config, reg).with_env(env)
}

/// An engine over `config` with the `fake` provider.
pub fn engine(config: AiCliConfig, fake: SharedProvider) -> Engine {
    let mut reg = ProviderRegistry::from_config(&config).expect("registry");
    reg.register(fake);
    let env: BTreeMap<String, String> = std::env::vars().collect();
    Engine::new(config, reg).with_env(env)
}

/// aicli's containers of `batch` on `docker` (any state).
pub async fn containers_of(docker: &Docker, batch: &str) -> Vec<String> {
    let filters = std::collections::HashMap::from([(
        "label".to_owned(),
        vec![format!("{}={batch}", labels::BATCH)],
    )]);
    docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .expect("list containers")
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

/// Fails when a container of `batch` is left on `docker`.
pub async fn assert_no_container(docker: &Docker, batch: &str) {
    let left = containers_of(docker, batch).await;
    assert!(
        left.is_empty(),
        "containers of batch {batch} left: {left:?}"
    );
}

/// The local engine's bridge gateway (172.17.0.1 on a stock engine): where servers the
/// containers reach as `host.docker.internal` listen.
pub async fn bridge_gateway() -> std::net::IpAddr {
    let cfg = aicli::providers::DockerConfig {
        hosts: vec![local_host()],
        ..Default::default()
    };
    let runner = aicli::runner::DockerRunner::connect(&cfg, &BTreeMap::new())
        .await
        .expect("the local engine");
    runner.hosts()[0].reach.bind
}

/// The image `provider` runs in under `config`, built from aicli's npm cache when the
/// engine lacks it (once per test process and image).
pub async fn provider_image(docker: &Docker, config: &AiCliConfig, provider: &str) -> String {
    static BUILT: OnceCell<tokio::sync::Mutex<BTreeMap<String, String>>> = OnceCell::const_new();
    let built = BUILT
        .get_or_init(|| async { tokio::sync::Mutex::new(BTreeMap::new()) })
        .await;
    let mut built = built.lock().await;
    let p = &config.providers[provider];
    let tag =
        aicli::runner::docker::image_name(&config.engine.docker, provider, p.version.as_deref());
    if built.contains_key(&tag) || docker.inspect_image(&tag).await.is_ok() {
        built.insert(tag.clone(), tag.clone());
        return tag;
    }
    let spec = image::BuildSpec {
        provider: provider.to_owned(),
        package: p.package.clone(),
        version: p.version.clone(),
        binary_name: p.binary_name.clone(),
        base: "local/base".into(),
        tag: tag.clone(),
        npm_dir: aicli_testkit::cli_cache_dir(),
        search_path: std::env::var("PATH").unwrap_or_default(),
        deb_cache: deb_cache(),
        force: false,
    };
    image::build(docker, &spec, &|l| eprintln!("[image] {l}"))
        .await
        .unwrap_or_else(|e| panic!("the {provider} image does not build: {e}"));
    built.insert(tag.clone(), tag.clone());
    tag
}

/// Fails when a container of a task of `repo` is left (any batch).
pub async fn assert_no_container_for_repo(docker: &Docker, repo: &Path) {
    let filters =
        std::collections::HashMap::from([("label".to_owned(), vec![labels::MANAGED.to_owned()])]);
    let left: Vec<String> = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .expect("list containers")
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
}

impl DockerSetup {
    /// Containers on the local engine.
    pub async fn local(local: Docker) -> DockerSetup {
        DockerSetup {
            local,
            hosts: vec![local_host()],
            gateway: bridge_gateway().await,
            remote: None,
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
        if let Some(r) = &self.remote {
            assert_no_container_for_repo(&r.docker, repo).await;
        }
    }
}
