//! An attempt in the task's record: its start (offsets, model, reservation, the answer
//! it carries) and its end (result, command, place, charge, the task's state), and the
//! two ends that are not a run's: an attempt that never started, and one whose run
//! panicked.

use std::sync::Arc;

use aicli_providers::{ErrorKind, SessionResult, SharedProvider};

use super::{Batch, TaskRun};
use crate::budget::Reservation;
use crate::live::BatchEvent;
use crate::record::{AttemptBudget, AttemptKind, AttemptRecord, ParkRecord, TaskState, Write};
use crate::run::RunOutcome;
use crate::util::now_rfc3339;

impl Batch {
    /// The attempt's start in the record: its offsets, model, the session it resumes,
    /// its reservation; the task running; a human's answer recorded.
    pub(super) async fn record_start(
        &self,
        task: &mut TaskRun,
        n: u32,
        provider: &SharedProvider,
        reservation: Option<&Reservation>,
    ) {
        let (run_task, prior) = task.task_for_run();
        let attempt = task.rec.attempts.len() as u32 + 1;
        let id = task.id().to_owned();
        task.rec.attempts.push(AttemptRecord {
            attempt,
            kind: if n > 1 {
                AttemptKind::Retry
            } else {
                task.next.kind
            },
            started_at: now_rfc3339(),
            finished_at: None,
            events_start: self.record.events_len(&id),
            events_end: None,
            stderr_start: self.record.stderr_len(&id),
            stderr_end: None,
            aicli_events_start: self.record.aicli_events_len(&id),
            model: provider.model_for(&run_task),
            prior,
            resumed_session: run_task.resume_session_id.clone(),
            argv: Vec::new(),
            place: None,
            result: None,
            budget: reservation.map(|r| AttemptBudget {
                reserved_usd: r.amount(),
                charged_usd: None,
            }),
            setup: Vec::new(),
            egress_denied: Vec::new(),
        });
        task.rec.state = TaskState::Running;
        task.rec.parked = None;
        if n == 1
            && let Some(a) = task.answer.take()
        {
            task.rec.answers.push(a);
        }
        task.persist(&self.record, Write::Progress).await;
        self.live.send(BatchEvent::TaskStarted {
            task_id: Arc::from(id.as_str()),
            provider: Arc::from(provider.name()),
            attempt,
        });
    }

    /// The attempt's end in the record: offsets, result, command, place, charge; the
    /// task's state until it is settled. A continuation (an answer, a recovery) that
    /// never started leaves the task as it was: blocked with its question, interrupted.
    pub(super) async fn record_end(&self, task: &mut TaskRun, n: u32, mut outcome: RunOutcome) -> RunOutcome {
        task.reservation = None;
        if n == 1 {
            outcome.result.continuation = task.next.continuation.clone();
        }
        if n == 1 && !outcome.started && task.keeps_state_when_not_started() {
            task.undo_unstarted_continuation();
            task.persist(&self.record, Write::Settled).await;
            let kept = match task.next.kind {
                AttemptKind::Answer => {
                    "; the answer was not delivered: the task is still blocked on its question, answer it again"
                }
                AttemptKind::Resolve => "; the conflict was not handed to the agent: the task is as it was",
                AttemptKind::Unpark => "; the task is still parked: `aicli resume` continues its session",
                AttemptKind::Recover | AttemptKind::Run | AttemptKind::Retry => {
                    "; the task is still interrupted: `aicli resume` runs it again"
                }
            };
            if let Some(e) = outcome.result.error.as_mut() {
                e.push_str(kept);
            }
            return outcome;
        }
        // A task cancelled on its own is over already in the state recorded here, which
        // a watcher (the web view, `aicli status`) reads before the task is settled.
        self.task_cancels.final_if_cancelled(task.id(), &mut outcome.result);
        let id = task.id().to_owned();
        let (events_end, stderr_end) = (self.record.events_len(&id), self.record.stderr_len(&id));
        // A usage limit parks the task at once, so that every view says so (the pool
        // then decides whether it waits).
        let retry = &self.engine.config.engine.retry;
        let park = (retry.max_parks > 0)
            .then(|| {
                ParkRecord::of(
                    &outcome.result,
                    std::time::Duration::from_secs(retry.unknown_reset_secs),
                )
            })
            .flatten();
        let state = if park.is_some() {
            TaskState::Parked
        } else if outcome.result.error_kind.is_some_and(|k| k.is_backoff()) {
            TaskState::Queued
        } else {
            TaskState::of(&outcome.result)
        };
        task.rec.parked = park;
        if let Some(a) = task.rec.attempts.last_mut() {
            a.finished_at = Some(now_rfc3339());
            a.events_end = Some(events_end);
            a.stderr_end = Some(stderr_end);
            a.result = Some(outcome.result.clone());
            a.argv = outcome.argv.clone();
            a.budget = outcome.budget;
            a.setup = std::mem::take(&mut outcome.setup);
            a.egress_denied = std::mem::take(&mut outcome.egress_denied);
            a.place = outcome.place.clone();
        }
        task.rec.state = state;
        task.persist(&self.record, Write::Progress).await;
        outcome
    }

    /// An attempt that never got to its run (no provider, no budget): recorded as such,
    /// with its result.
    pub(super) async fn not_started(
        &self,
        task: &mut TaskRun,
        kind: ErrorKind,
        message: String,
    ) -> RunOutcome {
        let provider_name = task.rec.provider.clone();
        let mut result = SessionResult::not_started(&provider_name, kind, message);
        result.task_id = task.id().to_owned();
        let offset = self.record.events_len(task.id());
        let attempt = task.rec.attempts.len() as u32 + 1;
        task.rec.attempts.push(AttemptRecord::not_started(
            attempt,
            task.next.kind,
            offset,
            result.clone(),
        ));
        task.persist(&self.record, Write::Progress).await;
        RunOutcome::not_run_result(result)
    }

    /// The run panicked: its guards released what it held as it unwound (process tree,
    /// token, container, private directory, reservation); the attempt is recorded as
    /// crashed, with its stream.
    pub(super) async fn crashed(
        &self,
        task: &mut TaskRun,
        panic: Box<dyn std::any::Any + Send>,
    ) -> RunOutcome {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(task = %task.id(), panic = %why, "the run panicked; its resources were released");
        let mut result = SessionResult::not_started(
            &task.rec.provider,
            ErrorKind::Crashed,
            format!("aicli failed while running the task (it panicked: {why})"),
        );
        result.task_id = task.id().to_owned();
        let id = task.id().to_owned();
        let (events_end, stderr_end) = (self.record.events_len(&id), self.record.stderr_len(&id));
        // What the run streamed is all the budget counts for it; the rest of its
        // reservation goes back.
        let budget = task.reservation.take().map(|r| {
            let streamed = r.streamed_usd();
            r.settle(streamed);
            AttemptBudget {
                reserved_usd: r.amount(),
                charged_usd: Some(streamed),
            }
        });
        if let Some(a) = task
            .rec
            .attempts
            .last_mut()
            .filter(|a| a.finished_at.is_none())
        {
            a.finished_at = Some(now_rfc3339());
            a.events_end = Some(events_end);
            a.stderr_end = Some(stderr_end);
            a.result = Some(result.clone());
            a.budget = budget.or(a.budget);
        }
        task.rec.state = TaskState::Failed;
        task.persist(&self.record, Write::Progress).await;
        RunOutcome::not_run_result(result)
    }

}
