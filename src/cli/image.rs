//! `aicli image build [PROVIDER…]`, and the image part of `aicli doctor`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::npm::{self, Pin};
use crate::providers::{AiCliConfig, ProviderRegistry};
use crate::runner::DockerRunner;
use crate::runner::docker::hosts::Host;
use crate::runner::docker::image::{self, BuildSpec, ImageReport};
use crate::runner::docker::swarm;
use anyhow::{Context, bail};
use clap::{Args, Subcommand};

/// `aicli image ...`.
#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// Build the providers' images (one per npm package: the pinned CLI plus node and
    /// git) on the Docker engines; every provider when none is named.
    Build(BuildArgs),
}

/// `aicli image build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The providers (default: all).
    pub providers: Vec<String>,
    /// The image to start from (default: engine.docker.base_image, `local/base`); pulled
    /// when the engine lacks it and a registry answers.
    #[arg(long, value_name = "IMAGE")]
    pub base: Option<String>,
    /// Only on this engine (a name in engine.docker.hosts); default: every engine.
    #[arg(long, value_name = "NAME", conflicts_with = "swarm")]
    pub host: Option<String>,
    /// For the swarm runner: build on the manager (the first engine), then load the
    /// image into every other node of its swarm through that node's engine in
    /// engine.docker.hosts. A node with no engine there is named, and the build fails.
    #[arg(long)]
    pub swarm: bool,
    /// aicli's npm cache holding the pinned CLIs, where missing ones are installed first
    /// (default: `aicli install`'s: $AICLI_CLI_CACHE, else <aicli cache>/npm).
    #[arg(long, value_name = "DIR")]
    pub npm_cache: Option<PathBuf>,
    /// Build even when the image already holds the pinned CLI on the same base.
    #[arg(long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `aicli image …`.
pub async fn run(config: &AiCliConfig, action: ImageAction) -> anyhow::Result<ExitCode> {
    match action {
        ImageAction::Build(a) => build(config, a).await,
    }
}

async fn build(config: &AiCliConfig, a: BuildArgs) -> anyhow::Result<ExitCode> {
    let reg = ProviderRegistry::from_config(config)?;
    // Every provider with an npm package to put in an image (an ACP agent's too).
    let names: Vec<String> = if a.providers.is_empty() {
        reg.providers()
            .filter(|p| !p.package_name().is_empty())
            .map(|p| p.name().to_owned())
            .collect()
    } else {
        a.providers.clone()
    };
    for name in &names {
        reg.get(name)?;
    }
    let caches = Caches::of(config, a.npm_cache.clone());
    eprintln!(
        "aicli image build: the pinned CLIs from {}, Debian packages cached in {}",
        caches.npm.display(),
        caches.debs.display()
    );
    let env = std::env::vars().collect();
    let runner = DockerRunner::connect(&config.engine.docker, &env)
        .await
        .context("cannot reach a Docker engine")?;
    let hosts: Vec<_> = runner
        .hosts()
        .iter()
        .filter(|h| a.host.as_deref().is_none_or(|n| n == h.name))
        .cloned()
        .collect();
    if a.swarm {
        let wanted = crate::runner::docker::hosts::configured_hosts(&config.engine.docker, &env);
        let first = wanted.first().context("no engine is configured")?;
        let manager = hosts
            .first()
            .filter(|h| h.name == first.name)
            .with_context(|| {
                format!(
                    "the swarm's manager, engine '{}', does not answer",
                    first.name
                )
            })?;
        swarm::check_manager(&manager.docker, &manager.name, &first.url).await?;
    }
    // With --swarm only the manager builds; the other engines get its image loaded.
    let builders = if a.swarm { &hosts[..1] } else { &hosts[..] };
    if hosts.is_empty() {
        bail!(
            "no connected Docker engine is named '{}'",
            a.host.unwrap_or_default()
        );
    }
    // After the engines answered: without one, there is no point installing 1 GB.
    install_pins(config, &names, &caches.npm).await?;
    let base = a
        .base
        .clone()
        .unwrap_or_else(|| config.engine.docker.base_image.clone());
    let mut built = Vec::new();
    let mut nodes_out = Vec::new();
    for (tag, users) in by_image(config, &names) {
        // Every entry of the config that runs in it, named or not.
        let all: Vec<&str> = config
            .providers
            .iter()
            .filter(|(n, p)| config.engine.docker.image_for(n, p) == tag)
            .map(|(n, _)| n.as_str())
            .collect();
        for h in builders {
            let b = build_on(config, &users, h, &caches, &base, a.force, a.json).await?;
            if !a.json {
                println!(
                    "{}: {} on {} ({})",
                    all.join(", "),
                    b.tag,
                    h.name,
                    b.cli_version
                );
            }
            for name in &users {
                built.push(serde_json::json!({"provider": name, "host": h.name, "image": b}));
            }
        }
        if a.swarm {
            let quiet = a.json;
            let progress = move |line: &str| {
                if !quiet {
                    eprintln!("[swarm] {line}");
                }
            };
            let nodes = swarm::images::spread(&hosts, &tag, &progress).await?;
            let lacking: Vec<String> = nodes
                .iter()
                .filter(|n| n.done == swarm::images::OnNode::NoEngine)
                .map(|n| n.about.clone())
                .collect();
            if !a.json {
                for n in &nodes {
                    println!(
                        "{tag} on swarm {}: {}",
                        n.about,
                        serde_json::to_value(&n.done)?.as_str().unwrap_or_default()
                    );
                }
            }
            nodes_out.push(serde_json::json!({"image": tag, "nodes": nodes}));
            if !lacking.is_empty() {
                bail!(
                    "{tag} is not on {} of the swarm's nodes, which no engine in engine.docker.hosts answers for: {}; add each node's engine there (unix socket, tcp+TLS or ssh://) and run `aicli image build --swarm` again",
                    lacking.len(),
                    lacking.join("; ")
                );
            }
        }
    }
    if a.json {
        let out = if a.swarm {
            serde_json::json!({"built": built, "swarm": nodes_out})
        } else {
            serde_json::Value::Array(built)
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the pinned CLIs and the Debian packages an image is made of are kept.
struct Caches {
    npm: PathBuf,
    debs: PathBuf,
}

impl Caches {
    /// `aicli install`'s npm cache ($AICLI_CLI_CACHE, else <aicli cache>/npm) unless
    /// `npm` is given, and engine.docker.deb_cache, else <aicli cache>/debs.
    fn of(config: &AiCliConfig, npm: Option<PathBuf>) -> Caches {
        Caches {
            npm: npm.unwrap_or_else(crate::cache::cli_cache_dir),
            debs: config
                .engine
                .docker
                .deb_cache
                .clone()
                .unwrap_or_else(|| crate::cache::cache_dir().join("debs")),
        }
    }
}

/// `names` grouped by the image they run in (entries of one npm package share it), in
/// the order given.
fn by_image(config: &AiCliConfig, names: &[String]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for name in names {
        let Some(p) = config.providers.get(name) else {
            continue;
        };
        let tag = config.engine.docker.image_for(name, p);
        match groups.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, users)) => users.push(name.clone()),
            None => groups.push((tag, vec![name.clone()])),
        }
    }
    groups
}

/// Builds the image of `users` (providers sharing it; the first one's entry says what
/// goes in) on engine `h`, its progress on stderr unless `quiet`.
async fn build_on(
    config: &AiCliConfig,
    users: &[String],
    h: &Host,
    caches: &Caches,
    base: &str,
    force: bool,
    quiet: bool,
) -> anyhow::Result<image::Built> {
    let name = &users[0];
    let spec =
        BuildSpec::for_provider(config, name, &caches.npm, &caches.debs, base)?.forced(force);
    let host = h.name.clone();
    let progress = move |line: &str| {
        if !quiet {
            eprintln!("[{host}] {line}");
        }
    };
    image::build(&h.docker, &spec, &progress)
        .await
        .with_context(|| format!("building the image of {} on {}", users.join(", "), h.name))
}

/// Before tasks of `providers` run in containers: builds each image aicli names (not
/// one of engine.docker.images) that a connected engine lacks, saying so, with its
/// progress on stderr. No engine answering is left to the runs to report.
pub(super) async fn build_missing(
    config: &AiCliConfig,
    providers: &std::collections::BTreeSet<String>,
) -> anyhow::Result<()> {
    let ours: Vec<String> = providers
        .iter()
        .filter(|n| {
            config
                .providers
                .get(*n)
                .is_some_and(|p| !p.package.is_empty())
                && !config.engine.docker.images.contains_key(*n)
        })
        .cloned()
        .collect();
    if ours.is_empty() {
        return Ok(());
    }
    let env = std::env::vars().collect();
    let Ok(runner) = DockerRunner::connect(&config.engine.docker, &env).await else {
        return Ok(());
    };
    let mut missing = Vec::new();
    for (tag, users) in by_image(config, &ours) {
        for h in runner.hosts() {
            match h.docker.inspect_image(&tag).await {
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => missing.push((tag.clone(), users.clone(), h.clone())),
                Err(e) => bail!(
                    "cannot inspect image {tag} on docker host '{}': {e}",
                    h.name
                ),
                Ok(_) => {}
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let caches = Caches::of(config, None);
    let names: Vec<String> = missing.iter().flat_map(|(_, u, _)| u.clone()).collect();
    install_pins(config, &names, &caches.npm).await?;
    for (tag, users, h) in missing {
        eprintln!(
            "aicli: image {tag} (for {}) is not on docker host '{}': building it now, once (`aicli image build` builds ahead of time)",
            users.join(", "),
            h.name
        );
        let base = &config.engine.docker.base_image;
        let b = build_on(config, &users, &h, &caches, base, false, false).await?;
        eprintln!("aicli: built {} on {} ({})", b.tag, h.name, b.cli_version);
    }
    Ok(())
}

/// Installs the pinned CLIs of `names` that `npm_dir` lacks, as `aicli install` does
/// (a provider that pins no version has nothing to install).
async fn install_pins(
    config: &AiCliConfig,
    names: &[String],
    npm_dir: &Path,
) -> anyhow::Result<()> {
    let mut missing: Vec<Pin> = Vec::new();
    for name in names {
        let pins = match npm::pins(config, std::slice::from_ref(name)) {
            Ok(p) => p,
            Err(npm::InstallError::NoVersion { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        // The provider's own package, and an ACP wrapper's CLIs.
        missing.extend(pins.into_iter().filter(|p| !npm::is_installed(npm_dir, p)));
    }
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "aicli image build: {} not in {}: installing first",
        missing.iter().map(Pin::spec).collect::<Vec<_>>().join(", "),
        npm_dir.display()
    );
    super::install::install_missing(&missing, npm_dir).await
}

/// For `aicli doctor`: each provider's image on each reachable engine, with the CLI
/// version inside. Empty when no engine answers (`note` says why).
pub async fn doctor_reports(
    config: &AiCliConfig,
    reg: &ProviderRegistry,
) -> (Vec<(String, ImageReport)>, Option<String>) {
    let env = std::env::vars().collect();
    let runner = match DockerRunner::connect(&config.engine.docker, &env).await {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(format!("docker: {e}"))),
    };
    let mut out = Vec::new();
    for p in reg.providers().filter(|p| !p.package_name().is_empty()) {
        let image_name = DockerRunner::image_for(&config.engine.docker, p);
        for h in runner.hosts() {
            let r = image::inspect(&h.docker, &h.name, &image_name, p.binary_name()).await;
            out.push((p.name().to_owned(), r));
        }
    }
    (out, None)
}

/// The doctor's warning for an image whose CLI is not the pinned one, if it is not.
pub fn version_warning(r: &ImageReport, pinned: Option<&str>) -> Option<String> {
    if let Some(problem) = &r.problem {
        return Some(format!(
            "image {} on {}: {problem}; build it with `aicli image build`",
            r.image, r.host
        ));
    }
    let (Some(inside), Some(pin)) = (&r.version_inside, pinned) else {
        return None;
    };
    (!inside.contains(pin)).then(|| {
        format!(
            "image {} on {} holds {inside}, the pin is {pin}: rebuild it with `aicli image build`",
            r.image, r.host
        )
    })
}
