//! The local Docker engine as a host, and the images the Docker tests and the Docker
//! bench run: the runtime layer, the fake CLI's image (built once per process, reused
//! across runs by tag), a real CLI's image from aicli's npm cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aicli::providers::{AiCliConfig, DockerHostConfig, ProviderConfig};
use aicli::runner::docker::image::{self, RuntimeSpec};
use bollard::Docker;
use tokio::sync::OnceCell;

use super::fake::{fake_cli, fake_provider_config, fixtures};

/// Where the fixtures are inside the fake CLI's image.
pub const FIXTURES_IN_IMAGE: &str = "/opt/aicli-test/fixtures";

/// The local engine as a host entry.
pub fn local_host() -> DockerHostConfig {
    DockerHostConfig {
        name: "local".into(),
        url: "unix:///var/run/docker.sock".into(),
        tls: None,
        ssh: None,
        remote: None,
        max_containers: None,
        mcp_address: None,
        mcp_bind: None,
    }
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

/// The image `provider` runs in under `config`, built from aicli's npm cache when the
/// engine lacks it (once per process and image).
pub async fn provider_image(docker: &Docker, config: &AiCliConfig, provider: &str) -> String {
    static BUILT: OnceCell<tokio::sync::Mutex<BTreeMap<String, String>>> = OnceCell::const_new();
    let built = BUILT
        .get_or_init(|| async { tokio::sync::Mutex::new(BTreeMap::new()) })
        .await;
    let mut built = built.lock().await;
    let p = &config.providers[provider];
    let tag = config.engine.docker.image_for(provider, p);
    if built.contains_key(&tag) || docker.inspect_image(&tag).await.is_ok() {
        built.insert(tag.clone(), tag.clone());
        return tag;
    }
    let spec = image::BuildSpec::for_provider(
        config,
        provider,
        &aicli_testkit::cli_cache_dir(),
        &deb_cache(),
        "local/base",
    )
    .unwrap_or_else(|e| panic!("the {provider} image cannot be built: {e}"));
    image::build(docker, &spec, &|l| eprintln!("[image] {l}"))
        .await
        .unwrap_or_else(|e| panic!("the {provider} image does not build: {e}"));
    built.insert(tag.clone(), tag.clone());
    tag
}

/// A config provider `fake` run by the built-in `adapter` (its argv, the prompt on the
/// CLI's stdin) with the fake CLI of the fake image replaying fixture `scenario`, and
/// `args` after.
pub fn adapter_fake(
    config: &mut AiCliConfig,
    adapter: &str,
    scenario: &str,
    args: &[&str],
) -> ProviderConfig {
    let fixture = Path::new(FIXTURES_IN_IMAGE).join(adapter).join(scenario);
    let p = fake_provider_config(adapter, &fixture, args);
    config.providers.insert("fake".into(), p.clone());
    p
}

/// Loads `image` from engine `from` into engine `to` (as `docker save | docker load`),
/// unless `to` holds that very image already.
pub async fn load_image(from: &Docker, to: &Docker, image: &str) {
    use futures_util::StreamExt;
    let want = from
        .inspect_image(image)
        .await
        .unwrap_or_else(|e| panic!("{image} on the engine it is loaded from: {e}"))
        .id;
    if to.inspect_image(image).await.ok().and_then(|i| i.id) == want {
        return;
    }
    let export = from.export_image(image);
    let mut load = to.import_image_stream(
        bollard::query_parameters::ImportImageOptions::default(),
        export,
        None,
    );
    while let Some(r) = load.next().await {
        r.unwrap_or_else(|e| panic!("loading {image}: {e}"));
    }
}
