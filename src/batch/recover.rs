//! Resuming a batch whose aicli stopped (killed, or cancelled): what the dead runs left
//! is killed or removed, each unfinished attempt is settled from what it recorded, and
//! the tasks that need it run again.

use aicli_providers::{
    EventKind, ExitStatus, ParseContext, SessionResult, SessionStatus, SharedProvider,
};
use tokio_util::sync::CancellationToken;

use super::TaskRun;
use super::answer::options_for;
use super::continuation::{Next, Why};
use crate::engine::{Engine, EngineError, record_error};
use crate::live::LiveSender;
use crate::record::{
    BatchRecord, BatchResult, RunStore, TaskLock, TaskRecord, TaskState, Write, files, read_range,
};
use crate::run::question_of;
use crate::util::now_rfc3339;

/// Finishes batch `batch_id` (see [`crate::Engine::resume_batch`]).
pub(crate) async fn resume(
    engine: &Engine,
    store: &RunStore,
    batch_id: &str,
    live: LiveSender,
    cancel: CancellationToken,
) -> Result<BatchResult, EngineError> {
    let record = store.open_batch(batch_id).map_err(EngineError::NotFound)?;
    let spec = record.spec().map_err(EngineError::NotFound)?;
    let recs = record.tasks().map_err(EngineError::NotFound)?;
    let mut locks = hold_unfinished(&record, &recs)?;
    // The batch's MCP upstreams the dead aicli had started.
    for f in pid_files(record.dir(), files::PID_UPSTREAM_PREFIX) {
        let killed = crate::proc::leftovers::kill_leftovers(&f).await;
        if !killed.is_empty() {
            tracing::warn!(pids = ?killed, "killed an MCP upstream left by an interrupted batch");
        }
    }
    let mut plan = Vec::new();
    for mut rec in recs {
        let lock = locks.remove(&rec.task.id);
        // Interrupted before it started (cut off while queued): run from the start.
        let state = match rec.state {
            TaskState::Interrupted if rec.attempts.is_empty() => TaskState::Queued,
            s => s,
        };
        match state {
            TaskState::Blocked => continue,
            TaskState::Succeeded | TaskState::Failed => {
                // Settled before aicli stopped, but not its worktree (held above when
                // one is left): settled again, now.
                if let (Some(lock), Some(r)) = (lock, rec.latest_result().cloned()) {
                    let mut t = TaskRun::new(rec, Next::plain(), lock);
                    t.recorded = Some(r);
                    plan.push(t);
                }
            }
            TaskState::Queued => {
                let Some(lock) = lock else { continue };
                // A container made ahead for it, which a killed aicli left.
                if let Ok(provider) = engine.registry.get(&rec.provider) {
                    leftovers(engine, &record, &rec, &provider).await;
                }
                let (next, origin) = Next::first(store, &rec);
                let mut t = TaskRun::new(rec, next, lock);
                t.origin = origin;
                plan.push(t);
            }
            TaskState::Parked => {
                // Waiting for a usage limit when aicli stopped: it waits out what is
                // left of it, then its session goes on (its run had ended: nothing to
                // settle).
                let Some(lock) = lock else { continue };
                let provider = engine.registry.get(&rec.provider)?;
                let last = rec.latest_result().cloned();
                let next = Next::continuing(&rec, last.as_ref(), &provider, Why::UsageLimit);
                let deadline = rec.parked.as_ref().and_then(|p| p.deadline_unix).map(|d| {
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(d.max(0) as u64)
                });
                let mut t = TaskRun::new(rec, next, lock);
                t.deadline = deadline;
                plan.push(t);
            }
            TaskState::Running | TaskState::Interrupted => {
                let Some(lock) = lock else { continue };
                let provider = engine.registry.get(&rec.provider)?;
                leftovers(engine, &record, &rec, &provider).await;
                let found = settle_unfinished(&record, &mut rec, &provider);
                record
                    .write_task(&rec, Write::Settled)
                    .map_err(record_error(&record.task_dir(&rec.task.id)))?;
                let (next, recorded) = match found {
                    // The CLI had printed its last word: the run is over and was paid
                    // for. Close it from its stream; no new run.
                    Found::Finished(result) => (Next::plain(), Some(result)),
                    Found::Interrupted(partial) => (
                        Next::continuing(&rec, partial.as_ref(), &provider, Why::Recover),
                        None,
                    ),
                };
                let mut t = TaskRun::new(rec, next, lock);
                t.recorded = recorded;
                plan.push(t);
            }
        }
    }
    // An empty plan still rewrites the batch result from the records.
    let opts = options_for(&spec, store);
    super::execute(engine, spec, record, plan, opts, live, cancel)
        .await
        .map(|e| e.result)
}

/// Every unfinished task held by this process: a task held by a live aicli (the batch
/// is still running, or being answered) is not interrupted, and the resume is refused.
fn hold_unfinished(
    record: &BatchRecord,
    recs: &[TaskRecord],
) -> Result<std::collections::BTreeMap<String, TaskLock>, EngineError> {
    let mut locks = std::collections::BTreeMap::new();
    let mut busy = Vec::new();
    for rec in recs {
        let worktree_left = rec.worktree.as_ref().is_some_and(|w| w.is_dir());
        if rec.state.is_final() && !(worktree_left && rec.state != TaskState::Blocked) {
            continue;
        }
        match record.lock_task(&rec.task.id) {
            Ok(l) => {
                locks.insert(rec.task.id.clone(), l);
            }
            Err(e) => busy.push(e),
        }
    }
    if !busy.is_empty() {
        return Err(EngineError::Refused(format!(
            "batch {} is still running: {}",
            record.batch_id(),
            busy.join("; ")
        )));
    }
    Ok(locks)
}

/// Kills what is left of an interrupted run of `rec`: its CLI's process tree, as the
/// journal records it, those of the MCP tool calls it had running (`pid.tool-*`), and
/// its containers (a remote run's work brought back first; for a task that never
/// started, the container made ahead for it).
async fn leftovers(
    engine: &Engine,
    record: &BatchRecord,
    rec: &TaskRecord,
    provider: &SharedProvider,
) {
    let dir = record.task_dir(&rec.task.id);
    // A record of an aicli before the journal names them in a file.
    let mut killed = crate::proc::leftovers::kill_leftovers(&dir.join(files::OLDER_PID)).await;
    if let Some(text) = record.recorded_pids(&rec.task.id) {
        killed.extend(crate::proc::leftovers::kill_recorded(&text).await);
        record.pid_record(&rec.task.id).clear();
    }
    for f in pid_files(&dir, files::PID_TOOL_PREFIX) {
        killed.extend(crate::proc::leftovers::kill_leftovers(&f).await);
    }
    if !killed.is_empty() {
        tracing::warn!(task = %rec.task.id, pids = ?killed, "killed processes left by an interrupted run");
    }
    let kind = engine.runner_kind(&rec.task, provider);
    if kind == aicli_providers::RunnerKind::Local {
        return;
    }
    match engine.runner(kind).await {
        Ok(r) => {
            for line in r.remove_leftovers(&record.batch_id(), &rec.task.id).await {
                tracing::warn!(task = %rec.task.id, "{line}");
            }
        }
        Err(e) => {
            tracing::warn!(task = %rec.task.id, error = %e, "cannot look for the containers of the interrupted run")
        }
    }
}

/// The files in `dir` whose names start with `prefix`.
fn pid_files(dir: &std::path::Path, prefix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// What `resume` found of an attempt that was running when aicli stopped.
enum Found {
    /// Its stream holds the CLI's final event: the run had ended; its result.
    Finished(SessionResult),
    /// It stopped before its end: what its partial output says, if anything.
    Interrupted(Option<SessionResult>),
}

/// Settles the unfinished attempt of `rec` from what it recorded. When its stream holds
/// the CLI's final event, the run had finished (and was paid for) before aicli stopped:
/// its result is built from the stream, with a question it asked through the MCP server,
/// as at a normal end. Otherwise the attempt is marked interrupted, keeping what its
/// partial output says (session id, usage, cost so far).
fn settle_unfinished(
    record: &BatchRecord,
    rec: &mut TaskRecord,
    provider: &SharedProvider,
) -> Found {
    let dir = record.task_dir(&rec.task.id);
    let state = rec.state;
    let Some(attempt) = rec.attempts.last_mut() else {
        return Found::Interrupted(None);
    };
    if attempt.result.is_some() && state == TaskState::Interrupted {
        return Found::Interrupted(attempt.result.clone());
    }
    let stdout =
        read_range(&dir.join(files::EVENTS), attempt.events_start, None).unwrap_or_default();
    let stderr =
        read_range(&dir.join(files::STDERR), attempt.stderr_start, None).unwrap_or_default();
    let ctx = ParseContext {
        model: attempt.model.clone(),
        prior: attempt.prior,
        answered: None,
    };
    // aicli stopped while the CLI ran: how it ended is not known. The stream is read
    // through the decoder once, noting whether the CLI said its last word.
    let mut saw_final = false;
    let mut result = aicli_providers::replay::decode_reader(
        provider.as_ref(),
        &stdout[..],
        aicli_providers::replay::DEFAULT_LINE_CAP,
        &ctx,
        &String::from_utf8_lossy(&stderr),
        ExitStatus::Unknown,
        |e| saw_final |= matches!(e.kind, EventKind::Final { .. }),
    )
    .unwrap_or_else(|e| {
        SessionResult::not_started(
            provider.name(),
            aicli_providers::ErrorKind::Unknown,
            e.to_string(),
        )
    });
    result.task_id = rec.task.id.clone();
    attempt.finished_at = Some(now_rfc3339());
    attempt.events_end = Some(attempt.events_start + stdout.len() as u64);
    attempt.stderr_end = Some(attempt.stderr_start + stderr.len() as u64);
    // (A final "slow down" error is not an end: the pool would have retried it.)
    let retryable = result.error_kind.is_some_and(|k| k.is_backoff());
    if saw_final && !retryable {
        let asked = read_range(
            &dir.join(files::AICLI_EVENTS),
            attempt.aicli_events_start,
            None,
        )
        .unwrap_or_default();
        if let Some(q) = String::from_utf8_lossy(&asked)
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<aicli_providers::AgentEvent>(l).ok())
            .find_map(|e| question_of(&e.kind))
        {
            result.block(q);
        }
        tracing::info!(task = %rec.task.id, status = ?result.status, "the interrupted attempt had finished: closed from its recorded stream");
        attempt.result = Some(result.clone());
        rec.state = TaskState::of(&result);
        return Found::Finished(result);
    }
    result.status = SessionStatus::Interrupted;
    result.success = false;
    result.error_kind = None;
    result.error = Some("aicli stopped while this attempt was running".to_owned());
    attempt.result = Some(result.clone());
    rec.state = TaskState::Interrupted;
    Found::Interrupted(Some(result))
}
