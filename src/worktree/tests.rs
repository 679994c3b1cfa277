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

/// Cleanup of a worktree with no commits keeps it when it holds an untracked file, even
/// where `status.showUntrackedFiles=no` would hide that file from a plain `git status`;
/// removes it, with its branch, once the file is gone.
#[tokio::test]
async fn cleanup_keeps_untracked_files_whatever_status_shows() {
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
    run(&["config", "status.showUntrackedFiles", "no"]);
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
    std::fs::write(wt.path.join("new.txt"), "work").unwrap();
    assert_eq!(
        repo.cleanup(&wt).await.unwrap(),
        Cleanup::Kept {
            reason: "1 uncommitted change".to_owned()
        }
    );
    assert!(wt.path.join("new.txt").exists());
    std::fs::remove_file(wt.path.join("new.txt")).unwrap();
    assert_eq!(repo.cleanup(&wt).await.unwrap(), Cleanup::Removed);
    assert!(!wt.path.exists());
    let branches = std::process::Command::new("git")
        .arg("-C")
        .arg(r)
        .args(["branch", "--list", "aicli/*"])
        .output()
        .unwrap();
    assert!(branches.stdout.is_empty());
}
