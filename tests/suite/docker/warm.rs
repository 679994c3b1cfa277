//! Warm starts: the containers of a batch's next queued tasks are made and started while
//! earlier tasks run, so that a later task's CLI starts in a container that was waiting
//! for it; a container made ahead for a task that never runs (a cancelled batch) is
//! removed with everything it held.

use std::time::Duration;

use aicli::BatchOptions;
use aicli::providers::{SessionStatus, TaskSpec};
use aicli::runner::docker::{labels, leftovers};
use tokio_util::sync::CancellationToken;

use super::support::{self, assert_no_container, local_host};
use crate::suite::support::{
    batch_id, collect_events, git_repo, kill_9, resume_json, spawn_batch, task_printed,
    task_record, wait_for_batch,
};

fn task(id: &str, args: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        prompt: format!("the prompt of {id}"),
        extra_args: args.iter().map(|s| (*s).to_owned()).collect(),
        ..TaskSpec::default()
    }
}

/// The runner's steps of the first attempt of task `id` of batch `batch_id` in `repo`.
fn steps(repo: &std::path::Path, batch_id: &str, id: &str) -> Vec<String> {
    let rec = task_record(&repo.join(".aicli/runs").join(batch_id), id)
        .unwrap_or_else(|| panic!("{id}: no record"));
    rec["attempts"][0]["setup"]
        .as_array()
        .unwrap_or_else(|| panic!("{id}: no setup steps: {rec:#}"))
        .iter()
        .filter_map(|s| s["step"].as_str().map(str::to_owned))
        .collect()
}

/// Four tasks, one at a time: the first makes its container at its start; each later one
/// starts in a container made while the one before it ran (its record's steps say so, and
/// no container is made on its way to the CLI). Every CLI worked in its own worktree,
/// and no container is left. (`prompt.rs` sees the prompt arrive on stdin after the go.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_later_tasks_start_in_warm_containers() {
    let Some((docker, repo, engine)) = support::fake_in_containers("warm_starts").await else {
        return;
    };
    let ids = ["w1", "w2", "w3", "w4"];
    let tasks = ids
        .iter()
        .map(|id| {
            task(
                id,
                &[
                    "--touch",
                    &format!("{id}.txt"),
                    // Long enough for the next container to be made meanwhile.
                    "--linger-ms",
                    "3000",
                ],
            )
        })
        .collect();
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    opts.max_parallel = Some(1);
    let b = support::run_batch_within(
        &engine,
        tasks,
        opts,
        Duration::from_secs(180),
        CancellationToken::new(),
    )
    .await;
    for (i, id) in ids.iter().enumerate() {
        let r = b.tasks.iter().find(|t| t.task_id == *id).expect("the task");
        assert_eq!(r.status, SessionStatus::Succeeded, "{r:#?}");
        let wt = r.worktree.clone().expect("a worktree");
        assert!(wt.join(format!("{id}.txt")).exists(), "{id}: its work");
        let s = steps(repo.path(), &b.batch_id, id);
        assert!(s.iter().any(|s| s == "go"), "{id}: {s:?}");
        if i == 0 {
            assert!(s.iter().any(|s| s == "create container"), "{id}: {s:?}");
        } else {
            assert!(
                s.iter().any(|s| s == "wait for the warm container")
                    && s.iter().any(|s| s == "ahead: create container")
                    && s.iter().any(|s| s == "ahead: start"),
                "{id} starts in a container made ahead: {s:?}"
            );
            assert!(
                !s.iter().any(|s| s == "create container" || s == "start"),
                "{id}: no container made on the way to its CLI: {s:?}"
            );
        }
    }
    assert_no_container(&docker, &b.batch_id).await;
}

/// A batch cancelled while its first task runs and the next one waits in a container
/// made ahead: that container is removed with the batch, and the private directory made
/// for its run with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_leaves_no_warm_container() {
    let Some((docker, repo, engine)) = support::fake_in_containers("warm_cancelled").await else {
        return;
    };
    let tasks = ["c1", "c2", "c3"]
        .iter()
        .map(|id| task(id, &["--hang-after", "1"]))
        .collect();
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    opts.max_parallel = Some(1);
    let cancel = CancellationToken::new();
    let (tx, events) = collect_events();
    let run = {
        let cancel = cancel.clone();
        tokio::spawn(async move { engine.run_batch(tasks, opts, tx, cancel).await })
    };
    // The running task's container and the next one's, made ahead.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut mine: Vec<(String, String, String)> = Vec::new();
    while tokio::time::Instant::now() < deadline {
        mine = support::labelled(&docker, labels::MANAGED)
            .await
            .into_iter()
            .filter_map(|c| {
                let l = c.labels?;
                let ours = l
                    .get(labels::WORKSPACE)
                    .is_some_and(|w| std::path::Path::new(w).starts_with(repo.path()));
                ours.then(|| {
                    (
                        l.get(labels::TASK).cloned().unwrap_or_default(),
                        c.id.unwrap_or_default(),
                        l.get(labels::BATCH).cloned().unwrap_or_default(),
                    )
                })
            })
            .collect();
        if mine.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        mine.len(),
        2,
        "the running container and the next one's within 60 s"
    );
    let batch_id = mine[0].2.clone();
    // What `aicli containers` says of each: the one made ahead waits for its turn.
    for (task, id, _) in &mine {
        // The first task's container may not have had its go yet, the next one's may not
        // have started yet.
        let want = task == "c2";
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut waits = leftovers::waiting(&docker, id).await;
        while waits != want && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            waits = leftovers::waiting(&docker, id).await;
        }
        assert_eq!(waits, want, "{task}: waiting for its turn");
    }
    cancel.cancel();
    let b = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the cancelled batch ends")
        .expect("join")
        .expect("batch");
    let _ = events.await;
    assert_eq!(b.batch_id, batch_id);
    assert_no_container(&docker, &b.batch_id).await;
    let private = repo
        .path()
        .join(".aicli/runs")
        .join(&b.batch_id)
        .join("private");
    assert!(
        !private.join("c2-1").exists(),
        "the private directory made ahead for c2 is removed"
    );
}

/// `aicli batch` killed with SIGKILL while its next task's container waits: that
/// container ends by itself (its stdin closed with aicli's attach), is listed as left
/// behind, and `aicli resume` removes it and runs the task, which succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_aicli_s_warm_container_ends_and_resume_removes_it() {
    let Some(docker) = support::local_engine("warm_killed").await else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = support::image_fake_config(dir.path(), &image, &[local_host()]);
    let tasks = serde_json::json!({"max_parallel": 1, "tasks": [
        {"id": "first", "prompt": "f", "extra_args": ["--touch", "first.txt", "--line-delay-ms", "3000"]},
        {"id": "next", "prompt": "n", "extra_args": ["--touch", "next.txt"]}
    ]});
    let repo_arg = repo.path().to_str().unwrap();
    let mut child = spawn_batch(&cfg, &tasks, &["--runner", "docker", "--repo", repo_arg]);
    let runs = repo.path().join(".aicli/runs");
    let batch_dir = wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(100),
        "the first task never printed",
        |b| task_printed(b, "first"),
    );
    let batch_id = batch_id(&batch_dir);
    // The next task's container, made ahead, waiting.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let warm = loop {
        let next = support::labelled(&docker, &format!("{}={batch_id}", labels::BATCH))
            .await
            .into_iter()
            .find(|c| {
                c.labels
                    .as_ref()
                    .is_some_and(|l| l.get(labels::TASK).is_some_and(|t| t == "next"))
            });
        if let Some(id) = next.and_then(|c| c.id) {
            break id;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no container made ahead for the next task"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    kill_9(&mut child);
    // It ends by itself: nothing waits in it any more.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let state = docker
            .inspect_container(
                &warm,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .expect("the container is still there, for resume to remove")
            .state
            .and_then(|s| s.running);
        if state == Some(false) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the warm container still runs 20 s after aicli was killed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = resume_json(&cfg, &batch_id, &["--repo", repo_arg]);
    assert_eq!((result.n_tasks, result.n_succeeded), (2, 2), "{result:#?}");
    assert_no_container(&docker, &batch_id).await;
    let next = result.tasks.iter().find(|t| t.task_id == "next").unwrap();
    assert!(next.worktree.clone().unwrap().join("next.txt").is_file());
}
