//! Worktrees made ahead: while the pool's places are taken, the tasks next in its queue
//! get their worktrees, so that each starts at once when its turn comes. A worktree made
//! ahead is the one the task's first attempt would make (same directory and branch); the
//! attempt takes it over and records it, a task that never starts records it as its own
//! (`aicli resume` then runs there), and one that aicli's death left unrecorded is taken
//! over by the next attempt of its task, as an interrupted run's worktree is. Once the
//! worktree is there (or at once, in a batch without worktrees) the task's runner makes
//! what it can ahead too: a started container ([`crate::runner::Runner::warm`]).

use std::sync::Arc;

use tokio::task::JoinHandle;

use aicli_providers::{RunnerKind, SharedProvider, TaskSpec};

use super::{Batch, TaskRun};
use crate::runner::PlaceRequest;
use crate::worktree::Worktree;

/// What is being made ahead, by task: its worktree (none when the batch runs without
/// worktrees), and its runner's warm container as a side effect.
pub(super) type Prepared = std::sync::Mutex<
    std::collections::HashMap<String, JoinHandle<Result<Option<Worktree>, String>>>,
>;

impl Batch {
    /// Starts making what `task`'s first attempt needs: its worktree (unless it has one
    /// or the batch runs without worktrees), then, for a task that runs in a container,
    /// its runner's warm container. Nothing for a task that resumes a session (it runs
    /// where that session ran) or was recorded before.
    pub(super) fn prepare(self: &Arc<Self>, task: &TaskRun) {
        if task.rec.worktree.is_some() || task.origin.is_some() || task.recorded.is_some() {
            return;
        }
        // The provider it runs in a container with (else nothing to warm).
        let in_container = self
            .engine
            .registry
            .get(&task.rec.provider)
            .ok()
            .filter(|p| self.engine.runner_kind(&task.rec.task, p) == RunnerKind::Docker);
        if self.repo.is_none() && in_container.is_none() {
            return;
        }
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if prepared.contains_key(task.id()) {
            return;
        }
        let b = self.clone();
        let id = task.id().to_owned();
        let spec = task.rec.task.clone();
        let attempt = task.rec.attempts.len() as u32 + 1;
        let handle = tokio::spawn(async move {
            let wt = match &b.repo {
                Some(repo) => Some(crate::worktree::prepare_task(repo, &b.spec, &id).await?),
                None => None,
            };
            if let Some(provider) = in_container {
                let (workspace, branch) = match &wt {
                    Some(w) => (w.path.clone(), Some(w.branch.as_str())),
                    None => (b.spec.repo.clone(), None),
                };
                b.warm(&spec, &provider, attempt, &workspace, branch).await;
            }
            Ok(wt)
        });
        prepared.insert(task.id().to_owned(), handle);
    }

    /// Has the Docker runner make ahead what attempt `attempt` of `task` will need in
    /// `workspace` (a started container: [`crate::runner::Runner::warm`]).
    async fn warm(
        &self,
        task: &TaskSpec,
        provider: &SharedProvider,
        attempt: u32,
        workspace: &std::path::Path,
        branch: Option<&str>,
    ) {
        let Ok(runner) = self.engine.runner(RunnerKind::Docker).await else {
            return;
        };
        let base_env = self.cli_env(provider, task);
        let workdir = super::attempt::workdir(workspace, task);
        let agent_port = match &self.engine.agent_server {
            Some(s) => s.loopback_port().await,
            None => None,
        };
        let private_dir = self.private_dir(&task.id, attempt);
        let task_home = self.task_home(&task.id);
        let req = PlaceRequest {
            batch_id: &self.spec.batch_id,
            task_id: &task.id,
            attempt,
            provider,
            workspace,
            workdir: &workdir,
            private_dir: &private_dir,
            task_home: &task_home,
            session_home: None,
            branch,
            inherited_env: &base_env,
            agent_port,
            resources: task.resources.as_ref(),
            constraints: &task.constraints,
        };
        runner.warm(&req).await;
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
            Ok(Ok(Some(wt))) if task.rec.worktree.is_none() => {
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
            // Its end in this invocation: `task.json` too, the journal's line shared with
            // the other tasks cut off in one group commit.
            task.persist(&self.record, crate::record::Write::Settled)
                .await;
            return;
        }
        self.never_started_for_budget(task).await;
    }
}
