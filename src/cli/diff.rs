//! `aicli diff TASK`: a task's work, the commits on its branch against the commit it
//! started from (`--stat` by default, `--patch` for the whole diff), and what is still
//! uncommitted in its worktree.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::RepoArgs;
use super::common::{engine, repo_dir, usage};
use crate::util::count;

/// `aicli diff` flags.
#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The task: `TASK` (its newest batch) or `BATCH/TASK`.
    task: String,
    /// The whole diff (default: the list of files with their changed lines).
    #[arg(long, conflicts_with = "json")]
    patch: bool,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(super) async fn diff(
    config_path: Option<&Path>,
    a: DiffArgs,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    let Some((batch, id)) = store.find_tasks(&a.task).into_iter().next() else {
        return Err(usage(format!(
            "no task '{}' in {} (`aicli runs` lists the batches)",
            a.task,
            store.root().display()
        )));
    };
    let name = format!("{}/{id}", batch.batch_id());
    let rec = batch.task(&id).map_err(usage)?;
    let spec = batch.spec().map_err(usage)?;
    if !spec.worktrees {
        return Err(usage(format!(
            "{name} ran without a worktree: its changes are in {} itself (`git diff` there)",
            spec.repo.display()
        )));
    }
    let here = &spec.repo;
    let branch = rec.branch.clone().filter(|_| rec.base_commit.is_some());
    let exists = match &branch {
        Some(b) => {
            let r = format!("refs/heads/{b}");
            crate::worktree::git(here, &["rev-parse", "--verify", "--quiet", &r])
                .await
                .is_ok()
        }
        None => false,
    };
    let (Some(base), Some(branch)) = (rec.base_commit.clone(), branch.filter(|_| exists)) else {
        outln!("{name}: no work (its run changed nothing, or has not run: it has no branch)");
        return Ok(ExitCode::SUCCESS);
    };
    let stat = crate::deliver::diff::stat(here, &base, &branch).await?;
    let head = crate::worktree::git(here, &["rev-parse", &branch]).await?;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "batch_id": batch.batch_id(),
                "task_id": id,
                "branch": branch,
                "base": base,
                "head": head,
                "stat": stat,
                "worktree": rec.worktree,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{name} on {branch}: {} over {} (against its base {})",
        stat.short(),
        count(u64::from(stat.commits), "commit", "commits"),
        &base[..base.len().min(10)]
    );
    let range = [base.as_str(), branch.as_str()];
    let args: Vec<&str> = if a.patch {
        [&["diff", "--no-ext-diff"][..], &range[..]].concat()
    } else {
        [&["diff", "--stat", "--no-ext-diff"][..], &range[..]].concat()
    };
    crate::worktree::git_to_stdout(here, &args).await?;
    if let Some(wt) = rec.worktree.as_deref().filter(|w| w.join(".git").exists()) {
        let status = crate::worktree::git(
            wt,
            &[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=all",
            ],
        )
        .await?;
        let changes: Vec<&str> = status.lines().collect();
        if !changes.is_empty() {
            outln!(
                "not committed, in the worktree {}: {}",
                wt.display(),
                count(changes.len() as u64, "change", "changes")
            );
            for c in changes.iter().take(20) {
                outln!("  {c}");
            }
            if changes.len() > 20 {
                outln!("  … {} more", changes.len() - 20);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
