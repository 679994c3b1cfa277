//! Per-task git worktrees, and their safe cleanup.
//!
//! Each task runs in `<repo>/.aicli/worktrees/<batch>/<task>` on a new branch
//! `aicli/<batch>/<task>` made from a base commit (HEAD by default). The base commit is
//! kept in the worktree's private git directory (`.git/worktrees/<name>/aicli-base`) so a
//! later `prune` knows it. Commands that change the repository (add, remove, branch -D)
//! run one at a time per repository: git locks `.git/config` and refs, and parallel
//! tasks would otherwise collide. Cleanup never destroys work: a worktree with uncommitted changes (untracked
//! files included) or with commits that no other branch holds is kept and reported; a
//! clean, unchanged one is removed together with its branch.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::util::{
    PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, create_private_dirs, ensure_private_dir,
    write_private_file,
};

mod placement;

pub use placement::{place_task, task_worktree_path};

/// The branch prefix of every branch aicli makes.
pub const BRANCH_PREFIX: &str = "aicli/";

/// Errors about repositories and worktrees.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The directory is not inside a git repository.
    #[error("not a git repository: {path}; run `git init` or pass --repo")]
    NotARepo {
        /// The directory.
        path: PathBuf,
    },
    /// A git command failed.
    #[error("git {args} failed in {dir}: {stderr}")]
    Git {
        /// The arguments.
        args: String,
        /// Where it ran.
        dir: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// git could not be run at all.
    #[error("cannot run git: {0}; install git")]
    NoGit(#[source] std::io::Error),
}

/// A git repository aicli runs tasks against.
#[derive(Debug, Clone)]
pub struct Repo {
    root: PathBuf,
}

/// A worktree made for a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// Its directory.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
}

/// What cleanup did with a worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Cleanup {
    /// Removed with its branch: it held no work.
    Removed,
    /// Kept because it holds work.
    Kept {
        /// Why, in words (e.g. "2 commits not on any other branch").
        reason: String,
    },
}

/// One aicli worktree as `git worktree list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeInfo {
    /// Its directory.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
    /// Its HEAD commit.
    pub head: String,
    /// The commit it started from, when recorded.
    pub base: Option<String>,
    /// Whether it holds work (and so cleanup keeps it).
    pub holds_work: Option<String>,
}

pub(crate) async fn git(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(WorktreeError::NoGit)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
    } else {
        Err(WorktreeError::Git {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// One lock per repository for commands that change it.
pub(crate) fn repo_lock(root: &Path) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let locks = LOCKS.get_or_init(|| Mutex::new(HashMap::new()));
    match locks.lock() {
        Ok(mut m) => m.entry(root.to_path_buf()).or_default().clone(),
        Err(_) => Arc::new(tokio::sync::Mutex::new(())),
    }
}

/// A hold on a worktree while a task uses it (an `flock` in the worktree's private git
/// directory, released by the kernel if the process dies): `prune` leaves it alone.
#[derive(Debug)]
pub struct WorktreeLock {
    _file: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the worktree's hold; `None` when another process (or another hold of this one)
/// has it, or when the worktree is gone.
pub async fn lock_worktree(path: &Path) -> Option<WorktreeLock> {
    let f = base_file(path).await?.with_file_name("aicli-lock");
    let file = crate::util::open_private_rw(&f).ok()?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .ok()
        .map(|f| WorktreeLock { _file: f })
}

/// The file in a worktree's private git directory that holds its base commit.
async fn base_file(worktree: &Path) -> Option<PathBuf> {
    let gitdir = git(worktree, &["rev-parse", "--absolute-git-dir"])
        .await
        .ok()?;
    Some(PathBuf::from(gitdir).join("aicli-base"))
}

impl Repo {
    /// The repository containing `dir`.
    pub async fn open(dir: &Path) -> Result<Repo, WorktreeError> {
        if !dir.is_dir() {
            return Err(WorktreeError::NotARepo {
                path: dir.to_path_buf(),
            });
        }
        match git(dir, &["rev-parse", "--show-toplevel"]).await {
            Ok(top) => Ok(Repo {
                root: PathBuf::from(top),
            }),
            Err(WorktreeError::Git { .. }) => Err(WorktreeError::NotARepo {
                path: dir.to_path_buf(),
            }),
            Err(e) => Err(e),
        }
    }

    /// The repository's top directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory aicli keeps its state in (`<repo>/.aicli`), git-ignored.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(".aicli")
    }

    /// Makes sure `<repo>/.aicli/` and `<repo>/.aicli/worktrees/` exist, the owner's
    /// only (0700, whatever the umask; an existing one is set to 0700 too), and that git
    /// ignores them.
    pub fn ensure_state_dir(&self) -> std::io::Result<PathBuf> {
        let dir = self.state_dir();
        ensure_private_dir(&dir)?;
        ensure_private_dir(&dir.join("worktrees"))?;
        let ignore = dir.join(".gitignore");
        if !ignore.exists() {
            write_private_file(
                &ignore,
                "# aicli's runs and worktrees; not part of the project\n*\n",
                PRIVATE_FILE_MODE,
            )?;
        }
        Ok(dir)
    }

    /// The commit `rev` names.
    pub async fn resolve(&self, rev: &str) -> Result<String, WorktreeError> {
        git(
            &self.root,
            &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
        )
        .await
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn base_file_is_in_the_private_git_dir() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let run = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .arg("-C")
                .arg(r)
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        run(&["init", "-q", "-b", "main"]);
        run(&[
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ]);
        let repo = Repo::open(r).await.unwrap();
        let wt = repo
            .add_worktree("aicli/b/t", &r.join(".aicli/worktrees/b/t"), "HEAD")
            .await
            .unwrap();
        let f = base_file(&wt.path).await.unwrap();
        assert_eq!(std::fs::read_to_string(f).unwrap().trim(), wt.base);
        let listed = repo.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].base.as_deref(), Some(wt.base.as_str()));
        assert_eq!(listed[0].holds_work, None);
    }
}
