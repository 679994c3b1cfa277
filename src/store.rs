//! Run records on disk: `<runs>/<batch-id>/`.
//!
//! ```text
//! batch.json                    the batch spec (written once, atomically)
//! result.json                   the BatchResult (atomic; rewritten as the batch ends)
//! tasks/<task>/task.json        the task's state and attempts (atomic rewrite)
//! tasks/<task>/events.ndjson    raw stdout of every attempt, appended as received
//! tasks/<task>/stderr.log       stderr of every attempt, appended
//! tasks/<task>/aicli-events.ndjson  events aicli made (MCP logs, questions), appended
//! tasks/<task>/result.json      the task's latest SessionResult (atomic)
//! ```
//!
//! Appends are fsynced when an attempt ends; JSON files are replaced by atomic rename,
//! so a `kill -9` at any moment leaves every file valid (an attempt that was running is
//! recognisable: it has a start offset and no end).

use std::path::{Path, PathBuf};

use aicli_providers::{SessionResult, SessionStatus, TaskSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::util::{
    PRIVATE_FILE_MODE, create_private_dirs, ensure_private_dir, read_json, write_json,
    write_json_atomic,
};

/// The state of a task in its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Not started yet.
    Queued,
    /// A CLI run is (or was, if aicli died) in progress.
    Running,
    /// Finished: succeeded.
    Succeeded,
    /// Finished: failed.
    Failed,
    /// Finished: waiting for a human's answer.
    Blocked,
    /// Found running after aicli died; to be re-run.
    Interrupted,
}

impl TaskState {
    /// Whether the task has a final result.
    pub fn is_final(self) -> bool {
        match self {
            TaskState::Succeeded | TaskState::Failed | TaskState::Blocked => true,
            TaskState::Queued | TaskState::Running | TaskState::Interrupted => false,
        }
    }

    /// The state a result puts a task in.
    pub fn of(result: &SessionResult) -> TaskState {
        match result.status {
            SessionStatus::Succeeded => TaskState::Succeeded,
            SessionStatus::Failed => TaskState::Failed,
            SessionStatus::Blocked => TaskState::Blocked,
            SessionStatus::Interrupted => TaskState::Interrupted,
        }
    }
}

/// Why an attempt was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptKind {
    /// The first run.
    Run,
    /// A retry after a rate limit or overload.
    Retry,
    /// A resume with a human's answer.
    Answer,
    /// A re-run after aicli itself was interrupted.
    Recover,
}

/// One CLI run of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttemptRecord {
    /// 1, 2, ...
    pub attempt: u32,
    /// Why it was made.
    pub kind: AttemptKind,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it ended, if it did.
    #[serde(default)]
    pub finished_at: Option<String>,
    /// Byte offset in `events.ndjson` where its stdout starts.
    pub events_start: u64,
    /// Byte offset where it ends, if it ended.
    #[serde(default)]
    pub events_end: Option<u64>,
    /// Byte offset in `stderr.log` where its stderr starts.
    #[serde(default)]
    pub stderr_start: u64,
    /// Byte offset where it ends, if it ended.
    #[serde(default)]
    pub stderr_end: Option<u64>,
    /// Byte offset in `aicli-events.ndjson` where its events (MCP logs, questions)
    /// start: a resume finds the question of a run that ended while aicli was stopping.
    #[serde(default)]
    pub aicli_events_start: u64,
    /// The model the run asked for (for re-parsing).
    #[serde(default)]
    pub model: Option<String>,
    /// The session totals of the run it resumed (for re-parsing per-run figures).
    #[serde(default)]
    pub prior: Option<aicli_providers::SessionTotals>,
    /// The session it resumed, if any.
    #[serde(default)]
    pub resumed_session: Option<String>,
    /// The command that ran (program and arguments; no secrets: tokens go through
    /// files and env).
    #[serde(default)]
    pub argv: Vec<String>,
    /// Where it ran (`local`, `docker <engine> (<image>)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
    /// Its result, if it ended.
    #[serde(default)]
    pub result: Option<SessionResult>,
    /// Its share of the batch budget, when the batch has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<AttemptBudget>,
}

/// An attempt's share of the batch budget (see [`crate::budget`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttemptBudget {
    /// USD reserved for it before it started (a CLI with a per-run cap got this as
    /// its cap).
    pub reserved_usd: f64,
    /// USD the budget counted for it when it ended: its cost (reported, else estimated,
    /// for a cut-off run its streamed estimate), or its whole reservation when its cost
    /// is unknown. `None` while it runs.
    #[serde(default)]
    pub charged_usd: Option<f64>,
}

/// A human's answer to a blocked task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AnswerRecord {
    /// The question answered.
    pub question: String,
    /// The answer.
    pub answer: String,
    /// When (RFC 3339).
    pub answered_at: String,
}

/// `tasks/<task>/task.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskRecord {
    /// The task.
    pub task: TaskSpec,
    /// Its provider.
    pub provider: String,
    /// Where it stands.
    pub state: TaskState,
    /// Its branch, once it has a worktree.
    #[serde(default)]
    pub branch: Option<String>,
    /// Its worktree.
    #[serde(default)]
    pub worktree: Option<PathBuf>,
    /// The worktree's base commit.
    #[serde(default)]
    pub base_commit: Option<String>,
    /// Every attempt, oldest first.
    #[serde(default)]
    pub attempts: Vec<AttemptRecord>,
    /// Answers given to its questions, oldest first.
    #[serde(default)]
    pub answers: Vec<AnswerRecord>,
}

impl TaskRecord {
    /// A queued task.
    pub fn queued(task: TaskSpec, provider: &str) -> TaskRecord {
        TaskRecord {
            task,
            provider: provider.to_owned(),
            state: TaskState::Queued,
            branch: None,
            worktree: None,
            base_commit: None,
            attempts: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// The latest finished attempt's result.
    pub fn latest_result(&self) -> Option<&SessionResult> {
        self.attempts.iter().rev().find_map(|a| a.result.as_ref())
    }

    /// USD spent over all attempts (known costs), and whether any cost is unknown.
    ///
    /// An attempt cut off before the CLI's last line (so without session totals of its
    /// own) is covered when a later attempt resumed its session from the start (no prior
    /// totals to subtract) with a session-cumulative cost: that attempt's cost already
    /// counts the cut-off one's, which is then not counted again (whether its own
    /// figure is a streamed estimate or unknown).
    pub fn spent(&self) -> (f64, bool) {
        let mut total = 0.0;
        let mut unknown = false;
        for (i, a) in self.attempts.iter().enumerate() {
            let Some(r) = &a.result else { continue };
            if self.covered(i) {
                continue;
            }
            match r.cost_usd {
                Some(c) => total += c,
                None => unknown |= r.exit_code.is_some() || r.session_id.is_some(),
            }
        }
        (total, unknown)
    }

    /// Whether attempt `i`'s spend is counted in a later attempt's cost (see
    /// [`TaskRecord::spent`]).
    fn covered(&self, i: usize) -> bool {
        let Some(r) = self.attempts.get(i).and_then(|a| a.result.as_ref()) else {
            return false;
        };
        if r.session_totals.is_some() {
            return false;
        }
        r.session_id.as_deref().is_some_and(|sid| {
            self.attempts[i + 1..].iter().any(|later| {
                later.resumed_session.as_deref() == Some(sid)
                    && later.prior.is_none()
                    && later.result.as_ref().is_some_and(|lr| {
                        lr.cost_usd.is_some()
                            && lr.session_totals.is_some_and(|t| t.cost_usd.is_some())
                    })
            })
        })
    }

    /// USD the batch budget counted for this task: each attempt's charge (see
    /// [`AttemptBudget::charged_usd`]), or its known cost where it has none (an attempt
    /// made without a budget, by an older aicli, or cut off by aicli's death); an
    /// attempt covered by a later one (see [`TaskRecord::spent`]) counts nothing.
    pub fn charged(&self) -> f64 {
        self.attempts
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.covered(*i))
            .map(|(_, a)| {
                a.budget
                    .and_then(|b| b.charged_usd)
                    .or_else(|| a.result.as_ref().and_then(|r| r.cost_usd))
                    .unwrap_or(0.0)
            })
            .sum()
    }

    /// The part of [`TaskRecord::spent`] that is an estimate (from the config's prices,
    /// or a cut-off run's stream), not a figure the CLI reported.
    pub fn estimated(&self) -> f64 {
        self.attempts
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.covered(*i))
            .filter_map(|(_, a)| a.result.as_ref())
            .filter(|r| r.cost_source == aicli_providers::CostSource::Estimated)
            .filter_map(|r| r.cost_usd)
            .sum()
    }
}

/// `batch.json`: what was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchSpec {
    /// The batch id.
    pub batch_id: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// The repository.
    pub repo: PathBuf,
    /// The default provider.
    pub provider: String,
    /// Base commit of the worktrees.
    pub base_ref: String,
    /// The tasks (ids assigned).
    pub tasks: Vec<TaskSpec>,
    /// Parallelism.
    pub max_parallel: usize,
    /// Batch budget, USD.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// Wall-clock limit per run, seconds, when the batch set one.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Idle limit per run, seconds, when the batch set one.
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// Whether tasks ran in worktrees.
    pub worktrees: bool,
    /// aicli's version.
    pub aicli_version: String,
}

/// `result.json` of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchResult {
    /// The batch id.
    pub batch_id: String,
    /// The default provider.
    pub provider: String,
    /// When the batch started (RFC 3339).
    pub timestamp: String,
    /// Every task's latest result, in task order.
    pub tasks: Vec<SessionResult>,
    /// Tasks in the batch.
    pub n_tasks: usize,
    /// Tasks that succeeded.
    pub n_succeeded: usize,
    /// Tasks that failed.
    pub n_failed: usize,
    /// Tasks blocked on a question.
    pub n_blocked: usize,
    /// USD spent over all attempts of all tasks, counting known costs (reported by the
    /// CLIs, or estimated).
    pub total_cost_usd: f64,
    /// The part of `total_cost_usd` that is estimated from the config's prices (a CLI
    /// that reports no cost, a run cut off before its last line), not reported.
    #[serde(default)]
    pub estimated_cost_usd: f64,
    /// Tasks with an attempt whose cost is unknown (so `total_cost_usd` is a lower bound).
    pub n_cost_unknown: usize,
    /// Wall-clock time of the batch (of this invocation when resumed).
    pub wall_clock_ms: u64,
    /// The budget, if any.
    pub budget_usd: Option<f64>,
    /// What is left of it: the budget minus what it counted
    /// (`budget_charged_usd`), never below 0.
    pub budget_remaining_usd: Option<f64>,
    /// What the budget counted over all attempts: their costs, and for an attempt whose
    /// cost is unknown its whole reservation. More than `budget_usd` when runs overspent
    /// it (see the README's *Security and reliability*).
    #[serde(default)]
    pub budget_charged_usd: Option<f64>,
    /// The most that was reserved at one time for the runs in flight of this
    /// invocation (their caps together); at most what was left of the budget.
    #[serde(default)]
    pub budget_reserved_usd: Option<f64>,
    /// Where the records are.
    pub runs_dir: PathBuf,
}

/// A run-records directory.
#[derive(Debug, Clone)]
pub struct RunStore {
    root: PathBuf,
}

/// One batch's record directory.
#[derive(Debug, Clone)]
pub struct BatchRecord {
    dir: PathBuf,
}

/// Where a CLI session last ran, found in the run records by its id
/// ([`RunStore::last_run_of_session`]).
#[derive(Debug, Clone)]
pub struct SessionRun {
    /// The batch of that run.
    pub batch_id: String,
    /// Whether that batch ran its tasks in worktrees.
    pub worktrees: bool,
    /// The task's record (its worktree and branch while the worktree is kept).
    pub task: TaskRecord,
    /// The result of the attempt that ran the session last (its `session_totals` are the
    /// session's cumulative figures at its end).
    pub result: SessionResult,
}

/// A line of `aicli runs`.
#[derive(Debug, Clone, Serialize)]
pub struct BatchSummary {
    /// The batch id.
    pub batch_id: String,
    /// When it started.
    pub created_at: String,
    /// Who ran its tasks: one provider, or several joined by commas.
    pub provider: String,
    /// Tasks.
    pub n_tasks: usize,
    /// Succeeded.
    pub n_succeeded: usize,
    /// Failed.
    pub n_failed: usize,
    /// Blocked.
    pub n_blocked: usize,
    /// Not finished (queued, running, interrupted).
    pub n_unfinished: usize,
    /// Known cost.
    pub cost_usd: f64,
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Reads `[start, end)` of a file (to its end when `end` is `None`).
pub fn read_range(path: &Path, start: u64, end: Option<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    match end {
        Some(e) => {
            f.take(e.saturating_sub(start)).read_to_end(&mut buf)?;
        }
        None => {
            f.read_to_end(&mut buf)?;
        }
    }
    Ok(buf)
}

impl RunStore {
    /// The store at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> RunStore {
        RunStore { root: root.into() }
    }

    /// Its directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the record of a new batch and writes its spec.
    pub fn create_batch(&self, spec: &BatchSpec) -> std::io::Result<BatchRecord> {
        // The record holds what the agents saw and printed: the owner's only, every
        // directory of it 0700 whatever the umask.
        let dir = self.root.join(&spec.batch_id);
        ensure_private_dir(&self.root)?;
        ensure_private_dir(&dir)?;
        ensure_private_dir(&dir.join("tasks"))?;
        write_json_atomic(&dir.join("batch.json"), spec)?;
        Ok(BatchRecord { dir })
    }

    /// The record of batch `id`, or an error naming where it looked.
    pub fn open_batch(&self, id: &str) -> Result<BatchRecord, String> {
        let dir = self.root.join(id);
        if dir.join("batch.json").is_file() {
            Ok(BatchRecord { dir })
        } else {
            Err(format!(
                "no batch '{id}' in {} (no {}/batch.json)",
                self.root.display(),
                dir.display()
            ))
        }
    }

    /// Every batch, newest first.
    pub fn list(&self) -> Vec<BatchRecord> {
        let mut ids: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("batch.json").is_file())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids.reverse();
        ids.into_iter().map(|dir| BatchRecord { dir }).collect()
    }

    /// The last run, in any batch of this store, of provider `provider` that reported CLI
    /// session `session_id`: the newest finished attempt whose result names it. A task
    /// that resumes a session starts from there (its cumulative totals, its directory).
    pub fn last_run_of_session(&self, provider: &str, session_id: &str) -> Option<SessionRun> {
        let mut best: Option<((String, String, u32), SessionRun)> = None;
        for batch in self.list() {
            let Ok(spec) = batch.spec() else { continue };
            let Ok(tasks) = batch.tasks() else { continue };
            for task in tasks.into_iter().filter(|t| t.provider == provider) {
                let found = task.attempts.iter().rev().find_map(|a| {
                    let r = a.result.as_ref()?;
                    (r.session_id.as_deref() == Some(session_id)).then(|| {
                        let key = (
                            a.finished_at.clone().unwrap_or_default(),
                            spec.batch_id.clone(),
                            a.attempt,
                        );
                        (key, r.clone())
                    })
                });
                let Some((key, result)) = found else { continue };
                if best.as_ref().is_some_and(|(k, _)| *k >= key) {
                    continue;
                }
                best = Some((
                    key,
                    SessionRun {
                        batch_id: spec.batch_id.clone(),
                        worktrees: spec.worktrees,
                        task,
                        result,
                    },
                ));
            }
        }
        best.map(|(_, run)| run)
    }

    /// Every batch holding task `task_ref` (`TASK` or `BATCH/TASK`), newest first.
    pub fn find_tasks(&self, task_ref: &str) -> Vec<(BatchRecord, String)> {
        let (batch, task) = match task_ref.split_once('/') {
            Some((b, t)) => (Some(b), t),
            None => (None, task_ref),
        };
        self.list()
            .into_iter()
            .filter(|rec| batch.is_none_or(|b| b == rec.batch_id()))
            .filter(|rec| rec.task_dir(task).join("task.json").is_file())
            .map(|rec| (rec, task.to_owned()))
            .collect()
    }
}

/// An exclusive hold on a task's record: only the aicli process holding it runs the
/// task (a batch, an answer, a resume). It is an `flock` on `tasks/<task>/lock`, so the
/// kernel releases it when the process dies, however it dies.
#[derive(Debug)]
pub struct TaskLock {
    _file: nix::fcntl::Flock<std::fs::File>,
}

impl BatchRecord {
    /// Takes the task's lock, or says which process holds it.
    pub fn lock_task(&self, task_id: &str) -> Result<TaskLock, String> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.task_dir(task_id);
        create_private_dirs(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(PRIVATE_FILE_MODE)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut f) => {
                let _ = f.set_len(0);
                let _ = f.rewind();
                let _ = write!(f, "{}", std::process::id());
                Ok(TaskLock { _file: f })
            }
            Err((mut f, _)) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                Err(format!(
                    "task {}/{task_id} is being run by another aicli process (pid {})",
                    self.batch_id(),
                    pid.trim()
                ))
            }
        }
    }

    /// Takes the task's lock, waiting up to `max` for a holder that is about to let go
    /// (a batch releases a task right after writing its settled state, so a task that
    /// just blocked can be answered at once).
    pub async fn lock_task_within(
        &self,
        task_id: &str,
        max: std::time::Duration,
    ) -> Result<TaskLock, String> {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            match self.lock_task(task_id) {
                Ok(l) => return Ok(l),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The batch id.
    pub fn batch_id(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The spec.
    pub fn spec(&self) -> Result<BatchSpec, String> {
        read_json(&self.dir.join("batch.json"))
    }

    /// The result, if the batch ended (or was summarized) at least once.
    pub fn result(&self) -> Option<BatchResult> {
        read_json(&self.dir.join("result.json")).ok()
    }

    /// Writes the batch result.
    pub fn write_result(&self, r: &BatchResult) -> std::io::Result<()> {
        write_json_atomic(&self.dir.join("result.json"), r)
    }

    /// A task's record directory (created).
    pub fn task_dir(&self, task_id: &str) -> PathBuf {
        self.dir.join("tasks").join(task_id)
    }

    /// Reads a task's record.
    pub fn task(&self, task_id: &str) -> Result<TaskRecord, String> {
        read_json(&self.task_dir(task_id).join("task.json"))
    }

    /// Writes a task's record (and `result.json` when it has a result), atomically;
    /// fsynced when `durable` (at the end of an attempt).
    pub fn write_task(&self, rec: &TaskRecord, durable: bool) -> std::io::Result<()> {
        let dir = self.task_dir(&rec.task.id);
        create_private_dirs(&dir)?;
        write_json(&dir.join("task.json"), rec, durable)?;
        if let Some(r) = rec.latest_result() {
            write_json(&dir.join("result.json"), r, durable)?;
        }
        Ok(())
    }

    /// The size of a task's `events.ndjson` (where the next attempt's stdout starts).
    pub fn events_len(&self, task_id: &str) -> u64 {
        file_len(&self.task_dir(task_id).join("events.ndjson"))
    }

    /// The size of a task's `aicli-events.ndjson`.
    pub fn aicli_events_len(&self, task_id: &str) -> u64 {
        file_len(&self.task_dir(task_id).join("aicli-events.ndjson"))
    }

    /// The size of a task's `stderr.log`.
    pub fn stderr_len(&self, task_id: &str) -> u64 {
        file_len(&self.task_dir(task_id).join("stderr.log"))
    }

    /// USD the batch budget has counted so far over every attempt of every task
    /// ([`TaskRecord::charged`]; 0 when the records cannot be read).
    pub fn charged_usd(&self) -> f64 {
        self.tasks()
            .map(|ts| ts.iter().map(TaskRecord::charged).sum())
            .unwrap_or(0.0)
    }

    /// Every task record, in spec order.
    pub fn tasks(&self) -> Result<Vec<TaskRecord>, String> {
        let spec = self.spec()?;
        spec.tasks.iter().map(|t| self.task(&t.id)).collect()
    }

    /// One line for `aicli runs`.
    pub fn summary(&self) -> Result<BatchSummary, String> {
        let spec = self.spec()?;
        let tasks = self.tasks().unwrap_or_default();
        let count = |s: TaskState| tasks.iter().filter(|t| t.state == s).count();
        // Who ran the tasks (a mixed batch names each), not only the default.
        let mut providers: Vec<&str> = Vec::new();
        for t in &tasks {
            if !providers.contains(&t.provider.as_str()) {
                providers.push(&t.provider);
            }
        }
        let provider = if providers.is_empty() {
            spec.provider.clone()
        } else {
            providers.join(",")
        };
        Ok(BatchSummary {
            batch_id: spec.batch_id,
            created_at: spec.created_at,
            provider,
            n_tasks: spec.tasks.len(),
            n_succeeded: count(TaskState::Succeeded),
            n_failed: count(TaskState::Failed),
            n_blocked: count(TaskState::Blocked),
            n_unfinished: spec.tasks.len()
                - count(TaskState::Succeeded)
                - count(TaskState::Failed)
                - count(TaskState::Blocked),
            cost_usd: tasks.iter().map(|t| t.spent().0).sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aicli_providers::{CostSource, SessionTotals};

    fn attempt(n: u32, resumed: Option<&str>, result: SessionResult) -> AttemptRecord {
        AttemptRecord {
            attempt: n,
            kind: AttemptKind::Run,
            started_at: String::new(),
            finished_at: None,
            events_start: 0,
            events_end: None,
            stderr_start: 0,
            stderr_end: None,
            aicli_events_start: 0,
            model: None,
            prior: None,
            resumed_session: resumed.map(str::to_owned),
            argv: Vec::new(),
            place: None,
            result: Some(result),
            budget: None,
        }
    }

    fn result(sid: &str, cost: Option<f64>, cumulative_cost: Option<f64>) -> SessionResult {
        let mut r =
            SessionResult::not_started("p", aicli_providers::ErrorKind::Cancelled, "interrupted");
        r.session_id = Some(sid.to_owned());
        r.cost_usd = cost;
        r.cost_source = if cost.is_some() {
            CostSource::Reported
        } else {
            CostSource::Unknown
        };
        r.session_totals = cumulative_cost.map(|c| SessionTotals {
            usage: Default::default(),
            cost_usd: Some(c),
        });
        r
    }

    #[test]
    fn an_interrupted_attempt_is_covered_by_a_resume_with_a_cumulative_cost() {
        let mut rec = TaskRecord::queued(TaskSpec::default(), "p");
        rec.attempts.push(attempt(1, None, result("s", None, None)));
        rec.attempts
            .push(attempt(2, Some("s"), result("s", Some(0.5), Some(0.5))));
        assert_eq!(rec.spent(), (0.5, false));
        // A resume whose figures are per run (no session totals) does not cover it.
        let mut rec = TaskRecord::queued(TaskSpec::default(), "p");
        rec.attempts.push(attempt(1, None, result("s", None, None)));
        rec.attempts
            .push(attempt(2, Some("s"), result("s", Some(0.5), None)));
        assert_eq!(rec.spent(), (0.5, true));
    }

    #[test]
    fn the_budget_counts_charges_else_known_costs() {
        let mut rec = TaskRecord::queued(TaskSpec::default(), "p");
        // Cut off with its cost unknown: charged its whole reservation.
        let mut a = attempt(1, None, result("s", None, None));
        a.budget = Some(AttemptBudget {
            reserved_usd: 0.5,
            charged_usd: Some(0.5),
        });
        rec.attempts.push(a);
        // Made without a budget: its cost.
        rec.attempts
            .push(attempt(2, None, result("s", Some(0.25), None)));
        assert_eq!(rec.charged(), 0.75);
        assert_eq!(rec.spent(), (0.25, true));
    }
}
