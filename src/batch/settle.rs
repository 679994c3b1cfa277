//! A task's end in this invocation: its worktree cleaned up (or kept, and said why),
//! its record settled, its subscribers told, the notify hook run; and the batch's
//! totals, read back from the records.

use std::sync::Arc;
use std::time::Duration;

use aicli_providers::{ErrorKind, PendingQuestion, SessionResult, SessionStatus};

use super::attempt::BUDGET_SPENT_BEFORE_START;
use super::{Batch, TaskRun};
use crate::live::BatchEvent;
use crate::record::{AttemptRecord, BatchResult, RunStore, TaskState, Write};
use crate::worktree::{Cleanup, Worktree};

/// A blocked task, for `aicli blocked`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct BlockedTask {
    /// Its batch.
    pub batch_id: String,
    /// The task.
    pub task_id: String,
    /// Its provider.
    pub provider: String,
    /// The CLI session an answer resumes.
    pub session_id: Option<String>,
    /// The question.
    pub question: PendingQuestion,
    /// Answers given before (a task can block several times).
    pub answers: usize,
}

/// Every blocked task in `store`, oldest question first.
pub(crate) fn blocked(store: &RunStore) -> Vec<BlockedTask> {
    let mut out = Vec::new();
    for b in store.list() {
        let Ok(tasks) = b.tasks() else { continue };
        for t in tasks {
            if t.state != TaskState::Blocked {
                continue;
            }
            let Some(r) = t.latest_result() else { continue };
            let Some(q) = &r.question else { continue };
            out.push(BlockedTask {
                batch_id: b.batch_id(),
                task_id: t.task.id.clone(),
                provider: t.provider.clone(),
                session_id: r.session_id.clone(),
                question: q.clone(),
                answers: t.answers.len(),
            });
        }
    }
    out.sort_by(|a, b| a.question.asked_at.cmp(&b.question.asked_at));
    out
}

impl Batch {
    /// After the last attempt of a task in this invocation: its worktree cleaned up (or
    /// kept), its record settled, its subscribers told. A continuation that never
    /// started leaves the task as it was.
    pub(super) async fn settle(&self, mut task: TaskRun, mut result: SessionResult) {
        if !task.kept {
            self.settle_worktree(&mut task, &mut result).await;
            let state = TaskState::of(&result);
            if matches!(state, TaskState::Succeeded | TaskState::Failed) {
                // No answer will continue this task: its home's login copies go; its
                // session store stays for a task that resumes the session by id.
                if let Ok(p) = self.engine.registry.get(&task.rec.provider) {
                    crate::runner::docker::forget_logins(&self.task_home(task.id()), p.config());
                }
            }
            if let Some(a) = task.rec.attempts.last_mut() {
                a.result = Some(result.clone());
            }
            task.rec.state = state;
            task.rec.parked = None;
            task.persist(&self.record, Write::Settled).await;
        }
        if task.kept
            && let Ok(mut k) = self.kept.lock()
        {
            k.insert(task.id().to_owned(), result.clone());
        }
        // Settled: another process may now answer or resume it, or prune its worktree.
        task.lock = None;
        task.worktree_lock = None;
        let task_id: Arc<str> = Arc::from(result.task_id.as_str());
        if let (false, SessionStatus::Blocked, Some(q)) =
            (task.kept, result.status, &result.question)
        {
            self.live.send(BatchEvent::TaskBlocked {
                task_id: task_id.clone(),
                question: q.clone(),
            });
        }
        if !task.kept {
            super::notify::task_settled(&self.engine, &self.spec, &result).await;
        }
        self.live.send(BatchEvent::TaskFinished {
            task_id,
            result: Arc::new(result),
        });
    }

    /// The task's worktree after its run: kept while it waits for an answer or holds
    /// work (the result then names it), removed with its branch otherwise.
    async fn settle_worktree(&self, task: &mut TaskRun, result: &mut SessionResult) {
        let rec = &mut task.rec;
        let (Some(repo), Some(path), Some(branch), Some(base)) = (
            &self.repo,
            rec.worktree.clone(),
            rec.branch.clone(),
            rec.base_commit.clone(),
        ) else {
            return;
        };
        let wt = Worktree {
            path: path.clone(),
            branch: branch.clone(),
            base,
        };
        let cleanup = if result.status == SessionStatus::Blocked {
            Ok(Cleanup::Kept {
                reason: "the task waits for an answer".to_owned(),
            })
        } else {
            repo.cleanup(&wt).await
        };
        match cleanup {
            Ok(Cleanup::Removed) => {
                rec.worktree = None;
                rec.branch = None;
                return;
            }
            Ok(Cleanup::Kept { reason }) => {
                tracing::info!(task = %result.task_id, %reason, "worktree kept")
            }
            Err(e) => {
                tracing::warn!(task = %result.task_id, error = %e, "worktree cleanup failed; kept")
            }
        }
        result.branch = Some(branch);
        result.worktree = Some(path);
    }

    /// A queued task that never started because the budget was spent: recorded as
    /// such, and settled.
    pub(super) async fn never_started_for_budget(&self, mut task: TaskRun) {
        let mut r = SessionResult::not_started(
            &task.rec.provider,
            ErrorKind::Budget,
            BUDGET_SPENT_BEFORE_START,
        );
        r.task_id = task.id().to_owned();
        let offset = self.record.events_len(task.id());
        let attempt = task.rec.attempts.len() as u32 + 1;
        task.rec.attempts.push(AttemptRecord::not_started(
            attempt,
            task.next.kind,
            offset,
            r.clone(),
        ));
        self.settle(task, r).await;
    }

    /// The batch's result, from the records on disk: every write of this invocation is
    /// done by now, and a task settled here may since have been answered by another
    /// process.
    /// Where the batch's work overlaps ([`crate::deliver::overlaps`]): between its
    /// tasks' branches, and with the branch checked out in the repository. None without
    /// worktrees or with commits off (the work is then not on the branches).
    pub(super) async fn overlaps(&self) -> Vec<crate::record::Overlap> {
        let Some(repo) = &self.repo else {
            return Vec::new();
        };
        if self.engine.config.engine.commit.mode == aicli_providers::CommitMode::Off {
            return Vec::new();
        }
        let works: Vec<crate::deliver::overlaps::TaskWork> = self
            .record
            .tasks()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| {
                Some(crate::deliver::overlaps::TaskWork {
                    base: r.base_commit?,
                    branch: r.branch?,
                    task: r.task.id,
                })
            })
            .collect();
        let started = std::time::Instant::now();
        match crate::deliver::overlaps::find(repo.root(), &works).await {
            Ok(v) => {
                tracing::info!(tasks = works.len(), overlaps = v.len(), ms = started.elapsed().as_millis() as u64, "overlaps checked by trial merges");
                v
            }
            Err(e) => {
                tracing::warn!(error = %e, "the overlaps between tasks could not be checked");
                Vec::new()
            }
        }
    }

    pub(super) fn totals(&self, wall: Duration) -> BatchResult {
        let all = self.record.tasks().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the task records");
            Vec::new()
        });
        let mut results = Vec::new();
        let mut task_costs = Vec::new();
        let (mut total, mut estimated, mut charged, mut unknown) = (0.0, 0.0, 0.0, 0);
        for mut rec in all {
            let (spent, unk) = rec.spent();
            let estimated_usd = rec.estimated();
            total += spent;
            estimated += estimated_usd;
            charged += rec.charged();
            task_costs.push(crate::record::TaskCost {
                task_id: rec.task.id.clone(),
                cost_usd: spent,
                estimated_usd,
                unknown: unk,
            });
            if unk {
                unknown += 1;
            }
            // Moved out of the record, not copied: a batch holds one copy of each answer.
            let latest = rec.attempts.iter_mut().rev().find_map(|a| a.result.take());
            let mut r = latest.unwrap_or_else(|| {
                let mut r = SessionResult::not_started(
                    &rec.provider,
                    ErrorKind::Cancelled,
                    "never started (aicli resume runs it)",
                );
                if rec.state == TaskState::Interrupted {
                    r.status = SessionStatus::Interrupted;
                }
                r
            });
            // Still parked (the batch stopped while it waited): `aicli resume` goes on.
            if rec.state == TaskState::Parked {
                r.status = SessionStatus::Interrupted;
            }
            r.task_id = rec.task.id;
            results.push(r);
        }
        let count = |s: SessionStatus| results.iter().filter(|r| r.status == s).count();
        BatchResult {
            batch_id: self.spec.batch_id.clone(),
            provider: self.spec.provider.clone(),
            timestamp: self.spec.created_at.clone(),
            n_tasks: results.len(),
            n_succeeded: count(SessionStatus::Succeeded),
            n_failed: count(SessionStatus::Failed),
            n_interrupted: count(SessionStatus::Interrupted),
            n_blocked: count(SessionStatus::Blocked),
            tasks: results,
            total_cost_usd: total,
            n_cost_unknown: unknown,
            wall_clock_ms: wall.as_millis() as u64,
            budget_usd: self.spec.budget_usd,
            budget_remaining_usd: self.spec.budget_usd.map(|b| (b - charged).max(0.0)),
            estimated_cost_usd: estimated,
            budget_charged_usd: self.spec.budget_usd.map(|_| charged),
            budget_reserved_usd: self.budget.as_ref().map(|p| p.figures().peak_reserved),
            runs_dir: self.record.dir().to_path_buf(),
            overlaps: Vec::new(),
            task_costs,
        }
    }
}
