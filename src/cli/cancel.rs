//! `aicli cancel`: stop a batch, or one task of it, that another aicli process runs.
//! The request goes through the batch's record (its control file); the process running
//! it stops the run as Ctrl-C would, and this command waits until it has.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::RepoArgs;
use super::common::{engine, repo_dir};

pub(super) async fn cancel(
    config_path: Option<&Path>,
    target: &str,
    wait: u64,
    json_out: bool,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let by = format!("aicli cancel (pid {})", std::process::id());
    let t = engine.request_cancel(&store, target, &by)?;
    let batch_id = t.batch.batch_id();
    if !json_out {
        eprintln!(
            "asked the aicli process running {} to cancel {}; waiting up to {wait}s",
            batch_id,
            t.task
                .as_deref()
                .map_or("the batch".to_owned(), |x| format!("task {x}"))
        );
    }
    let deadline = Instant::now() + Duration::from_secs(wait);
    let mut left: Vec<String> = t.held.clone();
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left.retain(|id| t.batch.task_held_elsewhere(id));
    }
    let tasks: Vec<serde_json::Value> = t
        .held
        .iter()
        .map(|id| {
            let rec = t.batch.task(id).ok();
            let result = rec
                .as_ref()
                .and_then(|r| r.attempts.last())
                .and_then(|a| a.result.as_ref());
            serde_json::json!({
                "task_id": id,
                "state": rec.as_ref().map(|r| r.state),
                "error_kind": result.and_then(|r| r.error_kind),
                "still_running": left.contains(id),
            })
        })
        .collect();
    if json_out {
        outln!(
            "{}",
            serde_json::json!({
                "batch_id": batch_id,
                "task": t.task,
                "tasks": tasks,
                "settled": left.is_empty(),
            })
        );
    } else {
        for v in &tasks {
            let state = v["state"].as_str().unwrap_or("?");
            let kind = v["error_kind"]
                .as_str()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default();
            let still = if v["still_running"] == true {
                ", still running"
            } else {
                ""
            };
            outln!(
                "{batch_id}/{}: {state}{kind}{still}",
                v["task_id"].as_str().unwrap_or("?")
            );
        }
    }
    if left.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "aicli: {} still running after {wait}s: the process running the batch has not stopped {} yet",
            left.len(),
            if left.len() == 1 { "it" } else { "them" }
        );
        Ok(ExitCode::from(1))
    }
}
