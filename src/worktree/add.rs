//! Making a task's worktree ([`Repo::add_worktree`]), or making it again on the branch
//! a killed or interrupted run left.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::fast::Way;
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
        let mut base = if is_full_oid(base) {
            // Already resolved (a batch resolves its base once); `worktree add` fails
            // on an object that is not a commit.
            base.to_owned()
        } else {
            self.resolve(base).await?
        };
        if let Some(parent) = path.parent() {
            create_private_dirs(parent).map_err(|e| WorktreeError::Git {
                args: "worktree add".into(),
                dir: parent.to_path_buf(),
                stderr: e.to_string(),
            })?;
        }
        let made = match Way::of(self).await {
            // The usual layout: aicli writes what `worktree add` would, beside other tasks.
            Way::Fast(layout) => {
                let lock = repo_lock(&self.root);
                let _shared = lock.read().await;
                self.add_unlocked(&layout, branch, path, &base).await
            }
            Way::Git { post_checkout_hook } => {
                self.add_with_git(branch, path, &base, post_checkout_hook)
                    .await
            }
        };
        if let Err(e) = made {
            if !self.branch_exists(branch).await {
                return Err(e);
            }
            if let Some(recorded) = self.recorded_base(path).await {
                base = recorded;
            }
            self.add_on_existing_branch(branch, path).await?;
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

    /// `git worktree add -b`, under the repository's lock. The files are checked out
    /// after the lock is released (the worktree's metadata is whole by then), except with
    /// a post-checkout hook, which only `worktree add` itself runs as it should. git
    /// refuses, changing nothing, when the branch exists.
    async fn add_with_git(
        &self,
        branch: &str,
        path: &Path,
        base: &str,
        post_checkout_hook: bool,
    ) -> Result<(), WorktreeError> {
        let p = path.display().to_string();
        let later = !post_checkout_hook;
        let mut args = vec!["worktree", "add", "--quiet"];
        if later {
            args.push("--no-checkout");
        }
        args.extend(["-b", branch, &p, base]);
        {
            let lock = repo_lock(&self.root);
            let _guard = lock.write().await;
            git(&self.root, &args).await?;
        }
        if later {
            git(
                path,
                &["reset", "--hard", "--quiet", "--no-recurse-submodules"],
            )
            .await?;
        }
        Ok(())
    }

    /// Whether `refs/heads/<branch>` exists.
    async fn branch_exists(&self, branch: &str) -> bool {
        let r = format!("refs/heads/{branch}");
        git(&self.root, &["show-ref", "--verify", "--quiet", &r])
            .await
            .is_ok()
    }

    /// The worktree at `path` on the existing `branch`, with its work: made again, unless
    /// it is already there (made before aicli died).
    async fn add_on_existing_branch(&self, branch: &str, path: &Path) -> Result<(), WorktreeError> {
        let there = path.join(".git").exists()
            && git(path, &["rev-parse", "--abbrev-ref", "HEAD"])
                .await
                .ok()
                .as_deref()
                == Some(branch);
        if !there {
            let p = path.display().to_string();
            let lock = repo_lock(&self.root);
            let _guard = lock.write().await;
            git(&self.root, &["worktree", "prune"]).await?;
            git(&self.root, &["worktree", "add", "--quiet", &p, branch]).await?;
        }
        Ok(())
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

/// Whether `rev` is a full object name (SHA-1 or SHA-256 hex), which needs no resolving.
fn is_full_oid(rev: &str) -> bool {
    matches!(rev.len(), 40 | 64) && rev.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
