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
//! 2. **provider** (`aicli/<provider>:<version>`): the pinned CLI's npm package and its
//!    dependency closure, copied from aicli's npm cache into `/opt/aicli/node_modules`,
//!    its executable linked into `/opt/aicli/bin` (first on `PATH`), checked with
//!    `--version` inside.
//!
//! No credentials go into an image: a run gets a private copy of the CLI's login files
//! in the task's home, at run time.

use std::collections::HashMap;
use std::path::PathBuf;

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
/// Label: the provider an image is for.
pub const LABEL_PROVIDER: &str = "dev.aicli.image.provider";
/// Label: `package@version` of the CLI inside.
pub const LABEL_CLI: &str = "dev.aicli.image.cli";
/// Label: the image it was built from.
pub const LABEL_BASE: &str = "dev.aicli.image.base";
/// The node major version the CLIs need (Gemini CLI: >= 20).
pub(super) const MIN_NODE_MAJOR: u32 = 20;

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    /// The provider's name.
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
}

impl BuildSpec {
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
    let (have, bin_rel) = pinned_package(spec)?;
    let have = have.as_str();
    let cli = format!("{}@{have}", spec.package);
    if !spec.force
        && let Ok(i) = docker.inspect_image(&spec.tag).await
    {
        let labels = i.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get(LABEL_CLI) == Some(&cli) && labels.get(LABEL_BASE) == Some(&spec.base) {
            progress(&format!(
                "{} already holds {cli} on {}",
                spec.tag, spec.base
            ));
            return Ok(Built {
                tag: spec.tag.clone(),
                id: i.id.as_deref().map(short).unwrap_or_default(),
                runtime: String::new(),
                cli_version: have.to_owned(),
            });
        }
    }
    let runtime = runtime_image(docker, &spec.runtime(), progress).await?;
    let packages = closure(&spec.npm_dir.join("node_modules"), &spec.package)?;
    progress(&format!(
        "copying {} ({}) into {}",
        spec.package,
        packages.join(", "),
        spec.tag
    ));
    let modules = spec.npm_dir.join("node_modules");
    let binary = spec.binary_name.clone();
    let package = spec.package.clone();
    let executable = bin_rel.clone();
    let files = move |w: &mut TarWriter| -> std::io::Result<()> {
        w.dir("opt/aicli", 0o755)?;
        w.dir("opt/aicli/node_modules", 0o755)?;
        w.dir("opt/aicli/bin", 0o755)?;
        for p in &packages {
            if let Some((scope, _)) = p.split_once('/') {
                w.dir(&format!("opt/aicli/node_modules/{scope}"), 0o755)?;
            }
            w.dir(&format!("opt/aicli/node_modules/{p}"), 0o755)?;
            w.tree(
                &modules.join(p),
                &format!("opt/aicli/node_modules/{p}"),
                &|_| false,
            )?;
        }
        w.symlink(
            &format!("opt/aicli/bin/{binary}"),
            &format!("../node_modules/{package}/{bin_rel}"),
        )?;
        Ok(())
    };
    let path = format!("{CLI_ROOT}/bin:{DEFAULT_PATH}");
    let script = format!(
        "set -e\nchmod 755 /opt/aicli/node_modules/{0}/{1}\n{2} --version\n",
        spec.package, executable, spec.binary_name
    );
    let labels = HashMap::from([
        (LABEL_PROVIDER.to_owned(), spec.provider.clone()),
        (LABEL_CLI.to_owned(), cli.clone()),
        (LABEL_BASE.to_owned(), spec.base.clone()),
    ]);
    let (id, out) = layer(
        docker,
        &Layer {
            from: runtime.clone(),
            tag: spec.tag.clone(),
            path: path.clone(),
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
