//! Cleanup that never destroys work: whether a worktree holds work
//! ([`Repo::holds_work`]), removing one that holds none ([`Repo::cleanup`]), and listing
//! and pruning every aicli worktree ([`Repo::list`], [`Repo::prune`]).

use std::path::{Path, PathBuf};

use super::{
    BRANCH_PREFIX, Cleanup, Repo, Worktree, WorktreeError, WorktreeInfo, base_file, git,
    lock_worktree, repo_lock,
};

/// What `git status` says of a worktree: how many changes it holds (untracked files
/// included), and whether its HEAD is still its branch at the base commit.
struct Status {
    dirty: usize,
    unchanged: bool,
}

impl Repo {
    /// Why a worktree must be kept, or `None` when it holds no work.
    pub async fn holds_work(&self, wt: &Worktree) -> Result<Option<String>, WorktreeError> {
        match self.status(wt).await? {
            Some(s) if s.dirty > 0 => Ok(Some(dirty_reason(s.dirty))),
            Some(s) if s.unchanged => Ok(None),
            _ => {
                let lock = repo_lock(&self.root);
                let _guard = lock.write().await;
                self.unshared_commits(wt).await
            }
        }
    }

    /// The worktree's status (`None` when its directory is gone): one `git status` tells
    /// its changes, HEAD's commit and HEAD's branch.
    async fn status(&self, wt: &Worktree) -> Result<Option<Status>, WorktreeError> {
        if !wt.path.is_dir() {
            return Ok(None);
        }
        let out = git(
            &wt.path,
            &[
                "status",
                "--porcelain=v2",
                "--branch",
                "--untracked-files=all",
            ],
        )
        .await?;
        let (mut oid, mut head, mut dirty) = (None, None, 0);
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(h) = line.strip_prefix("# ") {
                if let Some(o) = h.strip_prefix("branch.oid ") {
                    oid = Some(o);
                } else if let Some(b) = h.strip_prefix("branch.head ") {
                    head = Some(b);
                }
            } else {
                dirty += 1;
            }
        }
        Ok(Some(Status {
            dirty,
            unchanged: oid == Some(wt.base.as_str()) && head == Some(wt.branch.as_str()),
        }))
    }

    /// Why the worktree must be kept for commits only it holds, or `None`. Run with the
    /// repository's lock held: `--branches` reads every branch, and another task's
    /// cleanup must not delete one meanwhile ("bad object").
    async fn unshared_commits(&self, wt: &Worktree) -> Result<Option<String>, WorktreeError> {
        if wt.path.is_dir() {
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
            return Ok(Some(format!(
                "{} not on any other branch",
                crate::util::count(n, "commit", "commits")
            )));
        }
        Ok(None)
    }

    /// Removes `wt` and its branch when it holds no work; keeps it otherwise.
    pub async fn cleanup(&self, wt: &Worktree) -> Result<Cleanup, WorktreeError> {
        let unchanged = wt.path.is_dir() && unchanged_on_disk(wt);
        if unchanged && let super::fast::Way::Fast(layout) = super::fast::Way::of(self).await {
            // No commits of its own: `git status` says whether it holds changes, then
            // aicli removes it beside other tasks' removals.
            match self.status(wt).await? {
                Some(s) if s.dirty > 0 => {
                    return Ok(Cleanup::Kept {
                        reason: dirty_reason(s.dirty),
                    });
                }
                Some(s) if s.unchanged => {
                    let lock = repo_lock(&self.root);
                    let _shared = lock.read().await;
                    if self.remove_unlocked(&layout, wt).await? {
                        if let Some(parent) = wt.path.parent() {
                            let _ = std::fs::remove_dir(parent);
                        }
                        return Ok(Cleanup::Removed);
                    }
                }
                _ => {}
            }
        }
        if unchanged {
            // No commits of its own: whether it holds changes is git's check as it
            // removes it (below), no `git status` of ours first.
            let lock = repo_lock(&self.root);
            let _guard = lock.write().await;
            return match self.remove_clean(wt).await {
                Ok(()) => self.delete_branch(wt).await,
                Err(e) => match self.status(wt).await? {
                    Some(s) if s.dirty > 0 => Ok(Cleanup::Kept {
                        reason: dirty_reason(s.dirty),
                    }),
                    _ => Err(e),
                },
            };
        }
        let status = self.status(wt).await?;
        if let Some(s) = &status
            && s.dirty > 0
        {
            return Ok(Cleanup::Kept {
                reason: dirty_reason(s.dirty),
            });
        }
        let lock = repo_lock(&self.root);
        let _guard = lock.write().await;
        if !status.is_some_and(|s| s.unchanged)
            && let Some(reason) = self.unshared_commits(wt).await?
        {
            return Ok(Cleanup::Kept { reason });
        }
        if wt.path.exists() {
            self.remove_clean(wt).await?;
        } else {
            git(&self.root, &["worktree", "prune"]).await?;
        }
        self.delete_branch(wt).await
    }

    /// Removes the worktree at `path` of a task whose work landed, and its branch,
    /// unless the worktree holds changes made since: then why it is kept.
    pub async fn remove_landed(
        &self,
        path: &Path,
        branch: &str,
    ) -> Result<Option<String>, WorktreeError> {
        let wt = Worktree {
            path: path.to_path_buf(),
            branch: branch.to_owned(),
            base: String::new(),
        };
        if let Some(s) = self.status(&wt).await?
            && s.dirty > 0
        {
            return Ok(Some(dirty_reason(s.dirty)));
        }
        let lock = repo_lock(&self.root);
        let _guard = lock.write().await;
        if path.exists() {
            self.remove_clean(&wt).await?;
        } else {
            git(&self.root, &["worktree", "prune"]).await?;
        }
        self.delete_branch(&wt).await?;
        Ok(None)
    }

    /// Removes the worktree at `path` and its branch whatever they hold (`aicli
    /// discard`, after saying what is lost): `worktree remove --force`, `branch -D`.
    pub async fn discard(&self, path: &Path, branch: &str) -> Result<(), WorktreeError> {
        let lock = repo_lock(&self.root);
        let _guard = lock.write().await;
        if path.exists() {
            let p = path.display().to_string();
            git(&self.root, &["worktree", "remove", "--force", "--force", &p]).await?;
        } else {
            git(&self.root, &["worktree", "prune"]).await?;
        }
        let r = format!("refs/heads/{branch}");
        if git(&self.root, &["rev-parse", "--verify", "--quiet", &r]).await.is_ok() {
            git(&self.root, &["branch", "-D", branch]).await?;
        }
        if let Some(parent) = path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        Ok(())
    }

    /// `git worktree remove`, which refuses (and removes nothing) when the worktree has
    /// changes, untracked files included whatever `status.showUntrackedFiles` says. Not
    /// --force: a second safety net where aicli checked first. With the lock held.
    async fn remove_clean(&self, wt: &Worktree) -> Result<(), WorktreeError> {
        let p = wt.path.display().to_string();
        let args = [
            "-c",
            "status.showUntrackedFiles=all",
            "worktree",
            "remove",
            &p,
        ];
        git(&self.root, &args).await.map(drop)
    }

    /// Deletes the branch of a removed worktree, and its batch directory once empty.
    /// With the lock held.
    async fn delete_branch(&self, wt: &Worktree) -> Result<Cleanup, WorktreeError> {
        git(&self.root, &["branch", "-D", &wt.branch]).await?;
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
        let none = std::collections::BTreeMap::new();
        self.prune_keeping(&none, &none).await
    }

    /// [`Repo::prune`], keeping the worktrees in `keep` (path -> why), e.g. those of
    /// tasks that are blocked on a question or were interrupted: their sessions resume
    /// there; and removing those in `landed` (path -> the head that landed) whose branch
    /// is still at that head: their commits are on the branch they landed into, by
    /// whatever means (a squash or a rebase leaves no shared commit), and so hold no
    /// unlanded work.
    pub async fn prune_keeping(
        &self,
        keep: &std::collections::BTreeMap<PathBuf, String>,
        landed: &std::collections::BTreeMap<PathBuf, String>,
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
            if landed.get(&canonical).or_else(|| landed.get(&info.path)) == Some(&info.head) {
                let outcome = match self.remove_landed(&info.path, &info.branch).await? {
                    None => Cleanup::Removed,
                    Some(reason) => Cleanup::Kept { reason },
                };
                out.push((info, outcome));
                continue;
            }
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
        let _guard = lock.write().await;
        let _ = git(&self.root, &["worktree", "prune"]).await;
        Ok(out)
    }
}

fn dirty_reason(n: usize) -> String {
    crate::util::count(n as u64, "uncommitted change", "uncommitted changes")
}

/// Whether the worktree's HEAD is still its branch at the base commit, read from git's
/// files (the worktree's `HEAD`, the branch's loose ref) without running git; `false`
/// when they say otherwise or cannot be read (packed refs, another ref format: git
/// answers then).
fn unchanged_on_disk(wt: &Worktree) -> bool {
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let Some(gitdir) = super::linked_git_dir(&wt.path) else {
        return false;
    };
    if read(gitdir.join("HEAD")).trim() != format!("ref: refs/heads/{}", wt.branch) {
        return false;
    }
    let common = gitdir.join(read(gitdir.join("commondir")).trim());
    read(common.join("refs/heads").join(&wt.branch)).trim() == wt.base
}
