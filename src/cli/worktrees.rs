//! `aicli worktrees`: list and prune aicli's worktrees.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::record::TaskState;
use crate::worktree::{Cleanup, Repo};
use clap::Subcommand;
use serde_json::json;

use super::RepoArgs;
use super::common::{engine, repo_dir, usage};

/// `aicli worktrees ...`.
#[derive(Debug, Subcommand)]
pub enum WorktreesAction {
    /// Remove every aicli worktree (and branch) that holds no work. The worktrees of
    /// blocked, interrupted or unfinished tasks are kept: their sessions resume there.
    Prune,
}

/// What the run records say of worktrees: those that must stay, with why (a task that
/// is blocked on a question, interrupted, running or queued continues in its worktree),
/// and those of tasks whose work landed, with the head that landed.
fn by_records(
    config_path: Option<&Path>,
    repo: &Path,
    r: &RepoArgs,
) -> (BTreeMap<PathBuf, String>, BTreeMap<PathBuf, String>) {
    let (mut keep, mut landed) = (BTreeMap::new(), BTreeMap::new());
    let Ok(engine) = engine(config_path) else {
        return (keep, landed);
    };
    let store = engine.store(repo, r.runs_dir.as_deref());
    for b in store.list() {
        let Ok(tasks) = b.tasks() else { continue };
        for t in tasks {
            if let (Some(l), Some(w)) = (&t.landed, &t.worktree) {
                landed.insert(
                    w.canonicalize().unwrap_or_else(|_| w.clone()),
                    l.head.clone(),
                );
            }
            let why = match t.state {
                TaskState::Blocked => "blocked on a question (answer it with aicli answer",
                TaskState::Interrupted => "interrupted (finish it with aicli resume",
                TaskState::Parked => "parked at a usage limit (it goes on with aicli resume",
                TaskState::Running | TaskState::Queued => "not finished (aicli resume",
                TaskState::Succeeded | TaskState::Failed => continue,
            };
            let Some(w) = &t.worktree else { continue };
            let reason = match t.state {
                TaskState::Blocked => format!("{why} {}/{} \"...\")", b.batch_id(), t.task.id),
                TaskState::Interrupted
                | TaskState::Parked
                | TaskState::Running
                | TaskState::Queued
                | TaskState::Succeeded
                | TaskState::Failed => format!("{why} {})", b.batch_id()),
            };
            keep.insert(w.canonicalize().unwrap_or_else(|_| w.clone()), reason);
        }
    }
    (keep, landed)
}

pub(super) async fn worktrees(
    config_path: Option<&Path>,
    r: RepoArgs,
    json_out: bool,
    action: Option<WorktreesAction>,
) -> anyhow::Result<ExitCode> {
    let dir = repo_dir(&r)?;
    let repo = Repo::open(&dir).await.map_err(|e| {
        usage(format!(
            "{e}: `aicli worktrees` lists the worktrees of a git repository (use --repo DIR)"
        ))
    })?;
    let (keep, landed) = by_records(config_path, repo.root(), &r);
    match action {
        None => {
            let list = repo.list().await?;
            if json_out {
                let v: Vec<_> = list
                    .iter()
                    .map(|w| {
                        let kept = keep.get(&w.path.canonicalize().unwrap_or_else(|_| w.path.clone()));
                        json!({"worktree": w, "prunable": w.holds_work.is_none() && kept.is_none(), "kept_for": kept})
                    })
                    .collect();
                outln!("{}", serde_json::to_string(&v)?);
            } else if list.is_empty() {
                outln!("no aicli worktrees");
            } else {
                for w in list {
                    let at = w.path.canonicalize().unwrap_or_else(|_| w.path.clone());
                    let kept = keep.get(&at);
                    let state = match (&w.holds_work, kept) {
                        (_, Some(why)) => format!("kept: {why}"),
                        _ if landed.get(&at) == Some(&w.head) => "landed (prunable)".to_owned(),
                        (Some(h), None) => format!("holds work: {h}"),
                        (None, None) => "no work (prunable)".to_owned(),
                    };
                    outln!("{}  {}  {state}", w.branch, w.path.display());
                }
            }
        }
        Some(WorktreesAction::Prune) => {
            let done = repo.prune_keeping(&keep, &landed).await?;
            if json_out {
                let v: Vec<_> = done
                    .iter()
                    .map(|(i, c)| json!({"worktree": i, "cleanup": c}))
                    .collect();
                outln!("{}", serde_json::to_string(&v)?);
            } else {
                for (i, c) in &done {
                    match c {
                        Cleanup::Removed => outln!("removed {} ({})", i.branch, i.path.display()),
                        Cleanup::Kept { reason } => outln!("kept {}: {reason}", i.branch),
                    };
                }
                if done.is_empty() {
                    outln!("no aicli worktrees");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
