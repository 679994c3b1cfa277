//! Cleanup that never destroys work: whether a worktree holds work
//! ([`Repo::holds_work`]), removing one that holds none ([`Repo::cleanup`]), and listing
//! and pruning every aicli worktree ([`Repo::list`], [`Repo::prune`]).

use std::path::PathBuf;

use super::{
    BRANCH_PREFIX, Cleanup, Repo, Worktree, WorktreeError, WorktreeInfo, base_file, git,
    lock_worktree, repo_lock,
};

impl Repo {
    /// Why a worktree must be kept, or `None` when it holds no work.
    pub async fn holds_work(&self, wt: &Worktree) -> Result<Option<String>, WorktreeError> {
        if wt.path.is_dir() {
            let status = git(
                &wt.path,
                &["status", "--porcelain", "--untracked-files=all"],
            )
            .await?;
            let dirty = status.lines().filter(|l| !l.trim().is_empty()).count();
            if dirty > 0 {
                return Ok(Some(crate::util::count(
                    dirty as u64,
                    "uncommitted change",
                    "uncommitted changes",
                )));
            }
            // Commits on the worktree's HEAD itself (a detached HEAD, or another branch
            // checked out there) that no branch, tag or remote holds.
            let count = git(
                &wt.path,
                &[
                    "rev-list",
                    "--count",
                    "HEAD",
                    "--not",
                    &wt.base,
                    "--branches",
                    "--tags",
                    "--remotes",
                ],
            )
            .await?;
            let n: u64 = count.trim().parse().unwrap_or(0);
            if n > 0 {
                return Ok(Some(format!(
                    "{} on the worktree's HEAD that no branch holds",
                    crate::util::count(n, "commit", "commits")
                )));
            }
        }
        // Commits on the branch that neither the base nor any other branch holds.
        let exclude = format!("--exclude={}", wt.branch);
        let count = git(
            &self.root,
            &[
                "rev-list",
                "--count",
                &format!("refs/heads/{}", wt.branch),
                "--not",
                &wt.base,
                &exclude,
                "--branches",
            ],
        )
        .await?;
        let n: u64 = count.trim().parse().unwrap_or(0);
        if n > 0 {
            return Ok(Some(format!("{n} commits not on any other branch")));
        }
        Ok(None)
    }

    /// Removes `wt` and its branch when it holds no work; keeps it otherwise.
    pub async fn cleanup(&self, wt: &Worktree) -> Result<Cleanup, WorktreeError> {
        if let Some(reason) = self.holds_work(wt).await? {
            return Ok(Cleanup::Kept { reason });
        }
        let p = wt.path.display().to_string();
        let lock = repo_lock(&self.root);
        let _guard = lock.lock().await;
        if wt.path.exists() {
            // Not --force: git refuses to remove a dirty worktree, a second safety net.
            git(&self.root, &["worktree", "remove", &p]).await?;
        } else {
            git(&self.root, &["worktree", "prune"]).await?;
        }
        git(&self.root, &["branch", "-D", &wt.branch]).await?;
        // Empty batch directories go too.
        if let Some(parent) = wt.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        Ok(Cleanup::Removed)
    }

    /// Every worktree on an `aicli/` branch, with whether it holds work.
    pub async fn list(&self) -> Result<Vec<WorktreeInfo>, WorktreeError> {
        let text = git(&self.root, &["worktree", "list", "--porcelain"]).await?;
        let mut out = Vec::new();
        for block in text.split("\n\n") {
            let mut path = None;
            let mut head = String::new();
            let mut branch = None;
            for line in block.lines() {
                if let Some(p) = line.strip_prefix("worktree ") {
                    path = Some(PathBuf::from(p));
                } else if let Some(h) = line.strip_prefix("HEAD ") {
                    head = h.to_owned();
                } else if let Some(b) = line.strip_prefix("branch refs/heads/") {
                    branch = Some(b.to_owned());
                }
            }
            let (Some(path), Some(branch)) = (path, branch) else {
                continue;
            };
            if !branch.starts_with(BRANCH_PREFIX) {
                continue;
            }
            let base = match base_file(&path).await {
                Some(f) => std::fs::read_to_string(f).ok().map(|s| s.trim().to_owned()),
                None => None,
            };
            let holds_work = match &base {
                Some(b) => self
                    .holds_work(&Worktree {
                        path: path.clone(),
                        branch: branch.clone(),
                        base: b.clone(),
                    })
                    .await
                    .unwrap_or_else(|e| Some(format!("cannot tell: {e}"))),
                None => Some("no recorded base commit".to_owned()),
            };
            out.push(WorktreeInfo {
                path,
                branch,
                head,
                base,
                holds_work,
            });
        }
        Ok(out)
    }

    /// Removes every aicli worktree that holds no work; returns what it did with each.
    #[cfg(feature = "test-helpers")]
    pub async fn prune(&self) -> Result<Vec<(WorktreeInfo, Cleanup)>, WorktreeError> {
        self.prune_keeping(&std::collections::BTreeMap::new()).await
    }

    /// [`Repo::prune`], keeping the worktrees in `keep` (path -> why), e.g. those of
    /// tasks that are blocked on a question or were interrupted: their sessions resume
    /// there.
    pub async fn prune_keeping(
        &self,
        keep: &std::collections::BTreeMap<PathBuf, String>,
    ) -> Result<Vec<(WorktreeInfo, Cleanup)>, WorktreeError> {
        let mut out = Vec::new();
        for info in self.list().await? {
            let canonical = info
                .path
                .canonicalize()
                .unwrap_or_else(|_| info.path.clone());
            if let Some(reason) = keep.get(&canonical).or_else(|| keep.get(&info.path)) {
                out.push((
                    info,
                    Cleanup::Kept {
                        reason: reason.clone(),
                    },
                ));
                continue;
            }
            // A worktree a running task holds is not touched.
            let Some(_hold) = lock_worktree(&info.path).await else {
                out.push((
                    info,
                    Cleanup::Kept {
                        reason: "in use by a running aicli task".to_owned(),
                    },
                ));
                continue;
            };
            let outcome = match (&info.base, &info.holds_work) {
                (Some(base), None) => {
                    self.cleanup(&Worktree {
                        path: info.path.clone(),
                        branch: info.branch.clone(),
                        base: base.clone(),
                    })
                    .await?
                }
                (_, Some(reason)) => Cleanup::Kept {
                    reason: reason.clone(),
                },
                (None, None) => Cleanup::Kept {
                    reason: "no recorded base commit".to_owned(),
                },
            };
            out.push((info, outcome));
        }
        let lock = repo_lock(&self.root);
        let _guard = lock.lock().await;
        let _ = git(&self.root, &["worktree", "prune"]).await;
        Ok(out)
    }
}
