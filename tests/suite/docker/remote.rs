//! A second engine treated strictly as remote: the worktree goes up as a tar, the work
//! comes back as a git bundle; tasks spread over both engines by free capacity.

use std::sync::Arc;
use std::time::Duration;

use aicli::BatchOptions;
use aicli::providers::TaskSpec;
use tokio_util::sync::CancellationToken;

use super::remote_engine::RemoteEngine;
use super::support::{self, DockerSetup, assert_no_container, docker_config, local_host};
use crate::suite::e2e::{Cli, Setup, builtin_tool_with, question_then_answer_with};
use crate::suite::support::{
    aicli_with, batch_id, git, git_repo, kill_9, resume_json, spawn_batch, task_printed,
    wait_for_batch,
};

async fn engines(test: &str) -> Option<(bollard::Docker, RemoteEngine)> {
    let local = support::local_engine(test).await?;
    let remote = RemoteEngine::start()
        .await
        .unwrap_or_else(|e| panic!("{test}: the second engine does not start: {e}"));
    Some((local, remote))
}

/// Ten tasks at once over the local engine and the remote one (five places each): every
/// result right, every worktree holds its task's work (uploaded, bundled back: here the
/// prompt each CLI read on its stdin), the work of both engines is spread, and no
/// container is left on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_tasks_in_parallel_across_a_local_and_a_remote_engine() {
    let Some((local, remote)) = engines("ten_tasks_in_parallel").await else {
        return;
    };
    let image = support::fake_cli_image(&local).await;
    remote.load_from(&local, &image).await;
    let repo = git_repo();
    // A committed file and an uncommitted change the remote runs must see and keep.
    std::fs::write(repo.path().join("data.txt"), "v1\n").unwrap();
    git(repo.path(), &["add", "data.txt"]);
    git(repo.path(), &["commit", "-q", "-m", "data"]);
    let mut l = local_host();
    l.max_containers = Some(5);
    let mut r = remote.host("remote");
    r.max_containers = Some(5);
    // The Claude adapter's command (the prompt on stdin) running the fake CLI.
    let mut config = docker_config(vec![l, r], &image);
    support::adapter_fake(&mut config, "claude", "text", &[]);
    let engine = support::config_engine(config);
    let tasks: Vec<TaskSpec> = (0..10)
        .map(|i| TaskSpec {
            id: format!("t{i}"),
            prompt: format!("task {i}"),
            extra_args: vec![
                "--require-file".into(),
                "/workspace/data.txt".into(),
                "--record-stdin".into(),
                format!("out-{i}.txt"),
                "--line-delay-ms".into(),
                "400".into(),
            ],
            ..TaskSpec::default()
        })
        .collect();
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    opts.max_parallel = Some(10);
    let batch = support::run_batch_within(
        &engine,
        tasks,
        opts,
        Duration::from_secs(180),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(batch.n_succeeded, 10, "{:#?}", batch.tasks);
    let store = engine.store(repo.path(), None);
    let rec = store.open_batch(&batch.batch_id).unwrap();
    let (mut on_local, mut on_remote) = (0, 0);
    for r in &batch.tasks {
        let i = r.task_id.trim_start_matches('t');
        assert!(!r.response.is_empty(), "{r:#?}");
        let wt = r
            .worktree
            .clone()
            .unwrap_or_else(|| panic!("{} keeps its work", r.task_id));
        // Exactly the task's file is the work, committed on its branch as a local run's
        // is: nothing of the transfer, the wrapper or the snapshot commit.
        let status = git(&wt, &["status", "--porcelain", "--untracked-files=all"]);
        assert_eq!(status, "", "{}", r.task_id);
        // The CLI read its prompt on stdin in the remote container (through the wrapper).
        assert_eq!(
            std::fs::read_to_string(wt.join(format!("out-{i}.txt"))).unwrap(),
            format!("task {i}")
        );
        let branch = r.branch.clone().unwrap();
        assert_eq!(
            git(&wt, &["rev-list", "--count", &format!("main..{branch}")]),
            "1",
            "one commit, aicli's"
        );
        assert_eq!(
            crate::support::git::aicli_commit(&wt, &branch),
            (r.task_id.clone(), vec![format!("out-{i}.txt")])
        );
        assert_eq!(
            r.work.as_ref().and_then(|w| w.commit.clone()),
            Some(git(&wt, &["rev-parse", &branch]))
        );
        assert!(git(repo.path(), &["for-each-ref", "refs/aicli"]).is_empty());
        let place = rec.task(&r.task_id).unwrap().attempts[0]
            .place
            .clone()
            .unwrap();
        if place.starts_with("docker remote") {
            on_remote += 1;
        } else if place.starts_with("docker local") {
            on_local += 1;
        }
    }
    assert_eq!(on_local + on_remote, 10);
    assert!(
        on_local >= 2 && on_remote >= 2,
        "local {on_local}, remote {on_remote}"
    );
    assert_no_container(&local, &batch.batch_id).await;
    assert_no_container(&remote.docker, &batch.batch_id).await;
}

/// `aicli batch` on the remote engine killed with SIGKILL while a run works: the
/// container stays there (no mounts: strictly remote); `aicli containers prune` stops
/// it, brings its work back into the worktree and removes it; `aicli resume` finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_aicli_leaves_remote_work_that_prune_brings_back() {
    let Some((local, remote)) = engines("a_killed_aicli_leaves_remote_work").await else {
        return;
    };
    let image = support::fake_cli_image(&local).await;
    remote.load_from(&local, &image).await;
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = support::image_fake_config(dir.path(), &image, &[remote.host("remote")]);
    // The runner comes from the tasks file.
    let tasks = serde_json::json!({"runner": "docker", "tasks": [
        {"id": "slow", "prompt": "s", "extra_args": ["--touch", "slow.txt", "--line-delay-ms", "5000"]}
    ]});
    let cmd = |args: &[&str]| aicli_with(&cfg, args);
    let mut child = spawn_batch(&cfg, &tasks, &["--repo", repo.path().to_str().unwrap()]);
    let runs = repo.path().join(".aicli/runs");
    let batch_dir = wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(100),
        "the run never printed",
        |b| task_printed(b, "slow"),
    );
    let batch_id = batch_id(&batch_dir);
    kill_9(&mut child);
    // The run goes on remotely; its container has no mount of this machine's files.
    let left = support::labelled(&remote.docker, &format!("dev.aicli.batch={batch_id}")).await;
    assert_eq!(left.len(), 1);
    assert!(
        left[0].mounts.as_ref().is_none_or(|m| m.is_empty()),
        "{:?}",
        left[0].mounts
    );
    let wt = repo
        .path()
        .join(".aicli/worktrees")
        .join(&batch_id)
        .join("slow");
    assert!(
        !wt.join("slow.txt").exists(),
        "the work is only remote so far"
    );

    let out = cmd(&["containers", "prune"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("its work brought back"), "{said}");
    assert!(
        wt.join("slow.txt").is_file(),
        "prune did not bring the work back: {said}"
    );
    assert_eq!(git(&wt, &["status", "--porcelain"]), "?? slow.txt");
    assert_no_container(&remote.docker, &batch_id).await;

    let result = resume_json(&cfg, &batch_id, &["--repo", repo.path().to_str().unwrap()]);
    assert_eq!(result.n_succeeded, 1, "{result:#?}");
    assert!(wt.join("slow.txt").is_file());
    // The resumed attempt committed the work brought back.
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");
    assert_eq!(
        git(&wt, &["show", "--name-only", "--format=", "HEAD"]),
        "slow.txt"
    );
    assert_no_container(&remote.docker, &batch_id).await;
}

/// The real Claude Code on the remote engine: its Bash tool's file comes back into the
/// worktree, its commit onto the task's branch; a question blocks the task and the answer resumes the same session in a new
/// container there (the CLI's session store goes up and comes back with the task's home).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_on_a_remote_engine_writes_the_worktree_and_resumes_after_an_answer() {
    let Some((local, remote)) = engines("claude_on_a_remote_engine").await else {
        return;
    };
    let remote = Arc::new(remote);
    let setup = || Setup::in_docker(DockerSetup::on_remote(local.clone(), remote.clone()));
    builtin_tool_with(Cli::Claude, setup()).await;
    super::clis::agent_commit_lands_on_the_branch(setup()).await;
    question_then_answer_with(Cli::Claude, setup()).await;
}
