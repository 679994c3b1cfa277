//! [`TaskRun`]: one task's state for one invocation of the engine (a batch, an answer,
//! a resume), owned by whoever runs the task at the moment — the pool's queue, the
//! attempt in flight, the settling — and moved between them, never shared.

use std::time::SystemTime;

use aicli_providers::{AnsweredQuestion, SessionResult, SessionTotals, TaskSpec};

use super::continuation::Next;
use crate::record::{
    AnswerRecord, AttemptKind, AttemptRecord, BatchRecord, SessionRun, TaskLock, TaskRecord,
    TaskState, Write,
};
use crate::worktree::WorktreeLock;

/// One task of an invocation (see the module docs).
#[derive(Debug)]
pub(crate) struct TaskRun {
    /// Its record, as it is now (written at each attempt's start and end).
    pub rec: TaskRecord,
    /// How its next attempt continues what came before.
    pub next: Next,
    /// For a task that resumes a CLI session (`resume_session_id`): that session's last
    /// run, found in the run records. The task runs where the session ran (its worktree,
    /// or a new one at the same path) and its per-run figures subtract the session's
    /// totals at the end of that run.
    pub origin: Option<SessionRun>,
    /// A human's answer, recorded when the first attempt starts.
    pub answer: Option<AnswerRecord>,
    /// The task's last attempt had finished before aicli stopped (its stream holds the
    /// CLI's final event): its result, and the task is closed with it, as at the end of
    /// a run, without running anything.
    pub recorded: Option<SessionResult>,
    /// The continuation (an answer, a recovery) did not start: the task keeps the state
    /// it had (blocked with its question, interrupted), and settling leaves it so.
    pub kept: bool,
    /// This invocation's hold on the task's record.
    pub lock: Option<TaskLock>,
    /// This invocation's hold on the task's worktree (`aicli worktrees prune` skips it).
    pub worktree_lock: Option<WorktreeLock>,
    /// The budget reservation of the attempt in flight: settled by its run, or, when the
    /// run panicked, by the attempt with what the run streamed.
    pub reservation: Option<std::sync::Arc<crate::budget::Reservation>>,
    /// When the task's timeout ends while it is parked at a usage limit, and for the run
    /// that continues it: the timeout counts from the start of the run that met the
    /// limit, through the wait.
    pub deadline: Option<SystemTime>,
    /// The task's state when this invocation took it (what a continuation that never
    /// started leaves it in, when that is not implied by its kind).
    pub state_before: TaskState,
}

impl TaskRun {
    /// A task of this invocation, held with `lock`, continuing as `next`.
    pub(crate) fn new(rec: TaskRecord, next: Next, lock: TaskLock) -> TaskRun {
        TaskRun {
            state_before: rec.state,
            rec,
            next,
            origin: None,
            answer: None,
            recorded: None,
            kept: false,
            lock: Some(lock),
            worktree_lock: None,
            reservation: None,
            deadline: None,
        }
    }

    /// The task's id.
    pub(crate) fn id(&self) -> &str {
        &self.rec.task.id
    }

    /// The task as its next attempt runs it: the continuation's prompt instead of the
    /// task's, the session it resumes.
    pub(crate) fn task_for_run(&self) -> (TaskSpec, Option<SessionTotals>) {
        let mut task = self.rec.task.clone();
        if let Some(p) = &self.next.prompt {
            task.prompt = p.clone();
        }
        let mut prior = None;
        if let Some(r) = &self.next.resume {
            task.resume_session_id = Some(r.session_id.clone());
            prior = r.prior;
        }
        (task, prior)
    }

    /// The human's latest answer to this task: a decoder that asked the question itself
    /// (an ACP permission request) answers it the same way.
    pub(crate) fn answered(&self) -> Option<AnsweredQuestion> {
        self.rec.answers.last().map(|a| AnsweredQuestion {
            question: a.question.clone(),
            answer: a.answer.clone(),
        })
    }

    /// Whether a continuation of this kind that never started leaves the task as it
    /// was (an answer: blocked with its question; a recovery: interrupted, resumable; a
    /// resolution: as it was, its conflict unresolved).
    pub(crate) fn keeps_state_when_not_started(&self) -> bool {
        matches!(
            self.next.kind,
            AttemptKind::Answer | AttemptKind::Recover | AttemptKind::Resolve | AttemptKind::Unpark
        )
    }

    /// Takes back the attempt of a continuation that never started: its record, the
    /// answer it carried, the state it put the task in.
    pub(crate) fn undo_unstarted_continuation(&mut self) {
        self.rec.attempts.pop();
        self.rec.state = match self.next.kind {
            AttemptKind::Answer => {
                if let Some(a) = self.rec.answers.pop() {
                    self.answer = Some(a);
                }
                TaskState::Blocked
            }
            AttemptKind::Resolve => self.state_before,
            AttemptKind::Unpark => TaskState::Parked,
            AttemptKind::Recover | AttemptKind::Run | AttemptKind::Retry => TaskState::Interrupted,
        };
        self.kept = true;
    }

    /// The last run of session `sid` this task continues (its own last attempt, else
    /// the origin's), and a time by which every earlier run of the session had started:
    /// the end of its latest run in the session.
    pub(crate) fn last_run_of(&self, sid: &str) -> Option<(SessionResult, SystemTime)> {
        let last = self
            .rec
            .attempts
            .last()
            .and_then(|a| a.result.clone())
            .or_else(|| self.origin.as_ref().map(|o| o.result.clone()))?;
        let last_in = |attempts: &[AttemptRecord]| {
            attempts
                .iter()
                .rev()
                .find(|a| a.result.as_ref().and_then(|r| r.session_id.as_deref()) == Some(sid))
                .and_then(|a| a.finished_at.clone())
        };
        let used = last_in(&self.rec.attempts)
            .or_else(|| self.origin.as_ref().and_then(|o| last_in(&o.task.attempts)))
            .and_then(|t| humantime::parse_rfc3339_weak(&t).ok())
            .unwrap_or_else(SystemTime::now);
        Some((last, used))
    }

    /// Writes the task's record as it is now, the file I/O off the async workers
    /// (see [`Write`]). A failure is logged: the run goes on, its stream is in the
    /// record anyway.
    pub(crate) async fn persist(&self, record: &BatchRecord, how: Write) {
        if let Err(e) = record.write_task_off_thread(&self.rec, how).await {
            tracing::warn!(task = %self.id(), error = %e, "cannot write the task record");
        }
    }
}
