//! `aicli worktrees`: list and prune aicli's worktrees.

use std::process::ExitCode;

use aicli::worktree::{Cleanup, Repo};
use clap::Subcommand;
use serde_json::json;

use super::RepoArgs;
use super::common::repo_dir;

/// `aicli worktrees ...`.
#[derive(Debug, Subcommand)]
pub enum WorktreesAction {
    /// Remove every aicli worktree (and branch) that holds no work.
    Prune,
}

pub(super) async fn worktrees(
    r: RepoArgs,
    json_out: bool,
    action: Option<WorktreesAction>,
) -> anyhow::Result<ExitCode> {
    let repo = Repo::open(&repo_dir(&r)?).await?;
    match action {
        None => {
            let list = repo.list().await?;
            if json_out {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no aicli worktrees");
            } else {
                for w in list {
                    println!(
                        "{}  {}  {}",
                        w.branch,
                        w.path.display(),
                        w.holds_work
                            .map(|h| format!("holds work: {h}"))
                            .unwrap_or_else(|| "no work (prunable)".into())
                    );
                }
            }
        }
        Some(WorktreesAction::Prune) => {
            let done = repo.prune().await?;
            if json_out {
                let v: Vec<_> = done
                    .iter()
                    .map(|(i, c)| json!({"worktree": i, "cleanup": c}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for (i, c) in &done {
                    match c {
                        Cleanup::Removed => println!("removed {} ({})", i.branch, i.path.display()),
                        Cleanup::Kept { reason } => println!("kept {}: {reason}", i.branch),
                    }
                }
                if done.is_empty() {
                    println!("no aicli worktrees");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
