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
