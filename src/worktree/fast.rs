//! Worktrees made and removed without the repository's lock held by one task at a time
//! (issue 38): the files `git worktree add` and `git worktree remove` write and delete,
//! written and deleted by aicli, each task its own; the only git processes are a ref
//! update and the checkout (`reset --hard`), which touch nothing another task touches.
//!
//! What it writes is what git 2.47 writes, so `git worktree list`, `prune`, `lock` and
//! `remove`, run by the user, see the same worktrees:
//! - the branch, by `git update-ref refs/heads/B BASE ""` (created, never overwritten;
//!   only that ref's lock is taken);
//! - `<common dir>/worktrees/<name>/` made with `mkdir` (a name another worktree has is
//!   never reused: `name`, `name1`, `name2`… as git picks them), holding `locked`
//!   ("initializing", so a concurrent `git worktree prune` leaves it alone),
//!   `commondir`, `HEAD`, the worktree's `.git` file naming it, and `gitdir` last (git
//!   skips an entry without it); then `reset --hard` fills the index and the files, and
//!   `locked` goes;
//! - removal: the worktree's directory, then its admin directory, `gitdir` first (a
//!   crash between leaves what `git worktree prune` cleans), then its branch by `git
//!   update-ref -d` with the commit it must still be at.
//!
//! The usual layout only ([`Way::of`]): a non-bare repository whose `.git` is a
//! directory, refs in files (not reftable), no `extensions.worktreeConfig`, no sparse
//! checkout, no post-checkout hook; and a branch that is not in `packed-refs` (deleting
//! one rewrites that file, which tasks would contend for). Elsewhere git does it, under
//! the repository's lock, as before.

use std::path::{Path, PathBuf};

use super::{Repo, Worktree, WorktreeError, git};

/// Where the fast path may write: the repository's common git directory.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    common: PathBuf,
}

/// The configuration that sends a repository to git's own worktree commands.
const SLOW_CONFIG: &str =
    r"^(extensions\.refstorage|extensions\.worktreeconfig|core\.sparsecheckout|core\.bare)$";

/// How a repository's worktrees are made and removed: by aicli, in the usual layout, or
/// by git's own commands (which run a post-checkout hook, when there is one, only as
/// `worktree add` itself).
#[derive(Debug, Clone)]
pub(super) enum Way {
    /// aicli writes and deletes git's files, side by side with other tasks.
    Fast(Layout),
    /// git does it, under the repository's lock.
    Git {
        /// Whether the repository has a post-checkout hook.
        post_checkout_hook: bool,
    },
}

impl Way {
    /// The way of `repo`, looked at once per repository and process.
    pub(super) async fn of(repo: &Repo) -> Way {
        use std::collections::HashMap;
        use std::sync::{Arc, Mutex, OnceLock};
        type Cells = Mutex<HashMap<PathBuf, Arc<tokio::sync::OnceCell<Way>>>>;
        static WAYS: OnceLock<Cells> = OnceLock::new();
        let cell = match WAYS.get_or_init(Cells::default).lock() {
            Ok(mut m) => m.entry(repo.root.clone()).or_default().clone(),
            Err(_) => Arc::default(),
        };
        cell.get_or_init(|| Way::look(repo)).await.clone()
    }

    async fn look(repo: &Repo) -> Way {
        let post_checkout_hook = has_post_checkout_hook(repo).await;
        let common = repo.root.join(".git");
        if post_checkout_hook || !common.is_dir() || uncommon_config(repo).await {
            return Way::Git { post_checkout_hook };
        }
        Way::Fast(Layout { common })
    }
}

/// Whether the repository has an executable post-checkout hook (where `core.hooksPath`
/// puts it, if set). When git cannot say, as if there were one: `worktree add` runs it,
/// if any.
async fn has_post_checkout_hook(repo: &Repo) -> bool {
    let path = git(
        &repo.root,
        &["rev-parse", "--git-path", "hooks/post-checkout"],
    )
    .await;
    path.map_or(true, |p| {
        crate::proc::spawn::is_executable(&repo.root.join(p))
    })
}

/// Whether the configuration sends the repository to git's own commands ([`SLOW_CONFIG`];
/// also when git cannot say).
async fn uncommon_config(repo: &Repo) -> bool {
    // `--get-regexp` exits 1 when nothing matches: the usual case.
    let Ok(out) = super::git_output(
        &repo.root,
        &["config", "--get-regexp", SLOW_CONFIG],
        &[0, 1],
    )
    .await
    else {
        return true;
    };
    String::from_utf8_lossy(&out).lines().any(|l| {
        let (key, value) = l.split_once(' ').unwrap_or((l, ""));
        match key {
            "core.bare" | "core.sparsecheckout" | "extensions.worktreeconfig" => {
                value.trim() == "true"
            }
            "extensions.refstorage" => value.trim() != "files",
            _ => true,
        }
    })
}

impl Layout {
    /// Whether `packed-refs` holds `refs/heads/<branch>`.
    fn packed(&self, branch: &str) -> bool {
        let want = format!(" refs/heads/{branch}");
        std::fs::read_to_string(self.common.join("packed-refs"))
            .is_ok_and(|t| t.lines().any(|l| l.ends_with(&want)))
    }
}

fn io_failed(what: &str, path: &Path, e: std::io::Error) -> WorktreeError {
    WorktreeError::Git {
        args: what.to_owned(),
        dir: path.to_path_buf(),
        stderr: e.to_string(),
    }
}

impl Repo {
    /// Makes the worktree `path` on the new branch `branch` at `base` (a full object
    /// name), as `git worktree add -b` would, without the repository's lock. Fails,
    /// leaving nothing behind, when the branch exists or `path` is not empty.
    pub(super) async fn add_unlocked(
        &self,
        layout: &Layout,
        branch: &str,
        path: &Path,
        base: &str,
    ) -> Result<(), WorktreeError> {
        if path.read_dir().is_ok_and(|mut d| d.next().is_some()) {
            return Err(io_failed(
                "worktree add",
                path,
                std::io::Error::other("the directory already exists and is not empty"),
            ));
        }
        let r = format!("refs/heads/{branch}");
        let reason = format!("branch: Created from {base}");
        git(&self.root, &["update-ref", "-m", &reason, &r, base, ""]).await?;
        let admin = match new_admin_dir(&layout.common, path) {
            Ok(a) => a,
            Err(e) => {
                let _ = git(&self.root, &["update-ref", "-d", &r, base]).await;
                return Err(io_failed("worktree add (its admin directory)", path, e));
            }
        };
        let made = self.fill(&admin, branch, path).await;
        if made.is_err() {
            let _ = std::fs::remove_dir_all(path);
            let _ = std::fs::remove_dir_all(&admin);
            let _ = git(&self.root, &["update-ref", "-d", &r, base]).await;
        }
        made
    }

    /// The admin directory's files and the worktree's `.git` file, then the checkout.
    async fn fill(&self, admin: &Path, branch: &str, path: &Path) -> Result<(), WorktreeError> {
        let write = |f: &Path, text: String| {
            std::fs::write(f, text).map_err(|e| io_failed("worktree add", f, e))
        };
        // `locked` first: `git worktree prune` leaves a locked entry alone. `gitdir`
        // last: git skips an entry without it, so a git command that reads every
        // worktree (another process's `branch -D`, `worktree add`) never meets one
        // half made ("failed to read .git/worktrees/<name>/commondir").
        let locked = admin.join("locked");
        write(&locked, "initializing\n".into())?;
        write(&admin.join("commondir"), "../..\n".into())?;
        write(&admin.join("HEAD"), format!("ref: refs/heads/{branch}\n"))?;
        std::fs::create_dir_all(path).map_err(|e| io_failed("worktree add", path, e))?;
        write(&path.join(".git"), format!("gitdir: {}\n", admin.display()))?;
        write(&admin.join("gitdir"), format!("{}\n", path.join(".git").display()))?;
        git(
            path,
            &["reset", "--hard", "--quiet", "--no-recurse-submodules"],
        )
        .await?;
        std::fs::remove_file(&locked).map_err(|e| io_failed("worktree add", &locked, e))
    }

    /// Removes the clean, unchanged worktree `wt` and its branch (still at `wt.base`), as
    /// `git worktree remove` and `git branch -D` would, without the repository's lock;
    /// `false`, touching nothing, when the branch is packed (git does it then).
    pub(super) async fn remove_unlocked(
        &self,
        layout: &Layout,
        wt: &Worktree,
    ) -> Result<bool, WorktreeError> {
        if layout.packed(&wt.branch) {
            return Ok(false);
        }
        let Some(admin) = super::linked_git_dir(&wt.path)
            .filter(|a| a.parent() == Some(&layout.common.join("worktrees")))
        else {
            return Ok(false);
        };
        match std::fs::remove_dir_all(&wt.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_failed("worktree remove", &wt.path, e)),
        }
        // Without `gitdir` git no longer sees the entry (it is prunable): then the
        // rest, which a concurrent `git worktree prune` may be removing too.
        let _ = std::fs::remove_file(admin.join("gitdir"));
        if let Err(e) = std::fs::remove_dir_all(&admin)
            && admin.exists()
        {
            return Err(io_failed("worktree remove", &admin, e));
        }
        let r = format!("refs/heads/{}", wt.branch);
        git(&self.root, &["update-ref", "-d", &r, &wt.base]).await?;
        Ok(true)
    }
}

/// A new admin directory under `<common>/worktrees/` for the worktree `path`: named after
/// its last component, as git names them, with the first free number after it when that
/// name is taken (`mkdir` decides: two tasks never get the same one).
fn new_admin_dir(common: &Path, path: &Path) -> std::io::Result<PathBuf> {
    let dir = common.join("worktrees");
    let name: String = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .collect();
    let name = if name.is_empty() || name.starts_with('.') {
        format!("wt{name}")
    } else {
        name
    };
    let mut n = 0u32;
    let mut gone = 0;
    while n < 10_000 {
        let candidate = if n == 0 {
            dir.join(&name)
        } else {
            dir.join(format!("{name}{n}"))
        };
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            // git removes `worktrees/` once it is empty (after a `worktree remove` or
            // `prune` of another process): made again, the same name is tried again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && gone < 100 => {
                gone += 1;
                std::fs::create_dir_all(&dir)?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "no free name for {name} under {}",
        dir.display()
    )))
}
