//! Requests from other processes to the batch this process runs (`record::ControlRequest`
//! in `control.ndjson`): cancel the batch, as Ctrl-C would, or one task. The batch
//! watches its control file while it runs.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli_providers::{SessionResult, SessionStatus};
use tokio_util::sync::CancellationToken;

use super::Batch;
use crate::record::ControlRequest;

/// How often the control file is looked at (one `open` and `fstat` when it is unchanged).
const POLL: Duration = Duration::from_millis(200);

/// Which tasks were cancelled by a request, and the token of each task's running attempt.
#[derive(Debug, Default)]
pub(crate) struct TaskCancels {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    cancelled: HashSet<String>,
    running: HashMap<String, CancellationToken>,
}

impl TaskCancels {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An attempt of `task` starts with `token`: false when the task was cancelled (the
    /// attempt must not run).
    pub(crate) fn starting(&self, task: &str, token: &CancellationToken) -> bool {
        let mut g = self.lock();
        if g.cancelled.contains(task) {
            return false;
        }
        g.running.insert(task.to_owned(), token.clone());
        true
    }

    /// A task cancelled on its own (`aicli cancel BATCH/TASK`) is over: its cancelled
    /// run is `failed`, unlike the runs of a batch cancelled as a whole (as by Ctrl-C),
    /// which stay `interrupted` for `aicli resume` to run again.
    pub(crate) fn final_if_cancelled(&self, task: &str, result: &mut SessionResult) {
        if result.status == SessionStatus::Interrupted && self.lock().cancelled.contains(task) {
            result.status = SessionStatus::Failed;
        }
    }

    /// Whether `task` was cancelled on its own.
    pub(crate) fn is_cancelled(&self, task: &str) -> bool {
        self.lock().cancelled.contains(task)
    }

    /// Cancels `task`: its running attempt now, its next one before it starts.
    fn cancel(&self, task: &str) {
        let mut g = self.lock();
        g.cancelled.insert(task.to_owned());
        if let Some(t) = g.running.remove(task) {
            t.cancel();
        }
    }
}

/// Applies the batch's control requests until `done` is cancelled; `batch_cancel` is
/// the batch's own token (what Ctrl-C cancels).
pub(super) async fn watch(batch: Arc<Batch>, batch_cancel: CancellationToken, done: CancellationToken) {
    // Requests older than this invocation (a cancel of an earlier run) do not apply.
    let (_, mut offset) = batch.record.requests_since(0);
    loop {
        tokio::select! {
            _ = done.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
        let (requests, next) = batch.record.requests_since(offset);
        offset = next;
        for r in requests {
            match r {
                ControlRequest::Cancel { task: None, by, .. } => {
                    tracing::info!(batch = %batch.spec.batch_id, %by, "the batch is cancelled by a request");
                    batch_cancel.cancel();
                }
                ControlRequest::Cancel { task: Some(t), by, .. } => {
                    tracing::info!(batch = %batch.spec.batch_id, task = %t, %by, "a task is cancelled by a request");
                    batch.task_cancels.cancel(&t);
                }
            }
        }
    }
}

/// What a cancel request went to: the batch, and the tasks of it that a process was
/// running when it was written (those the request stops).
#[derive(Debug, Clone)]
pub struct CancelTarget {
    /// The batch.
    pub batch: crate::record::BatchRecord,
    /// The task named, or none for the whole batch.
    pub task: Option<String>,
    /// The targeted tasks a process holds (is running or has queued).
    pub held: Vec<String>,
}

/// Writes a cancel request for `target` (`BATCH`, `BATCH/TASK` or a `TASK` found in one
/// batch) into its batch's control file, for the process running it. Refused when no
/// process runs it: there is nothing to stop.
pub(crate) fn request_cancel(
    store: &crate::record::RunStore,
    target: &str,
    by: &str,
) -> Result<CancelTarget, crate::engine::EngineError> {
    use crate::engine::EngineError;
    let (batch, task) = match store.open_batch(target) {
        Ok(b) => (b, None),
        Err(_) => {
            let mut found = store.find_tasks(target);
            match found.len() {
                0 => {
                    return Err(EngineError::NotFound(format!(
                        "no batch or task {target} in {}",
                        store.root().display()
                    )));
                }
                1 => {
                    let (b, t) = found.remove(0);
                    (b, Some(t))
                }
                _ => {
                    let names: Vec<String> = found
                        .iter()
                        .map(|(b, t)| format!("{}/{t}", b.batch_id()))
                        .collect();
                    return Err(EngineError::Refused(format!(
                        "task {target} is in {} batches: name one ({})",
                        found.len(),
                        names.join(", ")
                    )));
                }
            }
        }
    };
    let ids: Vec<String> = match &task {
        Some(t) => vec![t.clone()],
        None => batch
            .tasks()
            .map_err(EngineError::NotFound)?
            .into_iter()
            .map(|r| r.task.id)
            .collect(),
    };
    let held: Vec<String> = ids
        .into_iter()
        .filter(|t| batch.task_held_elsewhere(t))
        .collect();
    let what = match &task {
        Some(t) => format!("task {}/{t}", batch.batch_id()),
        None => format!("batch {}", batch.batch_id()),
    };
    if held.is_empty() {
        return Err(EngineError::Refused(format!(
            "{what} is not running in any aicli process: there is nothing to cancel"
        )));
    }
    batch
        .request(&ControlRequest::Cancel {
            task: task.clone(),
            by: by.to_owned(),
            at: crate::util::now_rfc3339(),
        })
        .map_err(|e| EngineError::Record {
            path: batch.dir().join(crate::record::files::CONTROL),
            source: e,
        })?;
    Ok(CancelTarget { batch, task, held })
}
