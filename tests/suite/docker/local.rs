//! The fake CLI in containers on the local engine.

use aicli::BatchOptions;
use aicli::providers::{SessionStatus, TaskSpec};
use tokio_util::sync::CancellationToken;

use super::support::{self, assert_no_container, docker_config, fake_provider, local_host};
use crate::suite::support::{collect_events, git, git_repo};

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
    let Some(docker) = support::local_engine("a_run_in_a_container").await else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let repo = git_repo();
    let engine = support::engine(
        docker_config(vec![local_host()], &image),
        fake_provider("claude", "text"),
    );
    let mut opts = BatchOptions::new(repo.path());
    opts.provider = Some("fake".into());
    let (tx, events) = collect_events();
    let batch = engine
        .run_batch(
            vec![task("t1", &["--touch", "made-in-container.txt", "--require-file", "/workspace/README.md"])],
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
    // Only the agent's file is new in the worktree: no MCP config, prompt or home.
    let status = git(&wt, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status, "?? made-in-container.txt");
    assert_no_container(&docker, &batch.batch_id).await;
}
