//! Where a task's worktree goes, and on which branch: `<repo>/.aicli/worktrees/<batch>/
//! <task>` on `aicli/<batch>/<task>`, made on the task's first attempt from the batch's
//! base. A task that resumes a CLI session gets the directory that session ran in (the
//! CLIs find a session from the directory it ran in): the same worktree while it is
//! kept, its branch and work included, else a new worktree at the same path.

use std::path::{Path, PathBuf};

use super::{BRANCH_PREFIX, Repo, Worktree};
use crate::record::{BatchSpec, SessionRun, TaskRecord};

/// The worktree of batch `batch`'s task `task` in `repo`.
pub fn task_worktree_path(repo: &Repo, batch: &str, task: &str) -> PathBuf {
    repo.state_dir().join("worktrees").join(batch).join(task)
}

/// The task's working directory: its worktree (`rec`'s, when it has one that is still
/// there; else made now, and recorded in `rec`). `origin` is the last run of the session
/// the task resumes, if it resumes one.
pub async fn place_task(
    repo: &Repo,
    spec: &BatchSpec,
    rec: &mut TaskRecord,
    origin: Option<&SessionRun>,
) -> Result<PathBuf, String> {
    if let (Some(path), Some(_)) = (&rec.worktree, &rec.branch)
        && path.is_dir()
    {
        return Ok(path.clone());
    }
    let mut path = task_worktree_path(repo, &spec.batch_id, &rec.task.id);
    if let Some(o) = origin.filter(|o| o.worktrees) {
        let theirs = o
            .task
            .worktree
            .clone()
            .unwrap_or_else(|| task_worktree_path(repo, &o.batch_id, &o.task.task.id));
        match (&o.task.worktree, &o.task.branch, &o.task.base_commit) {
            (Some(kept), Some(branch), Some(base)) if kept.is_dir() => {
                rec.branch = Some(branch.clone());
                rec.worktree = Some(kept.clone());
                rec.base_commit = Some(base.clone());
                return Ok(kept.clone());
            }
            _ if !theirs.exists() => path = theirs,
            _ => tracing::warn!(
                task = %rec.task.id,
                path = %theirs.display(),
                "the resumed session's directory is in use by something aicli did not record; the task runs in a new worktree"
            ),
        }
    }
    let wt = new_worktree(repo, spec, &rec.task.id, &path).await?;
    rec.branch = Some(wt.branch);
    rec.worktree = Some(wt.path.clone());
    rec.base_commit = Some(wt.base);
    Ok(wt.path)
}

/// A new task's worktree made ahead of its first attempt (while earlier tasks run), for
/// [`place_task`] to find: the same directory and branch it would make. One that aicli's
/// death left unrecorded is taken over by the task's next attempt, as a worktree of an
/// interrupted run is ([`Repo::add_worktree`] on an existing branch).
pub async fn prepare_task(repo: &Repo, spec: &BatchSpec, task_id: &str) -> Result<Worktree, String> {
    let path = task_worktree_path(repo, &spec.batch_id, task_id);
    new_worktree(repo, spec, task_id, &path).await
}

async fn new_worktree(
    repo: &Repo,
    spec: &BatchSpec,
    task_id: &str,
    path: &Path,
) -> Result<Worktree, String> {
    let branch = format!("{BRANCH_PREFIX}{}/{task_id}", spec.batch_id);
    repo.add_worktree(&branch, path, &spec.base_ref)
        .await
        .map_err(|e| e.to_string())
}
