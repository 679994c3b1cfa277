//! The batch budget with every run in a container (issue 10, item 5): the same
//! reservations, live count and stop as local runs (one path in the session, whatever
//! the placement), and the stopped containers gone.

use std::path::Path;
use std::sync::Arc;

use aicli::BatchOptions;
use aicli::providers::{CostSource, ErrorKind, RunnerKind, TaskSpec};
use aicli::record::RunStore;
use tokio_util::sync::CancellationToken;

use super::support::{self, assert_no_container, docker_config, local_host};
use crate::suite::budget::{message_cost, per_message, transcript};
use crate::suite::support::{git, git_repo, replay_provider};

/// Three containers of a CLI that never stops at its cap (the fake CLI, 40 model calls
/// each) against a budget of 10 calls: stopped by aicli at the budget, within the bound
/// of one call per run in flight, each charged its streamed estimate; a fourth task
/// never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_runs_in_containers_are_stopped_at_the_budget() {
    let Some(docker) = support::local_engine("parallel_runs_in_containers_budget").await else {
        return;
    };
    stopped_at_the_budget(docker, RunnerKind::Docker).await;
}

/// [`parallel_runs_in_containers_are_stopped_at_the_budget`] under `runner` (`docker`,
/// or `swarm` on an engine that is a swarm manager).
pub async fn stopped_at_the_budget(docker: bollard::Docker, runner: RunnerKind) {
    let image = support::fake_cli_image(&docker).await;
    let repo = git_repo();
    // The transcript is committed: every worktree (bind-mounted into its container) has
    // it, and the fake CLI replays it from its working directory.
    transcript(repo.path(), "long", 40);
    git(
        repo.path(),
        &["add", "long.ndjson", "long.stderr", "long.exit"],
    );
    git(repo.path(), &["commit", "-q", "-m", "a long transcript"]);
    let mut config = docker_config(vec![local_host()], &image);
    config.engine.runner = runner;
    let engine = support::engine(
        config,
        Arc::new(replay_provider("fake", "claude", Some(Path::new("long")))),
    );
    let c = message_cost();
    let budget = 10.0 * c;
    let parallel = 3;
    let tasks: Vec<TaskSpec> = ["a", "b", "c", "late"]
        .iter()
        .map(|id| TaskSpec {
            id: (*id).to_owned(),
            prompt: format!("prompt of {id}"),
            extra_args: vec!["--line-delay-ms".into(), "150".into()],
            ..TaskSpec::default()
        })
        .collect();
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    opts.max_parallel = Some(parallel);
    opts.budget_usd = Some(budget);
    let r = support::run_batch_within(
        &engine,
        tasks,
        opts,
        std::time::Duration::from_secs(180),
        CancellationToken::new(),
    )
    .await;
    let bound = budget + parallel as f64 * c;
    assert!(
        r.total_cost_usd <= bound + 1e-9 && r.total_cost_usd >= budget - 1e-9,
        "spent ${:.4} against a ${budget:.4} budget (bound ${bound:.4}): {:#?}",
        r.total_cost_usd,
        r.tasks
    );
    for t in &r.tasks[..3] {
        assert_eq!(t.error_kind, Some(ErrorKind::Budget), "{t:#?}");
        assert!(
            t.error
                .as_deref()
                .unwrap_or_default()
                .contains("stopped by the budget: "),
            "{t:#?}"
        );
        assert_eq!(t.cost_source, CostSource::Estimated, "{t:#?}");
        let cost = t.cost_usd.expect("a streamed estimate");
        assert!(cost >= c - 1e-12 && cost < 40.0 * c, "{cost}");
        assert!(t.canonical_usage.input_tokens >= per_message().input_tokens);
    }
    assert_eq!(
        r.tasks[3].error.as_deref(),
        Some("the batch budget was spent before this task started")
    );
    assert!(r.budget_reserved_usd.expect("reserved") <= budget + 1e-9);
    // Each ran in a container, with its share of the budget recorded.
    let rec = RunStore::new(repo.path().join(".aicli/runs"))
        .open_batch(&r.batch_id)
        .expect("record");
    for id in ["a", "b", "c"] {
        let a = &rec.task(id).expect("task").attempts[0];
        assert!(
            a.place
                .as_deref()
                .is_some_and(|p| p.starts_with(runner.as_str())),
            "{:?}",
            a.place
        );
        let b = a.budget.expect("the attempt's budget");
        assert!((b.reserved_usd - budget / 3.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.charged_usd, a.result.as_ref().expect("result").cost_usd);
    }
    assert_no_container(&docker, &r.batch_id).await;
    if runner == RunnerKind::Swarm {
        super::swarm::assert_no_job_for_repo(&docker, repo.path()).await;
    }
}
