//! `aicli image build`: a provider's image, made through the Engine API with no registry
//! and no network inside the build.
//!
//! Two layers, each a container that is created from the layer below, given files (a
//! tar upload), started once with a short root script, and committed:
//!
//! 1. **runtime** (`aicli/runtime:<base id>-node<version>`), shared by every provider:
//!    the base image plus, when it lacks them, this machine's `node` binary (the one the
//!    CLIs are installed and tested with) and git from Debian packages downloaded on
//!    this machine (with `apt-get --download-only` against the base's own package list,
//!    cached), and the user `aicli` (uid 1000).
//! 2. **package** (`aicli/<npm package>:<version>`, shared by every provider entry of the
//!    package: gemini and gemini-acp run in one): the pinned CLI's npm package and its
//!    dependency closure, copied from aicli's npm cache into `/opt/aicli/node_modules`,
//!    its executable linked into `/opt/aicli/bin` (first on `PATH`), checked with
//!    `--version` inside.
//!
//! No credentials go into an image: a run gets a private copy of the CLI's login files
//! in the task's home, at run time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aicli_providers::{AiCliConfig, ProviderConfig};

use bollard::Docker;

use super::DockerError;
use super::tarball::TarWriter;

mod host;
mod layer;
mod npm;
mod runtime;

pub use layer::probe;
use layer::{Layer, layer};
use npm::{closure, pinned_package};
pub use runtime::{RuntimeSpec, runtime_image};

/// The uid (and gid) of the user `aicli` in aicli's images.
pub const USER_ID: u32 = 1000;
/// `PATH` of an image that sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Where the CLIs live in a provider image.
pub const CLI_ROOT: &str = "/opt/aicli";
/// Label: `package@version` of the CLI inside.
pub const LABEL_CLI: &str = "dev.aicli.image.cli";
/// Label: the image it was built from.
pub const LABEL_BASE: &str = "dev.aicli.image.base";
/// The node major version the CLIs need (Gemini CLI: >= 20).
pub(super) const MIN_NODE_MAJOR: u32 = 20;

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// The provider whose entry it is built from (for advice).
    pub provider: String,
    /// The CLI's npm package.
    pub package: String,
    /// Its pinned version (the cache must hold exactly this one).
    pub version: Option<String>,
    /// The executable's name.
    pub binary_name: String,
    /// The image to start from.
    pub base: String,
    /// The tag to give the result.
    pub tag: String,
    /// aicli's npm cache (`<dir>/node_modules/<package>`).
    pub npm_dir: PathBuf,
    /// This machine's `PATH` (to find `node` and `apt-get`).
    pub search_path: String,
    /// Where downloaded Debian packages are kept.
    pub deb_cache: PathBuf,
    /// Build even when an image of this tag holds the same CLI on the same base.
    pub force: bool,
    /// The CLIs an ACP wrapper runs (`acp.env_executables`: claude-agent-acp runs
    /// `claude`), each from its own package and prefix, beside the provider's.
    pub wrapped: Vec<WrappedCli>,
}

/// A CLI an ACP wrapper runs, in its image: under `/opt/aicli/wrapped/<binary>`, linked
/// into `/opt/aicli/bin`, the wrapper's variable set to that path in the image's config.
#[derive(Debug, Clone)]
pub struct WrappedCli {
    /// The variable the wrapper reads the executable's path from (`CLAUDE_CODE_EXECUTABLE`).
    pub var: String,
    /// The provider that pins it (for advice).
    pub provider: String,
    /// Its npm package.
    pub package: String,
    /// Its pinned version.
    pub version: Option<String>,
    /// The executable's name.
    pub binary_name: String,
    /// The npm prefix holding it.
    pub npm_dir: PathBuf,
}

/// The npm prefix, in aicli's cache `npm_cache`, a provider's package is installed into.
fn prefix_of(p: &ProviderConfig, npm_cache: &Path) -> PathBuf {
    if p.npm_omit_optional {
        crate::cache::slim_prefix(npm_cache)
    } else {
        npm_cache.to_path_buf()
    }
}

/// The CLIs an ACP wrapper runs (`acp.env_executables`), each the provider whose
/// executable it is; refused when no provider of the config installs it from npm.
fn wrapped_clis(
    config: &AiCliConfig,
    p: &ProviderConfig,
    npm_cache: &Path,
) -> Result<Vec<WrappedCli>, DockerError> {
    let Some(acp) = &p.acp else {
        return Ok(Vec::new());
    };
    acp.env_executables
        .iter()
        .map(|(var, binary)| {
            let (name, cli) = config
                .providers
                .iter()
                .find(|(_, c)| c.binary_name == *binary && !c.package.is_empty())
                .ok_or_else(|| {
                    DockerError::Work(format!(
                        "acp.env_executables.{var} names '{binary}', which no provider of the config installs from npm: an image cannot hold it"
                    ))
                })?;
            Ok(WrappedCli {
                var: var.clone(),
                provider: name.clone(),
                package: cli.package.clone(),
                version: cli.version.clone(),
                binary_name: binary.clone(),
                npm_dir: prefix_of(cli, npm_cache),
            })
        })
        .collect()
}

/// Label: `package@version` of each CLI an ACP wrapper runs, comma-separated.
pub const LABEL_WRAPPED: &str = "dev.aicli.image.wraps";

/// One npm package tree of an image: the packages copied under `root`, the executable
/// linked into `/opt/aicli/bin`.
struct Tree {
    root: String,
    modules: PathBuf,
    packages: Vec<String>,
    package: String,
    binary: String,
    bin_rel: String,
}

impl Tree {
    /// The tree of `package` (pinned at `version`, by `provider`) from the npm prefix
    /// `npm_dir`, under `root`, with its executable `binary`; and the version there.
    fn pinned(
        root: String,
        npm_dir: &Path,
        package: &str,
        version: Option<&str>,
        binary: &str,
        provider: &str,
    ) -> Result<(String, Tree), DockerError> {
        let (have, bin_rel) = pinned_package(npm_dir, package, version, binary, provider)?;
        let modules = npm_dir.join("node_modules");
        let tree = Tree {
            root,
            packages: closure(&modules, package)?,
            modules,
            package: package.to_owned(),
            binary: binary.to_owned(),
            bin_rel,
        };
        Ok((have, tree))
    }

    fn write(&self, w: &mut TarWriter) -> std::io::Result<()> {
        let mut dir = String::new();
        for part in format!("{}/node_modules", self.root).split('/') {
            dir = if dir.is_empty() { part.to_owned() } else { format!("{dir}/{part}") };
            w.dir(&dir, 0o755)?;
        }
        for p in &self.packages {
            if let Some((scope, _)) = p.split_once('/') {
                w.dir(&format!("{}/node_modules/{scope}", self.root), 0o755)?;
            }
            let to = format!("{}/node_modules/{p}", self.root);
            w.dir(&to, 0o755)?;
            w.tree(&self.modules.join(p), &to, &|_| false)?;
        }
        w.symlink(&format!("opt/aicli/bin/{}", self.binary), &self.executable())
    }

    /// The executable's path in the image.
    fn executable(&self) -> String {
        format!("/{}/node_modules/{}/{}", self.root, self.package, self.bin_rel)
    }
}

impl BuildSpec {
    /// What to build for provider `name` of `config`: its package from aicli's npm
    /// cache `npm_cache` (the slim prefix for a package installed without optional
    /// dependencies), an ACP wrapper's CLIs beside it, on `base`, tagged as the Docker
    /// runner looks for it.
    pub fn for_provider(
        config: &AiCliConfig,
        name: &str,
        npm_cache: &Path,
        deb_cache: &Path,
        base: &str,
    ) -> Result<BuildSpec, DockerError> {
        let p = config
            .providers
            .get(name)
            .ok_or_else(|| DockerError::Work(format!("no provider '{name}' in the config")))?;
        Ok(BuildSpec {
            provider: name.to_owned(),
            package: p.package.clone(),
            version: p.version.clone(),
            binary_name: p.binary_name.clone(),
            base: base.to_owned(),
            tag: config.engine.docker.image_for(name, p),
            npm_dir: prefix_of(p, npm_cache),
            search_path: std::env::var("PATH").unwrap_or_default(),
            deb_cache: deb_cache.to_path_buf(),
            force: false,
            wrapped: wrapped_clis(config, p, npm_cache)?,
        })
    }

    /// Built even when the image is up to date, with `force`.
    pub fn forced(mut self, force: bool) -> BuildSpec {
        self.force = force;
        self
    }

    fn runtime(&self) -> RuntimeSpec {
        RuntimeSpec {
            base: self.base.clone(),
            search_path: self.search_path.clone(),
            deb_cache: self.deb_cache.clone(),
        }
    }
}

/// What was built.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Built {
    /// The tag.
    pub tag: String,
    /// The image id.
    pub id: String,
    /// The runtime layer it sits on.
    pub runtime: String,
    /// `--version` inside.
    pub cli_version: String,
}

/// Builds the provider image of `spec` on `docker`; `progress` gets a line per step.
pub async fn build(
    docker: &Docker,
    spec: &BuildSpec,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Built, DockerError> {
    let (have, main) = Tree::pinned(
        CLI_ROOT.trim_start_matches('/').to_owned(),
        &spec.npm_dir,
        &spec.package,
        spec.version.as_deref(),
        &spec.binary_name,
        &spec.provider,
    )?;
    let cli = format!("{}@{have}", spec.package);
    let mut trees = vec![main];
    let mut wraps = Vec::new();
    let mut env = Vec::new();
    for w in &spec.wrapped {
        let (v, tree) = Tree::pinned(
            format!("{}/wrapped/{}", CLI_ROOT.trim_start_matches('/'), w.binary_name),
            &w.npm_dir,
            &w.package,
            w.version.as_deref(),
            &w.binary_name,
            &w.provider,
        )?;
        wraps.push(format!("{}@{v}", w.package));
        env.push(format!("{}={CLI_ROOT}/bin/{}", w.var, w.binary_name));
        trees.push(tree);
    }
    let wraps = wraps.join(",");
    if !spec.force
        && let Ok(i) = docker.inspect_image(&spec.tag).await
    {
        let labels = i.config.and_then(|c| c.labels).unwrap_or_default();
        let same_wraps = labels.get(LABEL_WRAPPED).map_or("", String::as_str) == wraps;
        if labels.get(LABEL_CLI) == Some(&cli)
            && labels.get(LABEL_BASE) == Some(&spec.base)
            && same_wraps
        {
            progress(&format!(
                "{} already holds {cli} on {}",
                spec.tag, spec.base
            ));
            return Ok(Built {
                tag: spec.tag.clone(),
                id: i.id.as_deref().map(short).unwrap_or_default(),
                runtime: String::new(),
                cli_version: have,
            });
        }
    }
    let runtime = runtime_image(docker, &spec.runtime(), progress).await?;
    for t in &trees {
        progress(&format!(
            "copying {} ({}) into {}",
            t.package,
            t.packages.join(", "),
            spec.tag
        ));
    }
    let mut script = String::from("set -e\n");
    for t in &trees {
        script.push_str(&format!("chmod 755 {}\n", t.executable()));
    }
    for w in &spec.wrapped {
        script.push_str(&format!("{} --version\n", w.binary_name));
    }
    script.push_str(&format!("{} --version\n", spec.binary_name));
    let files = move |w: &mut TarWriter| -> std::io::Result<()> {
        w.dir("opt", 0o755)?;
        w.dir("opt/aicli", 0o755)?;
        w.dir("opt/aicli/bin", 0o755)?;
        for t in &trees {
            t.write(w)?;
        }
        Ok(())
    };
    let path = format!("{CLI_ROOT}/bin:{DEFAULT_PATH}");
    let mut labels = HashMap::from([
        (LABEL_CLI.to_owned(), cli.clone()),
        (LABEL_BASE.to_owned(), spec.base.clone()),
    ]);
    if !wraps.is_empty() {
        labels.insert(LABEL_WRAPPED.to_owned(), wraps);
    }
    let (id, out) = layer(
        docker,
        &Layer {
            from: runtime.clone(),
            tag: spec.tag.clone(),
            path: path.clone(),
            env,
            script,
            labels,
        },
        files,
    )
    .await?;
    let cli_version = out.lines().last().unwrap_or("").trim().to_owned();
    progress(&format!("{} ({}): {cli_version}", spec.tag, short(&id)));
    Ok(Built {
        tag: spec.tag.clone(),
        id,
        runtime,
        cli_version,
    })
}

/// The PATH an image's config sets, else [`DEFAULT_PATH`].
pub fn path_in(image: &bollard::models::ImageInspect) -> String {
    image
        .config
        .as_ref()
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find_map(|kv| kv.strip_prefix("PATH=")))
        .map_or_else(|| DEFAULT_PATH.to_owned(), str::to_owned)
}

/// An image `tag` made of `from` plus files of this machine (`(source, path in the
/// image)`), checked by running `check` (a shell line) in it as root.
#[cfg(feature = "test-helpers")]
pub async fn files_image(
    docker: &Docker,
    from: &str,
    tag: &str,
    files: Vec<(PathBuf, String)>,
    check: &str,
) -> Result<String, DockerError> {
    let path = docker
        .inspect_image(from)
        .await
        .map_or_else(|_| DEFAULT_PATH.to_owned(), |i| path_in(&i));
    let add = move |w: &mut TarWriter| -> std::io::Result<()> {
        for (src, dst) in &files {
            let dst = dst.trim_start_matches('/');
            if std::fs::metadata(src)?.is_dir() {
                w.dir(dst, 0o755)?;
                w.tree(src, dst, &|_| false)?;
            } else {
                w.copy_file(src, dst, 0o755)?;
            }
        }
        Ok(())
    };
    let (id, _) = layer(
        docker,
        &Layer {
            from: from.to_owned(),
            tag: tag.to_owned(),
            path,
            env: Vec::new(),
            script: format!("set -e\n{check}\n"),
            labels: HashMap::new(),
        },
        add,
    )
    .await?;
    Ok(id)
}

pub(super) fn short(id: &str) -> String {
    id.trim_start_matches("sha256:").chars().take(12).collect()
}

/// An image as `aicli doctor` sees it on one engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageReport {
    /// The engine's name.
    pub host: String,
    /// The image.
    pub image: String,
    /// Its id, when it is there.
    pub id: Option<String>,
    /// The `package@version` label.
    pub labelled_cli: Option<String>,
    /// What `--version` prints inside.
    pub version_inside: Option<String>,
    /// What went wrong, if anything.
    pub problem: Option<String>,
}

/// Checks `image` on `docker`: present, its label, and `binary --version` run inside.
pub async fn inspect(docker: &Docker, host: &str, image: &str, binary: &str) -> ImageReport {
    let mut r = ImageReport {
        host: host.to_owned(),
        image: image.to_owned(),
        id: None,
        labelled_cli: None,
        version_inside: None,
        problem: None,
    };
    match docker.inspect_image(image).await {
        Ok(i) => {
            r.id = i.id.as_deref().map(short);
            r.labelled_cli = i
                .config
                .and_then(|c| c.labels)
                .and_then(|l| l.get(LABEL_CLI).cloned());
        }
        Err(e) => {
            r.problem = Some(format!("not there ({e})"));
            return r;
        }
    }
    match probe(docker, image, &format!("{binary} --version")).await {
        Ok(out) => r.version_inside = Some(version_line(&out).to_owned()),
        Err(e) => r.problem = Some(e.to_string()),
    }
    r
}

/// The line of a `--version` output that names the version: a CLI may print warnings
/// beside it (codex warns "failed to clean up stale arg0 temp dirs" in containers).
fn version_line(out: &str) -> &str {
    let lines = || out.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("warning"))
        .find(|l| {
            l.split_whitespace()
                .any(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))
        })
        .or_else(|| lines().next())
        .unwrap_or("")
}

#[cfg(test)]
mod tests;
