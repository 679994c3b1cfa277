//! The swarm runner under the engine's other guarantees (stage 3 of issue 39), on a real
//! single-node swarm ([`super::swarm::on_swarm`]): the batch budget stops jobs as it stops
//! containers, and `aicli resume` after `kill -9` of aicli removes the dead aicli's jobs,
//! loses nothing and pays for no finished task twice.

use std::time::Duration;

use aicli::providers::{RunnerKind, SessionStatus};

use super::support::{self, local_host};
use super::swarm::{assert_no_job_for_repo, jobs_left, on_swarm};
use crate::suite::support::{
    batch_id, git, git_repo, kill_9, resume_json, spawn_batch, task_printed, task_state,
    wait_for_batch,
};

/// Three swarm jobs of a CLI that never stops at its cap, against a budget of 10 model
/// calls: stopped at the budget as containers are (the same checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_jobs_are_stopped_at_the_budget() {
    on_swarm(
        "swarm_jobs_are_stopped_at_the_budget",
        |docker| async move {
            super::budget::stopped_at_the_budget(docker, RunnerKind::Swarm).await;
        },
    )
    .await;
}

/// `aicli batch --runner swarm` killed with SIGKILL after one task finished and while
/// another's job runs: `aicli resume` removes the dead aicli's service, secret, config
/// and container, runs the interrupted task again (its work comes back as a commit on
/// its branch), and does not run the finished one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_kill_9_removes_the_jobs_and_pays_for_nothing_twice() {
    on_swarm("swarm_resume_after_kill_9", |docker| async move {
        let image = support::fake_cli_image(&docker).await;
        let repo = git_repo();
        let dir = tempfile::tempdir().unwrap();
        let cfg = support::image_fake_config(dir.path(), &image, &[local_host()]);
        let tasks = serde_json::json!({"max_parallel": 2, "tasks": [
            {"id": "quick", "prompt": "q", "extra_args": ["--touch", "quick.txt"]},
            {"id": "slow", "prompt": "s", "extra_args": ["--touch", "slow.txt", "--line-delay-ms", "4000"]}
        ]});
        let repo_arg = repo.path().to_str().unwrap();
        // The runner comes from the command line only: the resume finds it in the records.
        let mut child = spawn_batch(&cfg, &tasks, &["--runner", "swarm", "--repo", repo_arg]);
        let runs = repo.path().join(".aicli/runs");
        let batch_dir = wait_for_batch(
            &runs,
            Duration::from_secs(120),
            Duration::from_millis(100),
            "the batch never got going",
            |b| task_state(b, "quick").as_deref() == Some("succeeded") && task_printed(b, "slow"),
        );
        let batch = batch_id(&batch_dir);
        kill_9(&mut child);
        // The slow task's job outlives aicli.
        let left = jobs_left(&docker, repo.path()).await;
        assert!(left.iter().any(|l| l.starts_with("service ")), "{left:?}");
        assert!(left.iter().any(|l| l.starts_with("secret ")), "{left:?}");
        let store = aicli::record::RunStore::new(&runs);
        let quick_before = store.open_batch(&batch).unwrap().task("quick").unwrap();
        let paid = quick_before.attempts[0]
            .result
            .as_ref()
            .and_then(|r| r.cost_usd)
            .expect("the quick task's cost");

        let result = resume_json(&cfg, &batch, &["--repo", repo_arg]);
        assert_eq!((result.n_tasks, result.n_succeeded), (2, 2), "{result:#?}");
        assert_no_job_for_repo(&docker, repo.path()).await;
        let rec = store.open_batch(&batch).unwrap();
        // The finished task ran once, and costs what it cost.
        let quick = rec.task("quick").unwrap();
        assert_eq!(quick.attempts.len(), 1, "{quick:#?}");
        let r = result.tasks.iter().find(|t| t.task_id == "quick").unwrap();
        assert_eq!(r.cost_usd, Some(paid));
        // The interrupted one ran again, on the swarm, and its work is on its branch.
        let slow = rec.task("slow").unwrap();
        assert_eq!(slow.attempts.len(), 2, "{slow:#?}");
        assert_eq!(
            slow.attempts[0].result.as_ref().map(|r| r.status),
            Some(SessionStatus::Interrupted)
        );
        assert!(
            slow.attempts[1].place.as_deref().is_some_and(|p| p.starts_with("swarm ")),
            "{:?}",
            slow.attempts[1].place
        );
        for (id, file) in [("quick", "quick.txt"), ("slow", "slow.txt")] {
            let t = rec.task(id).unwrap();
            let branch = t.branch.as_deref().expect("a branch");
            let files = git(repo.path(), &["ls-tree", "--name-only", branch]);
            assert!(files.lines().any(|f| f == file), "{id}: {files}");
        }
    })
    .await;
}

/// Placement constraints only the swarm places by: a task with some, run by the Docker
/// runner, fails `bad_request` before anything runs, saying so; one whose reservation
/// exceeds the engine's limit is refused the same way, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_off_the_swarm_and_a_reservation_over_its_limit_are_refused() {
    use aicli::providers::{ErrorKind, TaskResources, TaskSpec};
    let Some((docker, repo, engine)) =
        support::fake_in_containers("constraints_off_the_swarm").await
    else {
        return;
    };
    let tasks = vec![
        TaskSpec {
            id: "pinned".into(),
            prompt: "p".into(),
            constraints: vec!["node.labels.gpu==true".into()],
            ..TaskSpec::default()
        },
        TaskSpec {
            id: "greedy".into(),
            prompt: "p".into(),
            // Over the engine's memory limit (512 MiB in this config), not its own.
            resources: Some(TaskResources {
                reserve_memory_mb: Some(8192),
                ..TaskResources::default()
            }),
            ..TaskSpec::default()
        },
    ];
    let mut opts = aicli::BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    let b = support::run_batch_within(
        &engine,
        tasks,
        opts,
        Duration::from_secs(120),
        tokio_util::sync::CancellationToken::new(),
    )
    .await;
    for (t, says) in b.tasks.iter().zip([
        "only the swarm runner places by",
        "resources.reserve_memory_mb",
    ]) {
        assert_eq!(t.error_kind, Some(ErrorKind::BadRequest), "{t:#?}");
        let error = t.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with("docker runner: ") && error.contains(says),
            "{error}"
        );
    }
    support::assert_no_container(&docker, &b.batch_id).await;
}
