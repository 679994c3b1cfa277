//! A remote engine shares no filesystem with aicli: the run's files go up as a tar
//! through the Engine API, and the work comes back as a git bundle.
//!
//! Up: one tar, extracted at `/`, holding `workspace/` (the worktree's files as they are,
//! uncommitted changes included, plus a one-commit shallow clone of its branch as
//! `.git`), `aicli/` (the run's private directory), `home/aicli/` (the task's home) and
//! `aicli-runner/` (the wrapper that runs the CLI and packs the work, and the start
//! commit). Every entry belongs to the container's user.
//!
//! Back: when the CLI exits (or is stopped with SIGTERM) the wrapper commits the
//! worktree as the run left it to `refs/aicli/worktree` (a commit whose parent is HEAD,
//! never on a branch) and writes `git bundle create work.bundle ^START refs/aicli/worktree`.
//! aicli downloads the bundle and the task's home, fetches the bundle into the task's
//! repository, moves the task's branch to the snapshot's parent (the agent's HEAD) and
//! restores the working tree from the snapshot: the worktree ends exactly as a local run would leave it (the
//! agent's commits on the branch, its other changes uncommitted; files git ignores stay
//! behind).

use std::io::Read;
use std::path::{Path, PathBuf};

use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;

use super::DockerError;
use super::handle::Container;
use super::tarball::{self, TarWriter};
use crate::worktree::git;

/// Where the wrapper and its files live in the container.
pub const RUNNER_DIR: &str = "/aicli-runner";
/// The wrapper the container runs (`sh RUN_SCRIPT CLI ARGS…`).
pub const RUN_SCRIPT: &str = "/aicli-runner/run.sh";
/// Largest bundle or home brought back, bytes.
pub const MAX_DOWNLOAD: u64 = 2 * 1024 * 1024 * 1024;

const RUN_SH: &str = r#"#!/bin/sh
# aicli on a remote engine: run the CLI (stdin passed on), then pack the work.
exec 3<&0
"$@" 0<&3 3<&- &
cli=$!
exec 0</dev/null 3<&-
trap 'kill -TERM "$cli" 2>/dev/null' TERM INT HUP
status=0
while :; do
  wait "$cli"
  status=$?
  kill -0 "$cli" 2>/dev/null || break
done
trap '' TERM INT HUP
sh /aicli-runner/collect.sh >/aicli-runner/collect.log 2>&1
exit "$status"
"#;

const COLLECT_SH: &str = r#"#!/bin/sh
# Commits the worktree as the run left it (on refs/aicli/worktree, on top of HEAD) and
# bundles everything since the start commit.
set -e
cd /workspace
g() { git -c safe.directory='*' -c core.hooksPath=/dev/null "$@"; }
export GIT_AUTHOR_NAME=aicli GIT_AUTHOR_EMAIL=aicli@localhost
export GIT_COMMITTER_NAME=aicli GIT_COMMITTER_EMAIL=aicli@localhost
base=$(cat /aicli-runner/base)
rm -f /aicli-runner/index /aicli-runner/work.bundle
GIT_INDEX_FILE=/aicli-runner/index g read-tree HEAD
GIT_INDEX_FILE=/aicli-runner/index g add -A .
tree=$(GIT_INDEX_FILE=/aicli-runner/index g write-tree)
snap=$(g commit-tree "$tree" -p HEAD -m "aicli: the worktree as the run left it")
g update-ref refs/aicli/worktree "$snap"
g bundle create /aicli-runner/work.bundle "^$base" refs/aicli/worktree
"#;

/// What goes up.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The task's worktree.
    pub workspace: PathBuf,
    /// The run's private directory (may not exist).
    pub private_dir: PathBuf,
    /// The task's home.
    pub task_home: PathBuf,
    /// Owner of every entry in the container.
    pub uid: u64,
    /// Group of every entry.
    pub gid: u64,
}

/// Uploads the run's files into the created container; returns the start commit.
pub async fn upload(c: &Container, up: &Upload, scratch: &Path) -> Result<String, DockerError> {
    let (base, clone) = stage(up, scratch).await?;
    let (up2, base2, clone2) = (up.clone(), base.clone(), clone.clone());
    tarball::upload(
        &c.docker,
        &c.id,
        (up.uid, up.gid),
        "the workspace",
        move |w| write_tar(w, &up2, &clone2, &base2),
    )
    .await?;
    let _ = std::fs::remove_dir_all(&clone);
    Ok(base)
}

/// Makes what the run's tar holds besides this machine's files, under `scratch`: a
/// one-commit clone of the worktree's HEAD (`scratch/clone`). Returns the start commit
/// and the clone.
pub async fn stage(up: &Upload, scratch: &Path) -> Result<(String, PathBuf), DockerError> {
    let base = git(&up.workspace, &["rev-parse", "HEAD"])
        .await
        .map_err(|e| DockerError::Work(format!("cannot read the worktree's HEAD: {e}")))?;
    // A one-commit clone of HEAD: what the container's git needs to diff, commit and
    // bundle against (the worktree's own .git is a pointer into this machine's repo).
    let clone = scratch.join("clone");
    let _ = std::fs::remove_dir_all(&clone);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(scratch)
            .map_err(|e| DockerError::Work(format!("cannot create {}: {e}", scratch.display())))?;
    }
    let url = format!("file://{}", up.workspace.display());
    let clone_s = clone.display().to_string();
    let parent = scratch.to_path_buf();
    git(
        &parent,
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            "--depth",
            "1",
            "--no-tags",
            // The repository's pack-objects with no delta search over big files: a
            // 200 MB commit of 10 MB blobs took 88 s to clone with it, 8 s without.
            "--upload-pack",
            "git -c core.bigFileThreshold=1m upload-pack",
            &url,
            &clone_s,
        ],
    )
    .await
    .map_err(|e| DockerError::Work(format!("cannot clone the worktree for upload: {e}")))?;
    // The clone's HEAD is the worktree's (a detached HEAD is cloned as it is).
    git(&clone, &["read-tree", "HEAD"])
        .await
        .map_err(|e| DockerError::Work(e.to_string()))?;
    let _ = git(&clone, &["remote", "remove", "origin"]).await;
    Ok((base, clone))
}

/// The run's tar, extracted at `/` where it runs: `workspace/` (with `clone`'s `.git`),
/// `aicli/`, `home/aicli/` and `aicli-runner/` (see the module docs).
pub fn write_tar(w: &mut TarWriter, up: &Upload, clone: &Path, base: &str) -> std::io::Result<()> {
    w.dir("workspace", 0o755)?;
    // aicli's own directory stays here (a run in the repository itself): brought back,
    // an old copy of it would overwrite the live records.
    w.tree(&up.workspace, "workspace", &|rel| {
        rel == Path::new(".git") || rel == Path::new(crate::worktree::STATE_DIR)
    })?;
    // Every directory is an entry of its own (an implied parent would be root's, and
    // git refuses a repository its user does not own).
    w.dir("workspace/.git", 0o755)?;
    w.tree(&clone.join(".git"), "workspace/.git", &|_| false)?;
    w.dir("aicli-runner", 0o700)?;
    write_run_files(w, up, base)
}

/// What a run needs besides its workspace: `aicli/` (the private directory),
/// `home/aicli/` (the task's home), and the wrapper's files in `aicli-runner/` (whose own
/// entry is the caller's: a swarm job's is a tmpfs that exists already).
pub fn write_run_files(w: &mut TarWriter, up: &Upload, base: &str) -> std::io::Result<()> {
    w.dir("aicli", 0o700)?;
    if up.private_dir.is_dir() {
        w.tree(&up.private_dir, "aicli", &|_| false)?;
    }
    w.dir("home/aicli", 0o700)?;
    if up.task_home.is_dir() {
        w.tree(&up.task_home, "home/aicli", &|_| false)?;
    }
    w.file("aicli-runner/run.sh", RUN_SH.as_bytes(), 0o755)?;
    w.file("aicli-runner/collect.sh", COLLECT_SH.as_bytes(), 0o755)?;
    w.file("aicli-runner/base", format!("{base}\n").as_bytes(), 0o644)
}

/// Downloads `path` of the container (a file or a directory, as the Engine API tars it)
/// and unpacks it under `into`, refusing more than [`MAX_DOWNLOAD`] bytes.
pub async fn download(c: &Container, path: &str, into: &Path) -> Result<(), DockerError> {
    let stream = c.docker.download_from_container(
        &c.id,
        Some(DownloadFromContainerOptions {
            path: path.to_owned(),
        }),
    );
    let stream = stream.map(|r| r.map_err(std::io::Error::other));
    let reader = tokio_util::io::StreamReader::new(Box::pin(stream));
    let limited = tokio::io::AsyncReadExt::take(reader, MAX_DOWNLOAD + 1);
    let bridge = tokio_util::io::SyncIoBridge::new(limited);
    let into = into.to_path_buf();
    let what = format!("{path} of container {}", c.id);
    let what2 = what.clone();
    tokio::task::spawn_blocking(move || -> Result<(), DockerError> {
        std::fs::create_dir_all(&into).map_err(|e| DockerError::Work(e.to_string()))?;
        let counted = Counted {
            inner: bridge,
            n: 0,
        };
        let (r, counted) = unpack(counted, &into);
        let n = counted.n;
        if n > MAX_DOWNLOAD {
            return Err(DockerError::Work(format!(
                "{what2} is larger than {MAX_DOWNLOAD} bytes; not brought back"
            )));
        }
        r.map_err(|e| DockerError::Api {
            what: format!("downloading {what2}"),
            message: e.to_string(),
        })
    })
    .await
    .map_err(|e| DockerError::Work(format!("downloading {what}: {e}")))?
}

/// Unpacks the tar read from `r` under `into` as the work that comes back is unpacked:
/// modes kept, files overwritten. Returns the reader too (what it counted).
pub fn unpack<R: Read>(r: R, into: &Path) -> (std::io::Result<()>, R) {
    let mut archive = tar::Archive::new(r);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let unpacked = archive.unpack(into);
    (unpacked, archive.into_inner())
}

struct Counted<R> {
    inner: R,
    n: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n += k as u64;
        Ok(k)
    }
}

/// Brings a stopped remote container's work back: the task's home (replacing the local
/// copy) and the bundle, fetched into `workspace`'s repository (see the module docs).
/// `scratch` holds the downloads until they are applied. Returns whether a bundle was
/// applied (`false`: the run left none, e.g. it was killed before packing).
pub async fn bring_back(
    c: &Container,
    workspace: Option<&Path>,
    task_home: Option<&Path>,
    scratch: &Path,
    tag: &str,
) -> Result<bool, DockerError> {
    let _ = std::fs::remove_dir_all(scratch);
    if let Some(home) = task_home {
        let got = scratch.join("home");
        download(c, "/home/aicli", &got).await?;
        replace_home(&got.join("aicli"), home, scratch)?;
    }
    let Some(ws) = workspace.filter(|w| w.is_dir()) else {
        return Ok(false);
    };
    let got = scratch.join("runner");
    let bundle_path = format!("{RUNNER_DIR}/work.bundle");
    if c.docker
        .get_container_archive_info(
            &c.id,
            Some(bollard::query_parameters::ContainerArchiveInfoOptions {
                path: bundle_path.clone(),
            }),
        )
        .await
        .is_err()
    {
        // The run left no bundle (killed before it could pack its work).
        return Ok(false);
    }
    download(c, &bundle_path, &got).await?;
    let bundle = got.join("work.bundle");
    if !bundle.is_file() {
        return Ok(false);
    }
    apply_bundle(ws, &bundle, tag).await?;
    let _ = std::fs::remove_dir_all(scratch);
    Ok(true)
}

/// Puts `fresh` (the task's home as the run left it, unpacked under `scratch`) in the
/// place of `home`; nothing when the run sent none.
pub fn replace_home(fresh: &Path, home: &Path, scratch: &Path) -> Result<(), DockerError> {
    if !fresh.is_dir() {
        return Ok(());
    }
    let old = scratch.join("home-old");
    if home.exists() {
        std::fs::rename(home, &old)
            .map_err(|e| DockerError::Work(format!("cannot replace {}: {e}", home.display())))?;
    }
    std::fs::rename(fresh, home).map_err(|e| {
        DockerError::Work(format!(
            "cannot put the task's home at {}: {e}",
            home.display()
        ))
    })?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Fetches `bundle` into `ws`'s repository, moves the checked-out branch to the agent's
/// HEAD (the parent of its `refs/aicli/worktree` snapshot) and restores the working tree
/// from the snapshot.
pub async fn apply_bundle(ws: &Path, bundle: &Path, tag: &str) -> Result<(), DockerError> {
    let b = bundle.display().to_string();
    let snap_ref = format!("refs/aicli/incoming/{tag}");
    let fail = |what: &str, e: crate::worktree::WorktreeError| {
        DockerError::Work(format!("{what} (the bundle is kept at {b}): {e}"))
    };
    let root = git(
        ws,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .await
    .map_err(|e| fail("cannot find the repository", e))?;
    {
        let lock = crate::worktree::repo_lock(Path::new(&root));
        let _guard = lock.write().await;
        git(
            ws,
            &[
                "fetch",
                "--quiet",
                "--no-tags",
                &b,
                &format!("+refs/aicli/worktree:{snap_ref}"),
            ],
        )
        .await
        .map_err(|e| fail("cannot fetch the work back", e))?;
    }
    git(ws, &["reset", "--quiet", "--hard", &format!("{snap_ref}^")])
        .await
        .map_err(|e| fail("cannot move the branch to the work", e))?;
    git(
        ws,
        &[
            "restore",
            &format!("--source={snap_ref}"),
            "--worktree",
            "--",
            ".",
        ],
    )
    .await
    .map_err(|e| fail("cannot restore the uncommitted work", e))?;
    let _ = git(ws, &["update-ref", "-d", &snap_ref]).await;
    Ok(())
}
