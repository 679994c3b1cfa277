//! The fake CLI in containers on the local engine.

use std::time::Duration;

use aicli::BatchOptions;
use aicli::providers::{SessionStatus, TaskSpec};
use tokio_util::sync::CancellationToken;

use super::support::{self, assert_no_container, docker_config, local_host};
use crate::suite::support::{
    aicli_with, batch_id, collect_events, git, git_repo, kill_9, resume_json, spawn_batch,
    task_printed, task_state, wait_for_batch,
};

fn task(id: &str, args: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        prompt: "do the thing".into(),
        extra_args: args.iter().map(|s| (*s).to_owned()).collect(),
        ..TaskSpec::default()
    }
}

/// A run in a container: the answer parsed from the live stream, the file the "tool"
/// made in the worktree (bind-mounted at /workspace), nothing of aicli's scaffolding in
/// the worktree, and the container gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_container_works_in_the_worktree_and_leaves_nothing() {
    let Some((docker, repo, engine)) = support::fake_in_containers("a_run_in_a_container").await
    else {
        return;
    };
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    let (tx, events) = collect_events();
    let batch = engine
        .run_batch(
            vec![task(
                "t1",
                &[
                    "--touch",
                    "made-in-container.txt",
                    "--require-file",
                    "/workspace/README.md",
                ],
            )],
            opts,
            tx,
            CancellationToken::new(),
        )
        .await
        .expect("batch");
    let _ = events.await;
    let r = &batch.tasks[0];
    assert_eq!(r.status, SessionStatus::Succeeded, "{r:#?}");
    assert!(!r.response.is_empty());
    let wt = r.worktree.clone().expect("the worktree holds work");
    assert!(wt.join("made-in-container.txt").is_file());
    support::assert_owned_like_repo(&wt.join("made-in-container.txt"), repo.path());
    // Only the agent's file is the work, committed on the branch as a local run's is:
    // no MCP config, prompt or home.
    let status = git(&wt, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status, "");
    let branch = r.branch.clone().expect("branch");
    assert_eq!(
        crate::support::git::aicli_commit(&wt, &branch),
        ("t1".to_owned(), vec!["made-in-container.txt".to_owned()])
    );
    assert_no_container(&docker, &batch.batch_id).await;
    // The run's private directory and the task's home (login copies) are gone.
    let private = batch.runs_dir.join("private");
    let left: Vec<_> = std::fs::read_dir(&private)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in {}: {left:?}", private.display());
    // The record times what the runner did, in order, each step within the attempt.
    let rec: aicli::record::TaskRecord = serde_json::from_slice(
        &std::fs::read(batch.runs_dir.join("tasks/t1/task.json")).expect("task.json"),
    )
    .expect("a task record");
    // The uid-mapped mounts are made only when the worktree's owner is root.
    let steps: Vec<&str> = rec.attempts[0]
        .setup
        .iter()
        .map(|s| s.step.as_str())
        .filter(|s| *s != "give access (uid-mapped mounts)")
        .collect();
    let root_owned = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(repo.path()).unwrap().uid() == 0
    };
    assert_eq!(
        rec.attempts[0]
            .setup
            .iter()
            .any(|s| s.step == "give access (uid-mapped mounts)"),
        root_owned
    );
    assert_eq!(
        steps,
        [
            "wait for an engine",
            "image inspect",
            "home and private directory",
            "create container",
            "attach",
            // No "inspect (peer address)": behind the egress allowlist the run's MCP
            // requests come from the loopback address aicli gave its socket.
            "start",
            // The launch script written, the go line and the prompt sent.
            "go",
            "remove container"
        ],
        "{:#?}",
        rec.attempts[0].setup
    );
    let mut last = 0.0;
    for s in &rec.attempts[0].setup {
        assert!(s.ms >= 0.0 && s.at_ms >= last, "{s:?} after {last}");
        last = s.at_ms;
    }
    assert!(rec.attempts[0].setup.iter().any(|s| s.ms > 0.0));
}

async fn run(
    engine: &aicli::Engine,
    repo: &std::path::Path,
    tasks: Vec<TaskSpec>,
    f: impl FnOnce(&mut BatchOptions),
    cancel: CancellationToken,
) -> aicli::BatchResult {
    let mut opts = BatchOptions::new(repo);
    opts.provider = Some("fake".into());
    f(&mut opts);
    support::run_batch_within(engine, tasks, opts, Duration::from_secs(120), cancel).await
}

/// Failure, cancel, timeout and a budget stop: each run ends as it should and its
/// container is gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_end_of_a_run_removes_its_container() {
    let Some((docker, repo, engine)) = support::fake_in_containers("every_end_of_a_run").await
    else {
        return;
    };
    // Failure: the CLI reports it cannot reach the API and exits 1.
    let badkey = format!("{}/claude/badkey.ndjson", support::FIXTURES_IN_IMAGE);
    let b = run(
        &engine,
        repo.path(),
        vec![task("fails", &["--replay", &badkey, "--exit", "1"])],
        |_| {},
        CancellationToken::new(),
    )
    .await;
    assert_eq!(
        b.tasks[0].status,
        SessionStatus::Failed,
        "{:#?}",
        b.tasks[0]
    );
    assert_eq!(
        b.tasks[0].error_kind,
        Some(aicli::providers::ErrorKind::Network)
    );
    assert_eq!(b.tasks[0].exit_code, Some(1));
    assert_no_container(&docker, &b.batch_id).await;

    // Timeout: it hangs after its first line; the wall-clock limit ends it.
    let mut t = task("hangs", &["--hang-after", "1"]);
    t.timeout_secs = Some(2);
    let started = std::time::Instant::now();
    let b = run(
        &engine,
        repo.path(),
        vec![t],
        |_| {},
        CancellationToken::new(),
    )
    .await;
    let r = &b.tasks[0];
    assert_eq!(
        r.error_kind,
        Some(aicli::providers::ErrorKind::Timeout),
        "{r:#?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_no_container(&docker, &b.batch_id).await;

    // Cancel: once the CLI has printed, the batch is cancelled.
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        c2.cancel();
    });
    let b = run(
        &engine,
        repo.path(),
        vec![task(
            "cancelled",
            &["--touch", "made-before-cancel.txt", "--hang-after", "1"],
        )],
        |_| {},
        cancel,
    )
    .await;
    let r = &b.tasks[0];
    assert_eq!(r.status, SessionStatus::Interrupted, "{r:#?}");
    // What the cancelled run made is the worktree owner's: nothing to give back.
    let wt = r
        .worktree
        .clone()
        .expect("the cancelled task keeps its work");
    support::assert_owned_like_repo(&wt.join("made-before-cancel.txt"), repo.path());
    assert_no_container(&docker, &b.batch_id).await;

    // Budget stop: the quick task's cost spends the budget while the slow one runs.
    let b = run(
        &engine,
        repo.path(),
        vec![
            task("quick", &[]),
            task("slow", &["--line-delay-ms", "5000"]),
        ],
        |o| {
            o.budget_usd = Some(0.0001);
            o.max_parallel = Some(2);
        },
        CancellationToken::new(),
    )
    .await;
    let slow = b.tasks.iter().find(|t| t.task_id == "slow").expect("slow");
    assert_eq!(
        slow.error_kind,
        Some(aicli::providers::ErrorKind::Budget),
        "{slow:#?}"
    );
    assert_no_container(&docker, &b.batch_id).await;
}

/// `aicli batch` in containers killed with SIGKILL: its running container is left
/// (labelled with batch and task, its owner gone); `aicli resume` removes it and finishes
/// the batch, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_aicli_leaves_a_labelled_container_that_resume_removes() {
    let Some(docker) = support::local_engine("kill_9_of_aicli").await else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = support::image_fake_config(dir.path(), &image, &[local_host()]);
    let tasks = serde_json::json!({"max_parallel": 2, "tasks": [
        {"id": "quick", "prompt": "q", "extra_args": ["--touch", "quick.txt"]},
        {"id": "slow", "prompt": "s", "extra_args": ["--touch", "slow.txt", "--line-delay-ms", "4000"]}
    ]});
    let cmd = |args: &[&str]| aicli_with(&cfg, args);
    // The runner comes from the command line only: the resume finds it in the records.
    let repo_arg = repo.path().to_str().unwrap();
    let mut child = spawn_batch(&cfg, &tasks, &["--runner", "docker", "--repo", repo_arg]);
    let runs = repo.path().join(".aicli/runs");
    let batch_dir = wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(100),
        "the batch never got going",
        |b| task_state(b, "quick").as_deref() == Some("succeeded") && task_printed(b, "slow"),
    );
    let batch_id = batch_id(&batch_dir);
    kill_9(&mut child);
    // The slow task's container outlives aicli, labelled, its owner gone.
    let left = support::containers_of(&docker, &batch_id).await;
    assert_eq!(left.len(), 1, "{left:?}");
    // So do its egress sockets, until the resume sweeps them.
    let name = left[0]
        .split([' ', ','])
        .next()
        .unwrap()
        .trim_start_matches('/');
    let inspected = docker
        .inspect_container(
            name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    let egress_dir = inspected
        .host_config
        .and_then(|h| h.binds)
        .unwrap_or_default()
        .iter()
        .find_map(|b| {
            b.strip_suffix(":/aicli-egress:ro")
                .map(std::path::PathBuf::from)
        })
        .expect("the container's egress sockets");
    assert!(
        egress_dir.join("proxy.sock").exists(),
        "{}",
        egress_dir.display()
    );
    let listed = cmd(&["containers", "--json"]).output().unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let mine: Vec<&serde_json::Value> = listed["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["labels"]["batch_id"] == batch_id.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{listed:#}");
    assert_eq!(mine[0]["labels"]["task_id"], "slow");
    assert_eq!(mine[0]["owner_alive"], false);
    assert!(mine[0]["created"].as_i64().unwrap() > 0, "{listed:#}");
    // Its egress sockets too, their owner gone.
    let proxy = listed["egress_proxies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["dir"] == egress_dir.to_str().unwrap())
        .unwrap_or_else(|| panic!("{listed:#}"));
    assert_eq!(proxy["owner_alive"], false, "{listed:#}");

    let result = resume_json(&cfg, &batch_id, &["--repo", repo.path().to_str().unwrap()]);
    assert_eq!((result.n_tasks, result.n_succeeded), (2, 2), "{result:#?}");
    assert_no_container(&docker, &batch_id).await;
    assert!(
        !egress_dir.exists(),
        "{} outlived the resume",
        egress_dir.display()
    );
    // Nothing lost: both tasks' work is in their worktrees.
    for (id, file) in [("quick", "quick.txt"), ("slow", "slow.txt")] {
        let r = result.tasks.iter().find(|t| t.task_id == id).unwrap();
        let wt = r
            .worktree
            .clone()
            .unwrap_or_else(|| panic!("{id} keeps its worktree"));
        assert!(wt.join(file).is_file(), "{id}: {file} missing");
        // aicli was killed mid-run: the files are the worktree owner's all the same.
        support::assert_owned_like_repo(&wt.join(file), repo.path());
    }
    let rec = aicli::record::RunStore::new(&runs)
        .open_batch(&batch_id)
        .unwrap();
    let slow = rec.task("slow").unwrap();
    assert_eq!(slow.attempts.len(), 2);
    assert_eq!(
        slow.attempts[0].result.as_ref().map(|r| r.status),
        Some(SessionStatus::Interrupted)
    );
}

/// aicli as root with its repository under `/root`: the repository's git directory is
/// bound at its own path, and the image's `/root` (0700) would keep the container's user
/// (never root) from it. The agent's git works in its worktree all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_under_root_is_reached_by_the_containers_user() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: aicli is not root here");
        return;
    }
    let Some(docker) = support::local_engine("a_repository_under_root").await else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let repo = crate::suite::support::git_repo_in(std::path::Path::new("/root/.cache/aicli-tests"));
    // The "CLI" is bash: git in the worktree, as an agent's shell tool runs it.
    let probe = crate::suite::support::replay_provider("fake", "claude", None)
        .with_config(|c| c.binary_name = "bash".into());
    let engine = support::engine(
        docker_config(vec![local_host()], &image),
        std::sync::Arc::new(probe),
    );
    let batch = run(
        &engine,
        repo.path(),
        vec![task(
            "g",
            &[
                "-c",
                "id -u > uid.txt && git status --porcelain && git rev-parse --git-common-dir > git-dir.txt",
                "probe",
            ],
        )],
        |_| {},
        CancellationToken::new(),
    )
    .await;
    let r = &batch.tasks[0];
    let wt = r.worktree.clone().expect("a worktree");
    let read = |f: &str| std::fs::read_to_string(wt.join(f)).map(|s| s.trim().to_owned());
    assert_ne!(read("uid.txt").ok().as_deref(), Some("0"), "{r:#?}");
    assert_eq!(
        read("git-dir.txt").ok(),
        Some(repo.path().join(".git").display().to_string()),
        "{r:#?}"
    );
    assert_no_container(&docker, &batch.batch_id).await;
}
