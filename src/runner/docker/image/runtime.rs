//! The shared runtime layer (`aicli/runtime:<base id>-node<version>`): the base image
//! plus, when it lacks them, this machine's `node` and Debian's git, and the user
//! `aicli`.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::Docker;

use super::layer::{Layer, ensure_base, layer, probe};
use super::{
    DEFAULT_PATH, DockerError, LABEL_BASE, MIN_NODE_MAJOR, TarWriter, USER_ID, host, short,
};

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

/// What the base image has of what the runtime needs.
struct Base {
    /// Its image id.
    id: String,
    /// Its `node --version`, if it has node.
    node: Option<String>,
    /// Its node is missing or too old: this machine's goes in.
    need_node: bool,
    /// It has no git: Debian's goes in.
    need_git: bool,
    /// It has dpkg (to install Debian's git with).
    dpkg: bool,
}

/// The runtime layer on `spec.base` (pulled when absent and a registry answers): node,
/// git and the user `aicli`; reused when already built. Returns its tag.
pub async fn runtime_image(
    docker: &Docker,
    spec: &RuntimeSpec,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String, DockerError> {
    let base = probe_base(docker, spec, progress).await?;
    let host_node = if base.need_node {
        Some(host::find_node(&spec.search_path).await?)
    } else {
        None
    };
    let node_version = match &host_node {
        Some((_, v)) => v.clone(),
        None => base.node.clone().unwrap_or_default(),
    };
    let tag = format!(
        "aicli/runtime:{}-node{}",
        short(&base.id),
        node_version.trim_start_matches('v')
    );
    if docker.inspect_image(&tag).await.is_ok() {
        progress(&format!("runtime layer {tag} is there"));
        return Ok(tag);
    }
    let debs = git_debs(docker, spec, &base, progress).await?;
    progress(&format!(
        "building {tag} from {} ({}{})",
        spec.base,
        if host_node.is_some() {
            format!("node {node_version} from this machine")
        } else {
            format!("its node {node_version}")
        },
        if base.need_git {
            format!(", git from {} Debian packages", debs.len())
        } else {
            ", its git".to_owned()
        }
    ));
    let node_path = host_node.map(|(p, _)| p);
    let files = move |w: &mut TarWriter| -> std::io::Result<()> {
        if let Some(node) = &node_path {
            w.dir("usr/local/bin", 0o755)?;
            w.copy_file(node, "usr/local/bin/node", 0o755)?;
        }
        w.dir("tmp/aicli-debs", 0o755)?;
        for d in &debs {
            let name = d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            w.copy_file(d, &format!("tmp/aicli-debs/{name}"), 0o644)?;
        }
        Ok(())
    };
    let labels = HashMap::from([(LABEL_BASE.to_owned(), spec.base.clone())]);
    let path = DEFAULT_PATH.to_owned();
    layer(
        docker,
        &Layer {
            from: spec.base.clone(),
            tag: tag.clone(),
            path,
            env: Vec::new(),
            script: script(),
            labels,
        },
        files,
    )
    .await?;
    Ok(tag)
}

/// Pulls the base when absent, and asks it what it has.
async fn probe_base(
    docker: &Docker,
    spec: &RuntimeSpec,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Base, DockerError> {
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
    Ok(Base {
        id: base_id,
        node: base_node,
        need_node,
        need_git: !probe.lines().any(|l| l == "git=yes"),
        dpkg: probe.lines().any(|l| l == "dpkg=yes"),
    })
}

/// Debian's git and what it needs, downloaded for the base (none when it has git).
async fn git_debs(
    docker: &Docker,
    spec: &RuntimeSpec,
    base: &Base,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Vec<PathBuf>, DockerError> {
    if !base.need_git {
        return Ok(Vec::new());
    }
    if !base.dpkg {
        return Err(DockerError::Work(format!(
            "base image {} has no git and no dpkg to install Debian's git into; use a base with git",
            spec.base
        )));
    }
    progress("downloading Debian's git for the base (apt-get --download-only)");
    host::download_debs(docker, spec, &base.id, &["git"]).await
}

/// The runtime layer's root script: the debs installed, the user `aicli` made, its
/// directories owned, node and git checked.
fn script() -> String {
    format!(
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
    )
}
