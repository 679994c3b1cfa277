//! `aicli discard TASK`: remove a task's worktree and branch, its work with them. What
//! that loses (commits that never landed, uncommitted changes) is said first, and the
//! command does nothing without `--yes` when it would lose anything.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::RepoArgs;
use super::common::{engine, repo_dir, usage};
use crate::record::{TaskState, Write};

/// `aicli discard` flags.
#[derive(Debug, Clone, Args)]
pub struct DiscardArgs {
    /// The task: `TASK` (its newest batch) or `BATCH/TASK`.
    task: String,
    /// Discard even when work would be lost.
    #[arg(long)]
    yes: bool,
    /// Print what happened as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(super) async fn discard(
    config_path: Option<&Path>,
    a: DiscardArgs,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let Some((batch, id)) = store.find_tasks(&a.task).into_iter().next() else {
        return Err(usage(format!(
            "no task '{}' in {}",
            a.task,
            store.root().display()
        )));
    };
    let name = format!("{}/{id}", batch.batch_id());
    let mut rec = batch.task(&id).map_err(usage)?;
    if matches!(rec.state, TaskState::Running | TaskState::Queued) {
        return Err(usage(format!(
            "{name} is {}: cancel it first (aicli cancel {name})",
            rec.state.as_str()
        )));
    }
    let here = batch.spec().map_err(usage)?.repo;
    let (Some(branch), Some(wt)) = (rec.branch.clone(), rec.worktree.clone()) else {
        outln!("{name}: nothing to discard (it has no worktree)");
        return Ok(ExitCode::SUCCESS);
    };
    let lost = crate::deliver::discard::lost(&here, &rec).await?;
    if !lost.is_nothing() && !a.yes {
        return Err(usage(format!(
            "discarding {name} would lose {} (branch {branch}, worktree {}): run it again with --yes to discard it",
            lost.describe(),
            wt.display()
        )));
    }
    let r = crate::worktree::Repo::open(&here).await?;
    r.discard(&wt, &branch).await?;
    rec.worktree = None;
    rec.branch = None;
    batch
        .write_task(&rec, Write::Settled)
        .map_err(anyhow::Error::new)?;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({"task": name, "branch": branch, "worktree": wt, "lost": lost.describe()})
        );
    } else {
        outln!(
            "{name}: worktree {} and branch {branch} removed; lost: {}",
            wt.display(),
            lost.describe()
        );
    }
    Ok(ExitCode::SUCCESS)
}
