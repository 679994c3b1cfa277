//! Making a task's worktree ([`Repo::add_worktree`]), or making it again on the branch
//! a killed or interrupted run left.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::{Repo, Worktree, WorktreeError, base_file, git, repo_lock};
use crate::util::{PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, create_private_dirs, write_private_file};

impl Repo {
    /// Creates a worktree at `path` on a new branch `branch` from `base`. When the branch
    /// already exists (a worktree whose directory was deleted, or aicli killed right after
    /// making it), the worktree is made again on that branch, with its work, and keeps the
    /// base commit it recorded.
    pub async fn add_worktree(
        &self,
        branch: &str,
        path: &Path,
        base: &str,
    ) -> Result<Worktree, WorktreeError> {
        let mut base = self.resolve(base).await?;
        if let Some(parent) = path.parent() {
            create_private_dirs(parent).map_err(|e| WorktreeError::Git {
                args: "worktree add".into(),
                dir: parent.to_path_buf(),
                stderr: e.to_string(),
            })?;
        }
        let p = path.display().to_string();
        let exists = git(
            &self.root,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
        .await
        .is_ok();
        if exists {
            if let Some(recorded) = self.recorded_base(path).await {
                base = recorded;
            }
            if path.join(".git").exists()
                && git(path, &["rev-parse", "--abbrev-ref", "HEAD"])
                    .await
                    .ok()
                    .as_deref()
                    == Some(branch)
            {
                // Already there (made before aicli died).
            } else {
                let lock = repo_lock(&self.root);
                let _guard = lock.lock().await;
                git(&self.root, &["worktree", "prune"]).await?;
                git(&self.root, &["worktree", "add", "--quiet", &p, branch]).await?;
            }
        } else {
            let lock = repo_lock(&self.root);
            let _guard = lock.lock().await;
            git(
                &self.root,
                &["worktree", "add", "--quiet", "-b", branch, &p, &base],
            )
            .await?;
        }
        // git makes the worktree's directory under the umask: give it an explicit mode.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE)).map_err(
            |e| WorktreeError::Git {
                args: "worktree add (setting the worktree's mode)".into(),
                dir: path.to_path_buf(),
                stderr: e.to_string(),
            },
        )?;
        if let Some(f) = base_file(path).await {
            write_private_file(&f, &format!("{base}\n"), PRIVATE_FILE_MODE).map_err(|e| {
                WorktreeError::Git {
                    args: "worktree add (recording the base commit)".into(),
                    dir: f.clone(),
                    stderr: e.to_string(),
                }
            })?;
        }
        Ok(Worktree {
            path: path.to_path_buf(),
            branch: branch.to_owned(),
            base,
        })
    }

    /// The base commit recorded for the worktree at `path`, if it (or its git dir) is
    /// still there.
    async fn recorded_base(&self, path: &Path) -> Option<String> {
        let f = base_file(path).await?;
        let s = std::fs::read_to_string(f).ok()?;
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_owned())
    }
}
