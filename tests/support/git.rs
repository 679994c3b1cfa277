//! Real git repositories in temp directories.

use std::path::Path;
use std::process::Command;

/// Runs git in `dir`, panicking with its stderr on failure; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A new git repository with one commit.
pub fn git_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    init_repo(dir.path());
    dir
}

/// [`git_repo`] under `base` (created when missing).
pub fn git_repo_in(base: &Path) -> tempfile::TempDir {
    std::fs::create_dir_all(base).expect("base dir");
    let dir = tempfile::Builder::new()
        .prefix("repo")
        .tempdir_in(base)
        .expect("tempdir");
    init_repo(dir.path());
    dir
}

/// Makes `dir` (created when missing) a git repository on `main` whose one commit holds
/// a README and whatever `dir` held already.
pub fn init_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("repo dir");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.email", "test@example.invalid"]);
    git(dir, &["config", "user.name", "aicli test"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
    std::fs::write(dir.join("README.md"), "# test repo\n").expect("write");
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "initial"]);
}

/// Commit `rev` in `dir` as aicli makes them: its `Aicli-Task` trailer and the files it
/// changed.
pub fn aicli_commit(dir: &Path, rev: &str) -> (String, Vec<String>) {
    let task = git(
        dir,
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Aicli-Task,valueonly)",
            rev,
        ],
    );
    let files = git(dir, &["show", "--name-only", "--format=", rev]);
    (task, files.lines().map(str::to_owned).collect())
}
