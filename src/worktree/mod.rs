//! Per-task git worktrees, and their safe cleanup.
//!
//! Each task runs in `<repo>/.aicli/worktrees/<batch>/<task>` on a new branch
//! `aicli/<batch>/<task>` made from a base commit (HEAD by default). The base commit is
//! kept in the worktree's private git directory (`.git/worktrees/<name>/aicli-base`) so a
//! later `prune` knows it. Tasks make and remove their worktrees side by side, each
//! touching only its own files and branch ([`fast`]); where the repository's layout
//! needs git's own commands (and for git's commands that change or read every branch)
//! they run one at a time per repository. Cleanup never destroys work: a worktree with uncommitted changes (untracked
//! files included) or with commits that no other branch holds is kept and reported; a
//! clean, unchanged one is removed together with its branch.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::util::{PRIVATE_FILE_MODE, ensure_private_dir, write_private_file};

mod add;
mod cleanup;
mod fast;
mod placement;

pub use placement::{place_task, prepare_task};

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

/// aicli's directory in a repository (its runs, worktrees, skills): never part of a
/// task's work, never sent into a container.
pub const STATE_DIR: &str = ".aicli";

/// The git binary: `git` looked up along `PATH` once per process, then run by its
/// absolute path (a lookup per run costs an `execve` for every `PATH` entry before git's;
/// a task runs several). `git` itself when it is not found: running it then fails as
/// git's absence should.
pub fn git_binary() -> &'static Path {
    static GIT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    GIT.get_or_init(|| which::which("git").unwrap_or_else(|_| PathBuf::from("git")))
}

pub(crate) async fn git(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let out = git_output(dir, args, &[0]).await?;
    Ok(String::from_utf8_lossy(&out).trim_end().to_owned())
}

/// `git -C dir ARGS`'s stdout, as bytes, when it exits with one of `accept` (`git diff
/// --no-index` exits 1 when the files differ); otherwise an error with its stderr.
pub(crate) async fn git_output(
    dir: &Path,
    args: &[&str],
    accept: &[i32],
) -> Result<Vec<u8>, WorktreeError> {
    let out = Command::new(git_binary())
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(WorktreeError::NoGit)?;
    if out.status.code().is_some_and(|c| accept.contains(&c)) {
        Ok(out.stdout)
    } else {
        Err(git_failed(dir, args, &out.stderr))
    }
}

/// `git -C dir ARGS` writing straight to this process's stdout (a diff of any size for
/// `aicli diff`, never held in memory), its stderr passed on too; its exit code. No
/// pager: the output is the command's.
pub(crate) async fn git_to_stdout(dir: &Path, args: &[&str]) -> Result<i32, WorktreeError> {
    let status = Command::new(git_binary())
        .arg("--no-pager")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .status()
        .await
        .map_err(WorktreeError::NoGit)?;
    Ok(status.code().unwrap_or(1))
}

/// `git -C dir ARGS` started in its own process group (killed if dropped), with `env`
/// added, stdout and stderr piped, and `stdin` as given.
fn spawn_git(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: std::process::Stdio,
) -> Result<tokio::process::Child, WorktreeError> {
    Command::new(git_binary())
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(env.iter().copied())
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(WorktreeError::NoGit)
}

/// The error of a git command that exited as it should not have.
fn git_failed(dir: &Path, args: &[&str], stderr: &[u8]) -> WorktreeError {
    WorktreeError::Git {
        args: args.join(" "),
        dir: dir.to_path_buf(),
        stderr: String::from_utf8_lossy(stderr).trim().to_owned(),
    }
}

/// `git -C dir ARGS` with `env` added and `input` on its stdin: its exit code and stdout
/// when it exits with one of `accept`, else an error with its stderr.
pub(crate) async fn git_with_input(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    input: &[u8],
    accept: &[i32],
) -> Result<(i32, Vec<u8>), WorktreeError> {
    use tokio::io::AsyncWriteExt;
    let mut child = spawn_git(dir, args, env, std::process::Stdio::piped())?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| WorktreeError::NoGit(std::io::Error::other("no stdin pipe")))?;
    let input = input.to_vec();
    // Written beside the read: git may answer before it has read all of it.
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
    });
    let out = child.wait_with_output().await.map_err(WorktreeError::NoGit)?;
    let _ = writer.await;
    match out.status.code() {
        Some(c) if accept.contains(&c) => Ok((c, out.stdout)),
        _ => Err(git_failed(dir, args, &out.stderr)),
    }
}

/// `git -C dir ARGS`'s stdout, at most `cap` bytes of it, and whether there was more.
/// Reading stops at the cap: git is stopped (its stdout closed, then killed), so a
/// command whose output is unbounded (a diff of a generated file) costs `cap` bytes of
/// memory here, never its whole output. Output within the cap is checked as
/// [`git_output`] checks it; a cut one is returned as far as it got.
pub(crate) async fn git_output_capped(
    dir: &Path,
    args: &[&str],
    accept: &[i32],
    cap: usize,
) -> Result<(Vec<u8>, bool), WorktreeError> {
    use tokio::io::AsyncReadExt;
    /// What is kept of git's stderr (for the error).
    const STDERR_KEPT: u64 = 16 * 1024;
    let mut child = spawn_git(dir, args, &[], std::process::Stdio::null())?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(WorktreeError::NoGit(std::io::Error::other("no pipes")));
    };
    let read_out = async move {
        let mut out = Vec::with_capacity(cap.min(64 * 1024));
        // One byte past the cap tells whether there is more; the pipe closes when this
        // returns, so a git still writing gets EPIPE and stops.
        let r = stdout.take(cap as u64 + 1).read_to_end(&mut out).await;
        (out, r)
    };
    let read_err = async move {
        let mut kept = Vec::new();
        let mut rest = stderr;
        let _ = (&mut rest).take(STDERR_KEPT).read_to_end(&mut kept).await;
        // Drained to its end, and dropped: git never blocks on a full stderr.
        let _ = tokio::io::copy(&mut rest, &mut tokio::io::sink()).await;
        kept
    };
    // stderr ends when git does, and a cut stdout makes git end (EPIPE).
    let ((mut out, read), stderr) = tokio::join!(read_out, read_err);
    if read.is_ok() && out.len() > cap {
        out.truncate(cap);
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Ok((out, true));
    }
    let status = child.wait().await.map_err(WorktreeError::NoGit)?;
    match read {
        Ok(_) if status.code().is_some_and(|c| accept.contains(&c)) => Ok((out, false)),
        _ => Err(git_failed(dir, args, &stderr)),
    }
}

/// One lock per repository: git's worktree and branch commands that change it take it
/// alone (`write`), so do the commands that read every branch while branches may go;
/// aicli's own worktree adds and removals ([`fast`]) share it (`read`): each touches only
/// its own files and ref.
pub(crate) fn repo_lock(root: &Path) -> std::sync::Arc<tokio::sync::RwLock<()>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Locks = Mutex<HashMap<PathBuf, Arc<tokio::sync::RwLock<()>>>>;
    static LOCKS: OnceLock<Locks> = OnceLock::new();
    let locks = LOCKS.get_or_init(|| Mutex::new(HashMap::new()));
    match locks.lock() {
        Ok(mut m) => m.entry(root.to_path_buf()).or_default().clone(),
        Err(_) => Arc::new(tokio::sync::RwLock::new(())),
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
    if let Some(gitdir) = linked_git_dir(worktree) {
        return Some(gitdir.join("aicli-base"));
    }
    let gitdir = git(worktree, &["rev-parse", "--absolute-git-dir"])
        .await
        .ok()?;
    Some(PathBuf::from(gitdir).join("aicli-base"))
}

/// A linked worktree's private git directory, read from its `.git` file (`gitdir:
/// PATH`, relative to the worktree when git writes relative paths), without running git;
/// `None` when `.git` is not such a file or names no directory (git then answers).
pub(super) fn linked_git_dir(worktree: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(worktree.join(".git")).ok()?;
    let dir = worktree.join(text.strip_prefix("gitdir:")?.trim());
    dir.join("commondir").is_file().then_some(dir)
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
        self.root.join(STATE_DIR)
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
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod fast_tests;
