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

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use bollard::Docker;
use serde_json::Value;

use super::DockerError;
use super::tarball::TarWriter;

mod host;
mod layer;

pub use layer::probe;
use layer::{Layer, ensure_base, layer};

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

/// The shared runtime layer's inputs.
#[derive(Debug, Clone)]
pub struct RuntimeSpec {
    /// The image to start from.
    pub base: String,
    /// This machine's `PATH` (to find `node` and `apt-get`).
    pub search_path: String,
    /// Where downloaded Debian packages are kept.
    pub deb_cache: PathBuf,
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

/// The version of the package in the npm cache (which must be the pinned one) and its
/// executable's path inside the package.
fn pinned_package(spec: &BuildSpec) -> Result<(String, String), DockerError> {
    let pkg_dir = spec.npm_dir.join("node_modules").join(&spec.package);
    let pkg = read_package(&pkg_dir)?;
    let have = pkg.get("version").and_then(Value::as_str).unwrap_or("");
    if let Some(want) = &spec.version
        && have != want
    {
        return Err(DockerError::Work(format!(
            "{} in {} is version '{have}', the pin is {want}: install the pinned CLI first (`aicli install {}`)",
            spec.package,
            spec.npm_dir.display(),
            spec.provider
        )));
    }
    let bin_rel = bin_entry(&pkg, &spec.binary_name).ok_or_else(|| {
        DockerError::Work(format!(
            "{} has no executable '{}' in its package.json",
            spec.package, spec.binary_name
        ))
    })?;
    Ok((have.to_owned(), bin_rel))
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

/// The runtime layer on `spec.base` (pulled when absent and a registry answers): node,
/// git and the user `aicli`; reused when already built. Returns its tag.
pub async fn runtime_image(
    docker: &Docker,
    spec: &RuntimeSpec,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String, DockerError> {
    ensure_base(docker, &spec.base, progress).await?;
    let base_id = docker
        .inspect_image(&spec.base)
        .await
        .ok()
        .and_then(|i| i.id)
        .unwrap_or_default();
    let probe = probe(
        docker,
        &spec.base,
        "command -v node >/dev/null 2>&1 && echo node=$(node --version); command -v git >/dev/null 2>&1 && echo git=yes; test -f /var/lib/dpkg/status && echo dpkg=yes; true",
    )
    .await?;
    let base_node = probe
        .lines()
        .find_map(|l| l.strip_prefix("node="))
        .map(str::to_owned);
    let need_node = base_node
        .as_deref()
        .is_none_or(|v| host::node_major(v) < MIN_NODE_MAJOR);
    let need_git = !probe.lines().any(|l| l == "git=yes");
    let host_node = if need_node {
        Some(host::find_node(&spec.search_path).await?)
    } else {
        None
    };
    let node_version = match &host_node {
        Some((_, v)) => v.clone(),
        None => base_node.unwrap_or_default(),
    };
    let tag = format!(
        "aicli/runtime:{}-node{}",
        short(&base_id),
        node_version.trim_start_matches('v')
    );
    if docker.inspect_image(&tag).await.is_ok() {
        progress(&format!("runtime layer {tag} is there"));
        return Ok(tag);
    }
    let debs = if need_git {
        if !probe.lines().any(|l| l == "dpkg=yes") {
            return Err(DockerError::Work(format!(
                "base image {} has no git and no dpkg to install Debian's git into; use a base with git",
                spec.base
            )));
        }
        progress("downloading Debian's git for the base (apt-get --download-only)");
        host::download_debs(docker, spec, &base_id, &["git"]).await?
    } else {
        Vec::new()
    };
    progress(&format!(
        "building {tag} from {} ({}{})",
        spec.base,
        if host_node.is_some() {
            format!("node {node_version} from this machine")
        } else {
            format!("its node {node_version}")
        },
        if need_git {
            format!(", git from {} Debian packages", debs.len())
        } else {
            ", its git".to_owned()
        }
    ));
    let node_path = host_node.map(|(p, _)| p);
    let debs2 = debs.clone();
    let files = move |w: &mut TarWriter| -> std::io::Result<()> {
        if let Some(node) = &node_path {
            w.dir("usr/local/bin", 0o755)?;
            w.copy_file(node, "usr/local/bin/node", 0o755)?;
        }
        w.dir("tmp/aicli-debs", 0o755)?;
        for d in &debs2 {
            let name = d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            w.copy_file(d, &format!("tmp/aicli-debs/{name}"), 0o644)?;
        }
        Ok(())
    };
    let script = format!(
        r#"set -e
if ls /tmp/aicli-debs/*.deb >/dev/null 2>&1; then dpkg -i /tmp/aicli-debs/*.deb >/dev/null; fi
rm -rf /tmp/aicli-debs /var/cache/apt/archives/*.deb
if ! grep -q '^[^:]*:[^:]*:{id}:' /etc/passwd; then
  if command -v useradd >/dev/null 2>&1; then useradd -u {id} -U -d /home/aicli -s /bin/sh aicli
  else echo 'aicli:x:{id}:{id}::/home/aicli:/bin/sh' >>/etc/passwd; echo 'aicli:x:{id}:' >>/etc/group; fi
fi
mkdir -p /home/aicli /workspace /aicli
chown {id}:{id} /home/aicli /workspace /aicli
node --version
git --version
"#,
        id = USER_ID
    );
    let labels = HashMap::from([(LABEL_BASE.to_owned(), spec.base.clone())]);
    let path = DEFAULT_PATH.to_owned();
    layer(
        docker,
        &Layer {
            from: spec.base.clone(),
            tag: tag.clone(),
            path,
            script,
            labels,
        },
        files,
    )
    .await?;
    Ok(tag)
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

fn read_package(dir: &Path) -> Result<Value, DockerError> {
    let file = dir.join("package.json");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        DockerError::Work(format!(
            "{} is not in aicli's npm cache ({e}); install the pinned CLIs first (`aicli install PROVIDER`)",
            file.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| DockerError::Work(format!("{} is not valid JSON: {e}", file.display())))
}

/// The package's executable `name` (its `bin` entry), relative to the package.
fn bin_entry(pkg: &Value, name: &str) -> Option<String> {
    match pkg.get("bin")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get(name).and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
    .map(|s| s.trim_start_matches("./").to_owned())
}

/// `package` and every package it needs that is installed in `modules` (dependencies
/// and the optional ones present: a CLI's native binary for this platform).
fn closure(modules: &Path, package: &str) -> Result<Vec<String>, DockerError> {
    let mut out = BTreeSet::new();
    let mut todo = vec![package.to_owned()];
    while let Some(p) = todo.pop() {
        if !out.insert(p.clone()) {
            continue;
        }
        let pkg = read_package(&modules.join(&p))?;
        for key in ["dependencies", "optionalDependencies"] {
            if let Some(Value::Object(deps)) = pkg.get(key) {
                for name in deps.keys() {
                    let present = modules.join(name).join("package.json").is_file();
                    if present && !out.contains(name) {
                        todo.push(name.clone());
                    } else if !present && key == "dependencies" {
                        return Err(DockerError::Work(format!(
                            "{p} needs {name}, which is not in {}",
                            modules.display()
                        )));
                    }
                }
            }
        }
    }
    Ok(out.into_iter().collect())
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
mod tests {
    use super::*;

    #[test]
    fn the_version_line_is_found_among_warnings() {
        let out = "codex-cli 0.171.0\nWARNING: failed to clean up stale arg0 temp dirs: Cross-device link (os error 18)\n";
        assert_eq!(version_line(out), "codex-cli 0.171.0");
        assert_eq!(
            version_line("2.1.332 (Claude Code)\n"),
            "2.1.332 (Claude Code)"
        );
        assert_eq!(version_line("no version here\n"), "no version here");
        assert_eq!(version_line(""), "");
    }

    #[test]
    fn the_closure_takes_dependencies_and_present_optional_ones() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path();
        let pkg = |name: &str, json: &str| {
            std::fs::create_dir_all(m.join(name)).unwrap();
            std::fs::write(m.join(name).join("package.json"), json).unwrap();
        };
        pkg(
            "@acme/cli",
            r#"{"version":"1.0.0","bin":{"acme":"bin/acme.js"},"dependencies":{"dep":"1"},"optionalDependencies":{"@acme/cli-linux-x64":"1","@acme/cli-darwin-arm64":"1"}}"#,
        );
        pkg("dep", r#"{"dependencies":{"leaf":"1"}}"#);
        pkg("leaf", "{}");
        pkg("@acme/cli-linux-x64", "{}");
        assert_eq!(
            closure(m, "@acme/cli").unwrap(),
            ["@acme/cli", "@acme/cli-linux-x64", "dep", "leaf"]
        );
        let p = read_package(&m.join("@acme/cli")).unwrap();
        assert_eq!(bin_entry(&p, "acme").as_deref(), Some("bin/acme.js"));
        assert_eq!(bin_entry(&p, "other"), None);
        pkg("broken", r#"{"dependencies":{"missing":"1"}}"#);
        assert!(
            closure(m, "broken")
                .unwrap_err()
                .to_string()
                .contains("broken needs missing")
        );
        assert_eq!(host::node_major("v20.20.2"), 20);
        assert_eq!(host::node_major("garbage"), 0);
    }
}
