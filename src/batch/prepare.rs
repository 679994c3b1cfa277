//! Worktrees made ahead: while the pool's places are taken, the tasks next in its queue
//! get their worktrees, so that each starts at once when its turn comes. A worktree made
//! ahead is the one the task's first attempt would make (same directory and branch); the
//! attempt takes it over and records it, a task that never starts records it as its own
//! (`aicli resume` then runs there), and one that aicli's death left unrecorded is taken
//! over by the next attempt of its task, as an interrupted run's worktree is.

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::{Batch, TaskRun};
use crate::worktree::Worktree;

/// The worktrees being made ahead, by task.
pub(super) type Prepared =
    std::sync::Mutex<std::collections::HashMap<String, JoinHandle<Result<Worktree, String>>>>;

impl Batch {
    /// Starts making `task`'s worktree, unless it has one, is being given one, resumes a
    /// session (it runs where that session ran), or the batch runs without worktrees.
    pub(super) fn prepare(self: &Arc<Self>, task: &TaskRun) {
        if self.repo.is_none()
            || task.rec.worktree.is_some()
            || task.origin.is_some()
            || task.recorded.is_some()
        {
            return;
        }
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if prepared.contains_key(task.id()) {
            return;
        }
        let b = self.clone();
        let id = task.id().to_owned();
        let handle = tokio::spawn(async move {
            match &b.repo {
                Some(repo) => crate::worktree::prepare_task(repo, &b.spec, &id).await,
                None => Err("the batch runs without worktrees".to_owned()),
            }
        });
        prepared.insert(task.id().to_owned(), handle);
    }

    /// Gives `task` the worktree made ahead for it, if one was: recorded in its record
    /// (written by whoever writes it next). A failure is left to the attempt, which makes
    /// the worktree again and says why it cannot.
    pub(super) async fn take_prepared(&self, task: &mut TaskRun) {
        let handle = self
            .prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(task.id());
        let Some(handle) = handle else {
            return;
        };
        match handle.await {
            Ok(Ok(wt)) if task.rec.worktree.is_none() => {
                task.rec.branch = Some(wt.branch);
                task.rec.worktree = Some(wt.path);
                task.rec.base_commit = Some(wt.base);
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(task = %task.id(), error = %e, "making the worktree ahead failed");
            }
            Err(e) => tracing::warn!(task = %task.id(), error = %e, "making the worktree ahead panicked"),
        }
    }

    /// A queued task that will never start in this invocation (the batch was cancelled,
    /// or its budget spent): its worktree made ahead becomes its own, then it ends as
    /// such a task does (interrupted, or failed for the budget).
    pub(super) async fn never_started(self: Arc<Self>, mut task: TaskRun) {
        let had = task.rec.worktree.is_some();
        self.take_prepared(&mut task).await;
        if !self.budget.as_ref().is_some_and(|p| p.is_spent()) {
            // Cancelled: a queued task is `interrupted` (with no attempt), as the tasks cut
            // off are, so every view says the one word for what `aicli resume` finishes;
            // a continuation's task (blocked, interrupted, parked) stays as it was.
            let queued = task.rec.state == crate::record::TaskState::Queued;
            if queued {
                task.rec.state = crate::record::TaskState::Interrupted;
            }
            if !queued && had == task.rec.worktree.is_some() {
                return;
            }
            if let Err(e) = self
                .record
                .write_task(&task.rec, crate::record::Write::Progress)
            {
                tracing::warn!(task = %task.id(), error = %e, "cannot record a task that never started");
            }
            return;
        }
        self.never_started_for_budget(task).await;
    }
}
