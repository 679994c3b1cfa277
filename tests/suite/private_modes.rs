//! aicli's state directories get explicit modes whatever the umask: the `aicli` binary
//! runs under `umask 000` (as a subprocess: the test process's own umask never changes),
//! and everything it made under `.aicli` is the owner's only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::support::{fake_cli_config, git, git_repo};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

/// Every directory and file under `dir`, without descending into `skip`.
fn walk(dir: &Path, skip: &[&Path], out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.clone());
        if e.file_type().unwrap().is_dir() && !skip.contains(&p.as_path()) {
            walk(&p, skip, out);
        }
    }
}

#[test]
fn under_umask_000_everything_aicli_makes_in_dot_aicli_is_private() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    // One task that leaves work behind (its worktree is kept), one that does not.
    let tasks = dir.path().join("tasks.json");
    std::fs::write(
        &tasks,
        serde_json::json!([
            {"id": "works", "prompt": "w", "extra_args": ["--touch", "made-by-the-agent.txt"]},
            {"id": "idle", "prompt": "i"}
        ])
        .to_string(),
    )
    .unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"umask 000 && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_aicli"))
        .arg("--config")
        .arg(&cfg)
        .args(["batch", tasks.to_str().unwrap(), "--json", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = repo.path().join(".aicli");
    for d in ["", "runs", "worktrees"] {
        assert_eq!(mode(&state.join(d)), 0o700, ".aicli/{d}");
    }
    // The kept worktree: its directory is aicli's (0700); what is inside is the
    // repository's checkout and the agent's work, made by git and the CLI.
    let worktrees: Vec<_> = std::fs::read_dir(state.join("worktrees"))
        .unwrap()
        .flatten()
        .flat_map(|b| std::fs::read_dir(b.path()).unwrap().flatten())
        .map(|t| t.path())
        .collect();
    assert_eq!(worktrees.len(), 1, "{worktrees:?}");
    assert!(worktrees[0].join("made-by-the-agent.txt").is_file());
    let skip: Vec<&Path> = worktrees.iter().map(|p| p.as_path()).collect();
    let mut all = Vec::new();
    walk(&state, &skip, &mut all);
    assert!(all.len() > 10, "{all:?}");
    for p in &all {
        let m = std::fs::symlink_metadata(p).unwrap();
        let want = if m.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(p), want, "{}", p.display());
    }
    // The base commit aicli records in the worktree's git directory.
    let gitdir = git(&worktrees[0], &["rev-parse", "--absolute-git-dir"]);
    assert_eq!(mode(&Path::new(&gitdir).join("aicli-base")), 0o600);
}
