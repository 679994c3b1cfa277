//! Answering a blocked task: the task found (and held), its question and the answer made
//! into the continuation of its session, run as the task's next attempt.

use std::time::Duration;

use aicli_providers::SessionResult;
use tokio_util::sync::CancellationToken;

use super::TaskRun;
use super::continuation::{Next, Why};
use crate::engine::{BatchOptions, Engine, EngineError};
use crate::live::LiveSender;
use crate::record::{AnswerRecord, BatchRecord, BatchSpec, RunStore, TaskState};
use crate::util::now_rfc3339;

/// Answers blocked task `task_ref` (`TASK` or `BATCH/TASK`) with `answer` (not empty:
/// the engine checked) and runs its continuation.
pub(crate) async fn answer(
    engine: &Engine,
    store: &RunStore,
    task_ref: &str,
    answer: &str,
    live: LiveSender,
    cancel: CancellationToken,
) -> Result<SessionResult, EngineError> {
    let (record, task_id) = find_blocked(store, task_ref)?;
    // Held from the state check on: a second answer (or a resume) of the same task in
    // another process is refused instead of resuming the session twice.
    let lock = record
        .lock_task_within(&task_id, Duration::from_secs(5))
        .await
        .map_err(EngineError::Refused)?;
    let rec = record.task(&task_id).map_err(EngineError::NotFound)?;
    if rec.state != TaskState::Blocked {
        return Err(not_blocked(&record, &task_id, rec.state));
    }
    let last = rec.latest_result().cloned().ok_or_else(|| {
        EngineError::Refused(format!("task {task_ref} is blocked but has no result"))
    })?;
    let question = last.question.clone().ok_or_else(|| {
        EngineError::Refused(format!("task {task_ref} is blocked but has no question"))
    })?;
    let provider = engine.registry.get(&rec.provider)?;
    let spec = record.spec().map_err(EngineError::NotFound)?;
    refuse_when_spent(&spec, &record)?;
    let next = Next::continuing(
        &rec,
        Some(&last),
        &provider,
        Why::Answer {
            question: &question,
            answer,
        },
    );
    let mut task = TaskRun::new(rec, next, lock);
    task.answer = Some(AnswerRecord {
        question: question.question.clone(),
        answer: answer.to_owned(),
        answered_at: now_rfc3339(),
    });
    let opts = options_for(&spec, store);
    let mut done = super::execute(engine, spec, record, vec![task], opts, live, cancel).await?;
    if let Some(r) = done.kept.remove(&task_id) {
        return Ok(r);
    }
    done.result
        .tasks
        .into_iter()
        .find(|t| t.task_id == task_id)
        .ok_or_else(|| EngineError::NotFound(format!("task {task_id} vanished from its batch")))
}

/// An answer would start a new run: refused when the batch's budget is spent.
fn refuse_when_spent(spec: &BatchSpec, record: &BatchRecord) -> Result<(), EngineError> {
    let Some(budget) = spec.budget_usd else {
        return Ok(());
    };
    let spent = record.charged_usd();
    if spent >= budget {
        return Err(EngineError::Refused(format!(
            "batch {} has spent ${spent:.4} of its ${budget:.4} budget: the answer would start a new run",
            record.batch_id()
        )));
    }
    Ok(())
}

/// The options a recorded batch ran with (for its answers and resumes).
pub(super) fn options_for(spec: &BatchSpec, store: &RunStore) -> BatchOptions {
    let mut o = BatchOptions::new(&spec.repo);
    o.provider = Some(spec.provider.clone());
    o.max_parallel = Some(spec.max_parallel);
    o.budget_usd = spec.budget_usd;
    o.runs_dir = Some(store.root().to_path_buf());
    o.base_ref = spec.base_ref.clone();
    o.worktrees = spec.worktrees;
    o.batch_id = Some(spec.batch_id.clone());
    o.timeout = spec.timeout_secs.map(Duration::from_secs);
    o.idle_timeout = spec.idle_timeout_secs.map(Duration::from_secs);
    o.fake_api = spec.fake_api.clone();
    o
}

/// Whether `task_ref` can be answered now (it names one task, and that task is blocked):
/// the check [`answer`] makes, for a caller that wants to refuse before it starts anything.
pub(crate) fn check_answerable(store: &RunStore, task_ref: &str) -> Result<(), EngineError> {
    let (record, task_id) = find_blocked(store, task_ref)?;
    let rec = record.task(&task_id).map_err(EngineError::NotFound)?;
    if rec.state != TaskState::Blocked {
        return Err(not_blocked(&record, &task_id, rec.state));
    }
    Ok(())
}

/// The refusal of an answer to a task that is not blocked.
fn not_blocked(record: &BatchRecord, task_id: &str, state: TaskState) -> EngineError {
    EngineError::Refused(format!(
        "task {}/{task_id} is not blocked (it is {}); only a blocked task can be answered",
        record.batch_id(),
        state.as_str()
    ))
}

/// The task an answer is for: `BATCH/TASK` exactly; a bare `TASK` is the blocked task of
/// that id (the newest batch's when none is blocked, so the error says why), and an
/// error listing them when several batches have it blocked.
fn find_blocked(store: &RunStore, task_ref: &str) -> Result<(BatchRecord, String), EngineError> {
    let found = store.find_tasks(task_ref);
    if found.is_empty() {
        return Err(EngineError::NotFound(format!(
            "no task '{task_ref}' in any batch under {}",
            store.root().display()
        )));
    }
    let blocked: Vec<&(BatchRecord, String)> = found
        .iter()
        .filter(|(b, t)| b.task(t).is_ok_and(|r| r.state == TaskState::Blocked))
        .collect();
    match blocked.as_slice() {
        [one] => Ok((one.0.clone(), one.1.clone())),
        [] => Ok(found[0].clone()),
        several => Err(EngineError::Refused(format!(
            "task '{task_ref}' is blocked in several batches; name one: {}",
            several
                .iter()
                .map(|(b, t)| format!("{}/{t}", b.batch_id()))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}
