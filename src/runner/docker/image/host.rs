//! What an image takes from this machine: its `node`, and Debian packages downloaded here
//! (with `apt-get --download-only` against the base image's own package list, cached).

use std::path::{Path, PathBuf};

use bollard::Docker;

use super::{MIN_NODE_MAJOR, RuntimeSpec, layer::probe, short};
use crate::runner::docker::DockerError;

/// This machine's `node` on `search_path`, and its version (at least 20).
pub(super) async fn find_node(search_path: &str) -> Result<(PathBuf, String), DockerError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let node = which::which_in("node", Some(search_path), &cwd).map_err(|_| {
        DockerError::Work(
            "the base image has no node (>= 20) and this machine has none on PATH to copy in"
                .to_owned(),
        )
    })?;
    let node = std::fs::canonicalize(&node).unwrap_or(node);
    let out = tokio::process::Command::new(&node)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| DockerError::Work(format!("cannot run {}: {e}", node.display())))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if node_major(&version) < MIN_NODE_MAJOR {
        return Err(DockerError::Work(format!(
            "{} is node {version}; the CLIs need node >= {MIN_NODE_MAJOR}",
            node.display()
        )));
    }
    Ok((node, version))
}

pub(super) fn node_major(v: &str) -> u32 {
    v.trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Debian packages of `wanted` and what they need beyond the base (its dpkg status),
/// downloaded on this machine with apt-get into the cache (reused when present).
pub(super) async fn download_debs(
    docker: &Docker,
    spec: &RuntimeSpec,
    base_id: &str,
    wanted: &[&str],
) -> Result<Vec<PathBuf>, DockerError> {
    let dir = spec.deb_cache.join(short(base_id)).join(wanted.join("+"));
    let archives = dir.join("archives");
    let listed = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "deb"))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let have = listed(&archives);
    if !have.is_empty() && dir.join("complete").is_file() {
        return Ok(have);
    }
    std::fs::create_dir_all(archives.join("partial"))
        .map_err(|e| DockerError::Work(format!("cannot create {}: {e}", archives.display())))?;
    let status = probe(docker, &spec.base, "cat /var/lib/dpkg/status").await?;
    let status_file = dir.join("status");
    std::fs::write(&status_file, status)
        .map_err(|e| DockerError::Work(format!("cannot write {}: {e}", status_file.display())))?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let apt = which::which_in("apt-get", Some(&spec.search_path), &cwd).map_err(|_| {
        DockerError::Work(
            "the base image has no git, and this machine has no apt-get to download Debian's git package"
                .to_owned(),
        )
    })?;
    let out = tokio::process::Command::new(apt)
        .args(["-q", "-y", "--download-only", "--no-install-recommends"])
        .arg("-o")
        .arg(format!("Dir::State::status={}", status_file.display()))
        .arg("-o")
        .arg(format!("Dir::Cache::archives={}", archives.display()))
        .args(["-o", "Debug::NoLocking=1", "install"])
        .args(wanted)
        .stdin(std::process::Stdio::null())
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .await
        .map_err(|e| DockerError::Work(format!("cannot run apt-get: {e}")))?;
    if !out.status.success() {
        return Err(DockerError::Work(format!(
            "apt-get --download-only {} failed: {}",
            wanted.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let _ = std::fs::write(dir.join("complete"), "");
    Ok(listed(&archives))
}
