//! Handing a conflict back to the agent that wrote the work: the task's session resumed
//! in its worktree (where the target's changes were merged, with conflict markers) with
//! a prompt that names the conflicted files and shows the markers, as the task's next
//! attempt. Its work is committed as every attempt's is.

use std::time::Duration;

use aicli_providers::SessionResult;
use tokio_util::sync::CancellationToken;

use super::TaskRun;
use super::answer::options_for;
use super::continuation::{Next, Why};
use crate::engine::{Engine, EngineError};
use crate::live::LiveSender;
use crate::record::{RunStore, TaskState};

/// Resumes task `task_ref` (`BATCH/TASK`) with `prompt` to resolve a conflict, and runs
/// it to its end.
pub(crate) async fn resolve(
    engine: &Engine,
    store: &RunStore,
    task_ref: &str,
    prompt: &str,
    live: LiveSender,
    cancel: CancellationToken,
) -> Result<SessionResult, EngineError> {
    let (record, task_id) = store
        .find_tasks(task_ref)
        .into_iter()
        .next()
        .ok_or_else(|| EngineError::NotFound(format!("no task '{task_ref}' under {}", store.root().display())))?;
    let lock = record
        .lock_task_within(&task_id, Duration::from_secs(5))
        .await
        .map_err(EngineError::Refused)?;
    let rec = record.task(&task_id).map_err(EngineError::NotFound)?;
    if matches!(rec.state, TaskState::Running | TaskState::Queued) {
        return Err(EngineError::Refused(format!(
            "task {}/{task_id} is {}: it cannot resolve a conflict before it has ended",
            record.batch_id(),
            rec.state.as_str()
        )));
    }
    let provider = engine.registry.get(&rec.provider)?;
    let spec = record.spec().map_err(EngineError::NotFound)?;
    let last = rec.latest_result().cloned();
    let next = Next::continuing(&rec, last.as_ref(), &provider, Why::Resolve { prompt });
    let task = TaskRun::new(rec, next, lock);
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
