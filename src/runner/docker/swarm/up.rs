//! What a swarm job fetches: the start commit (and the uncommitted carry) as a git
//! bundle, and the rest of the run's files as a tar.
//!
//! - `start.bundle` holds `refs/aicli/start`, the worktree's HEAD, made from a one-commit
//!   clone of it: the job fetches it into an empty repository that lists that commit as
//!   its shallow boundary, so the branch's history never travels. When the worktree has
//!   changes HEAD does not hold, `refs/aicli/carry` is a commit on top of HEAD with the
//!   worktree's files as they are (what git ignores, and aicli's own `.aicli`, stay
//!   behind): the job restores them uncommitted.
//! - `files.tar` holds the run's private directory, the task's home and the packing
//!   wrapper's files ([`remote::write_run_files`]).

use std::path::{Path, PathBuf};

use super::super::tarball::TarWriter;
use super::super::{DockerError, remote};
use crate::worktree::{git, git_with_input};

/// The staged files of one attempt.
#[derive(Debug)]
pub struct Staged {
    /// The git bundle.
    pub bundle: PathBuf,
    /// The tar.
    pub files: PathBuf,
    /// The start commit.
    pub base: String,
    /// Whether the bundle holds an uncommitted carry.
    pub carry: bool,
}

fn work(what: &str) -> impl Fn(crate::worktree::WorktreeError) -> DockerError + '_ {
    move |e| DockerError::Work(format!("{what}: {e}"))
}

/// Writes the attempt's bundle and tar into `scratch` (a directory of its own).
pub async fn stage(up: &remote::Upload, scratch: &Path) -> Result<Staged, DockerError> {
    let (base, clone) = remote::stage(up, scratch).await?;
    let index = scratch.join("carry.index");
    let (ws, ix) = (
        up.workspace.display().to_string(),
        index.display().to_string(),
    );
    let env = [
        ("GIT_WORK_TREE", ws.as_str()),
        ("GIT_INDEX_FILE", ix.as_str()),
        ("GIT_AUTHOR_NAME", "aicli"),
        ("GIT_AUTHOR_EMAIL", "aicli@localhost"),
        ("GIT_COMMITTER_NAME", "aicli"),
        ("GIT_COMMITTER_EMAIL", "aicli@localhost"),
    ];
    let run = |args: &'static [&'static str]| {
        let (clone, env) = (clone.clone(), env);
        async move {
            git_with_input(&clone, args, &env, b"", &[0])
                .await
                .map(|(_, out)| String::from_utf8_lossy(&out).trim().to_owned())
        }
    };
    let fail = work("cannot take the worktree's uncommitted changes");
    run(&["read-tree", "HEAD"]).await.map_err(&fail)?;
    // Not aicli's own directory (a run in the repository itself): brought back, an old
    // copy of it would overwrite the live records.
    run(&["add", "-A", "--", ":/", ":(top,exclude).aicli"])
        .await
        .map_err(&fail)?;
    let tree = run(&["write-tree"]).await.map_err(&fail)?;
    let head_tree = git(&clone, &["rev-parse", "HEAD^{tree}"]).await.map_err(&fail)?;
    let _ = std::fs::remove_file(&index);
    let carry = tree != head_tree;
    git(&clone, &["update-ref", "refs/aicli/start", &base])
        .await
        .map_err(&fail)?;
    if carry {
        let (_, snap) = git_with_input(
            &clone,
            &["commit-tree", &tree, "-p", &base, "-m", "aicli: the uncommitted carry"],
            &env,
            b"",
            &[0],
        )
        .await
        .map_err(&fail)?;
        let snap = String::from_utf8_lossy(&snap).trim().to_owned();
        git(&clone, &["update-ref", "refs/aicli/carry", &snap])
            .await
            .map_err(&fail)?;
    }
    let bundle = scratch.join("start.bundle");
    let b = bundle.display().to_string();
    let mut args = vec!["bundle", "create", "--quiet", b.as_str(), "refs/aicli/start"];
    if carry {
        args.push("refs/aicli/carry");
    }
    git(&clone, &args)
        .await
        .map_err(work("cannot bundle the start commit"))?;
    let _ = std::fs::remove_dir_all(&clone);
    let files = scratch.join("files.tar");
    write_tar(&files, up, &base).await?;
    Ok(Staged {
        bundle,
        files,
        base,
        carry,
    })
}

/// Writes [`remote::write_run_files`]'s tar to `path`.
async fn write_tar(path: &Path, up: &remote::Upload, base: &str) -> Result<(), DockerError> {
    let (mut w, mut rx) = TarWriter::new(up.uid, up.gid);
    let (up2, base2) = (up.clone(), base.to_owned());
    let writer = tokio::task::spawn_blocking(move || {
        remote::write_run_files(&mut w, &up2, &base2)?;
        w.finish()
    });
    let cannot = |e: std::io::Error| DockerError::Work(format!("cannot write {}: {e}", path.display()));
    let mut f = tokio::fs::File::create(path).await.map_err(cannot)?;
    while let Some(chunk) = rx.recv().await {
        let chunk = chunk.map_err(cannot)?;
        tokio::io::AsyncWriteExt::write_all(&mut f, &chunk)
            .await
            .map_err(cannot)?;
    }
    writer
        .await
        .map_err(|e| DockerError::Work(format!("the tar writer failed: {e}")))?
        .map_err(|e| DockerError::Work(format!("cannot pack the run's files: {e}")))
}
