//! `aicli blocked`: every task waiting on a human.

use std::path::Path;
use std::process::ExitCode;

use super::RepoArgs;
use super::common::{engine, repo_dir};

pub(super) fn blocked(
    config_path: Option<&Path>,
    r: RepoArgs,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let list = engine.blocked(&store);
    if json_out {
        outln!("{}", serde_json::to_string(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("no blocked tasks in {}", store.root().display());
    }
    for b in list {
        let age = humantime::parse_rfc3339(&b.question.asked_at)
            .ok()
            .and_then(crate::util::ago)
            .unwrap_or_else(|| "?".into());
        outln!(
            "{}/{} ({}) asked {age} ago:",
            b.batch_id,
            b.task_id,
            b.provider
        );
        outln!("  {}", b.question.question);
        if !b.question.options.is_empty() {
            outln!("  options: {}", b.question.options.join(" / "));
        }
        outln!(
            "  answer with: aicli answer {}/{} \"<your answer>\"",
            b.batch_id,
            b.task_id
        );
    }
    Ok(ExitCode::SUCCESS)
}
