//! Worktrees made ahead: while a batch's places are taken, the next queued task gets its
//! worktree (recorded by its attempt, which then starts at once). aicli killed with
//! SIGKILL before that attempt leaves the worktree unrecorded; `aicli resume` takes it
//! over (it is exactly what the attempt would make) and nothing is left behind.

use std::time::Duration;

use super::support::{
    batch_id, fake_cli_config, kill_9, resume_json, spawn_batch, task_state, wait_for_batch,
};
use crate::support::git::{git, git_repo};

#[test]
fn the_next_queued_task_gets_its_worktree_while_the_first_runs_and_resume_takes_it_over() {
    let repo = git_repo();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = fake_cli_config(dir.path(), &["--line-delay-ms", "400"]);
    let tasks = serde_json::json!({"tasks": [
        {"id": "a", "prompt": "one"}, {"id": "b", "prompt": "two"}, {"id": "c", "prompt": "three"}
    ]});
    let repo_arg = repo.path().to_str().expect("a UTF-8 path");
    let mut child = spawn_batch(&cfg, &tasks, &["--max-parallel", "1", "--repo", repo_arg]);
    let runs = repo.path().join(".aicli/runs");
    let worktree = |batch: &std::path::Path, task: &str| {
        repo.path()
            .join(".aicli/worktrees")
            .join(batch_id(batch))
            .join(task)
    };
    let batch = wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(20),
        "task b's worktree was not made while task a ran",
        |b| {
            task_state(b, "a").as_deref() == Some("running")
                && task_state(b, "b").as_deref() == Some("queued")
                && worktree(b, "b").join(".git").exists()
        },
    );
    let id = batch_id(&batch);
    // A real worktree on b's branch, at the batch's base, before b's first attempt.
    let listed = git(repo.path(), &["worktree", "list", "--porcelain"]);
    assert!(
        listed.contains(&format!("branch refs/heads/aicli/{id}/b")),
        "{listed}"
    );
    assert_eq!(
        git(&worktree(&batch, "b"), &["rev-parse", "HEAD"]),
        git(repo.path(), &["rev-parse", "HEAD"])
    );
    kill_9(&mut child);
    assert!(
        worktree(&batch, "b").exists(),
        "the worktree made ahead is left"
    );

    let result = resume_json(&cfg, &id, &["--repo", repo_arg]);
    assert_eq!(result.n_succeeded, 3, "{:#?}", result.tasks);
    // Every task ran where its worktree was made; nothing of the batch is left.
    let listed = git(repo.path(), &["worktree", "list", "--porcelain"]);
    assert!(!listed.contains(&format!("aicli/{id}/")), "{listed}");
    assert!(!worktree(&batch, "b").exists());
}
