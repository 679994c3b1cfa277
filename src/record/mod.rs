//! Run records on disk: `<runs>/<batch-id>/`, every file name in [`files`].
//!
//! ```text
//! batch.json                    the batch spec (written once, atomically)
//! result.json                   the BatchResult (atomic; rewritten as the batch ends)
//! journal.ndjson                every write of every task's record, appended
//! tasks/<task>/task.json        the task's state and attempts, written when it settles
//! tasks/<task>/events.ndjson    raw stdout of every attempt, appended as received
//! tasks/<task>/stderr.log       stderr of every attempt, appended (made on its first byte)
//! tasks/<task>/aicli-events.ndjson  events aicli made (MCP logs, questions), appended
//! ```
//!
//! A task's record is its last line in the [journal](journal): a task that runs writes
//! no file of its own but its streams, and `task.json` is the copy of its record written
//! once, as it settles (a reader takes it only for a task the journal does not hold, as
//! in records of an older aicli). A settled task's line is on disk before the batch
//! goes on (one `fdatasync` per group of ends); appends to the streams are fsynced when
//! an attempt ends (a file the attempt appended nothing to needs none). A `kill -9` at
//! any moment leaves every file valid: the page cache survives it, and an attempt that
//! was running is recognisable (it has a start offset and no end).

//!
//! | module | owns |
//! |---|---|
//! | [`files`] | every file name of a record |
//! | `journal` | the batch's journal: appends, group commits, an index for reads |
//! | `task` | [`TaskRecord`] and its attempts, what a task spent and was charged |
//! | `batch` | [`BatchSpec`], [`BatchResult`], [`BatchSummary`] |
//! | `lock` | [`TaskLock`]: one aicli process runs a task at a time |
//! | `writes` | a task's record written: its journal lines, `task.json`, its run's processes |

mod batch;
pub(crate) mod beneath;
mod control;
mod egress;
pub mod files;
mod journal;
mod lock;
mod park;
mod task;
mod writes;

use std::path::{Path, PathBuf};

use aicli_providers::SessionResult;

pub use batch::{BatchResult, BatchSpec, BatchSummary, Overlap, OverlapWith, TaskCost, TaskGist};
pub use control::ControlRequest;
pub use egress::EgressDenial;
pub use lock::TaskLock;
pub use task::{
    AnswerRecord, AttemptBudget, AttemptKind, AttemptRecord, LandHow, LandRecord, SetupStep,
    TaskRecord, TaskState,
};
pub use park::{ParkRecord, local_clock};

use crate::util::{ensure_private_dir, write_json_atomic};

/// A run-records directory.
#[derive(Debug, Clone)]
pub struct RunStore {
    root: PathBuf,
}

/// How a task's record is written ([`BatchRecord::write_task_off_thread`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// While the task runs (or waits in the queue): its line in the journal.
    Progress,
    /// The task settled in this invocation, or its settled record changed (landed,
    /// discarded): its line in the journal, on disk before the write returns, and its
    /// `task.json`.
    Settled,
}

/// One batch's record directory.
#[derive(Debug, Clone)]
pub struct BatchRecord {
    dir: PathBuf,
    /// Its journal, shared by every clone (one writer's descriptor and group commit).
    journal: std::sync::Arc<journal::Journal>,
}

impl BatchRecord {
    fn at(dir: PathBuf) -> BatchRecord {
        let journal = std::sync::Arc::new(journal::Journal::new(dir.join(files::JOURNAL)));
        BatchRecord { dir, journal }
    }
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

/// The record of the task whose record directory is `dir`
/// (`<runs>/<batch>/tasks/<task>`); `None` when `dir` is not one, or its batch holds no
/// record of that task.
pub fn task_at(dir: &Path) -> Option<Result<TaskRecord, String>> {
    let dir = std::path::absolute(dir).ok()?;
    let task = dir.file_name()?.to_str()?;
    let tasks = dir.parent()?;
    if tasks.file_name()? != files::TASKS_DIR {
        return None;
    }
    let batch_dir = tasks.parent()?;
    let store = RunStore::new(batch_dir.parent()?);
    let batch = store.open_batch(batch_dir.file_name()?.to_str()?).ok()?;
    batch.has_task(task).then(|| batch.task(task))
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
        ensure_private_dir(&dir.join(files::TASKS_DIR))?;
        write_json_atomic(&dir.join(files::BATCH_SPEC), spec)?;
        Ok(BatchRecord::at(dir))
    }

    /// The record of batch `id`, or an error naming where it looked. A batch directory
    /// that is a symlink, or whose `batch.json` is one, is refused ([`beneath`]).
    pub fn open_batch(&self, id: &str) -> Result<BatchRecord, String> {
        let dir = self.root.join(id);
        let single = Path::new(id).components().count() == 1;
        match beneath::open(&self.root, &Path::new(id).join(files::BATCH_SPEC), false) {
            Ok(_) if single => Ok(BatchRecord::at(dir)),
            Ok(_) => Err(format!("'{id}' is not a batch id")),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(format!("batch '{id}': {e}")),
            Err(_) => Err(format!(
                "no batch '{id}' in {} (no {}/batch.json)",
                self.root.display(),
                dir.display()
            )),
        }
    }

    /// Every batch, newest first: the directories of the store (never a symlink) that
    /// hold a `batch.json` (never a symlink either).
    pub fn list(&self) -> Vec<BatchRecord> {
        let mut ids: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter(|e| {
                        let rel = Path::new(&e.file_name()).join(files::BATCH_SPEC);
                        beneath::open(&self.root, &rel, false).is_ok()
                    })
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids.reverse();
        ids.into_iter().map(BatchRecord::at).collect()
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
            .filter(|rec| rec.has_task(task))
            .map(|rec| (rec, task.to_owned()))
            .collect()
    }
}

impl BatchRecord {
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
        self.read_json(Path::new(files::BATCH_SPEC))
    }

    /// The result, if the batch ended (or was summarized) at least once.
    pub fn result(&self) -> Option<BatchResult> {
        self.read_json(Path::new(files::BATCH_RESULT)).ok()
    }

    /// The JSON file `rel` of this record, read without following a symlink at any
    /// level below the runs directory ([`beneath`]).
    fn read_json<T: serde::de::DeserializeOwned>(&self, rel: &Path) -> Result<T, String> {
        let path = self.dir.join(rel);
        let bytes = self
            .read_file(rel)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The file `rel` of this record (relative to its directory), opened without
    /// following a symlink at any level below the runs directory.
    pub fn open_file(&self, rel: &Path) -> std::io::Result<std::fs::File> {
        let (root, id) = self.root_and_id();
        beneath::open(root, &Path::new(id).join(rel), false)
    }

    fn read_file(&self, rel: &Path) -> std::io::Result<Vec<u8>> {
        let (root, id) = self.root_and_id();
        beneath::read(root, &Path::new(id).join(rel))
    }

    /// The names in task `task_id`'s record directory, listed without following a
    /// symlink at any level.
    pub fn task_file_names(&self, task_id: &str) -> std::io::Result<Vec<std::ffi::OsString>> {
        let (root, id) = self.root_and_id();
        beneath::list(root, &Path::new(id).join(files::TASKS_DIR).join(task_id))
    }

    /// Task `task_id`'s record file `name` ([`BatchRecord::open_file`]).
    pub fn open_task_file(&self, task_id: &str, name: &str) -> std::io::Result<std::fs::File> {
        self.open_file(&Path::new(files::TASKS_DIR).join(task_id).join(name))
    }

    /// Whether task `task_id` has a record here: a line in the journal, or its
    /// `task.json` (reached without a symlink).
    pub fn has_task(&self, task_id: &str) -> bool {
        self.open_journal()
            .is_some_and(|f| self.journal.has(&f, task_id))
            || self.open_task_file(task_id, files::TASK).is_ok()
    }

    /// The processes of task `task_id`'s run as last recorded, unless the run ended
    /// (what a killed aicli left running).
    pub fn recorded_pids(&self, task_id: &str) -> Option<String> {
        self.open_journal()
            .and_then(|f| self.journal.pids(&f, task_id))
    }

    /// The journal, opened without following a symlink; `None` when there is none.
    fn open_journal(&self) -> Option<std::fs::File> {
        self.open_file(Path::new(files::JOURNAL)).ok()
    }

    /// The runs directory and the batch id.
    fn root_and_id(&self) -> (&Path, &std::ffi::OsStr) {
        (
            self.dir.parent().unwrap_or(Path::new("/")),
            self.dir.file_name().unwrap_or_default(),
        )
    }

    /// Writes the batch result.
    pub fn write_result(&self, r: &BatchResult) -> std::io::Result<()> {
        write_json_atomic(&self.dir.join(files::BATCH_RESULT), r)
    }

    /// A task's record directory (created).
    pub fn task_dir(&self, task_id: &str) -> PathBuf {
        self.dir.join(files::TASKS_DIR).join(task_id)
    }

    /// Reads a task's record, its prompt taken from the batch's spec (where it is
    /// stored, once).
    pub fn task(&self, task_id: &str) -> Result<TaskRecord, String> {
        let spec = self.spec()?;
        let mut rec = self.task_without_prompt(task_id)?;
        if let Some(t) = spec.tasks.into_iter().find(|t| t.id == task_id) {
            rec.task.prompt = t.prompt;
        }
        Ok(rec)
    }

    /// The task's record as last written, the prompt left out: its last line in the
    /// journal, else its `task.json`.
    fn task_without_prompt(&self, task_id: &str) -> Result<TaskRecord, String> {
        self.task_in(self.open_journal().as_ref(), task_id)
    }

    /// [`BatchRecord::task_without_prompt`], the journal `journal` opened once for many.
    fn task_in(&self, journal: Option<&std::fs::File>, task_id: &str) -> Result<TaskRecord, String> {
        if let Some(found) = journal.and_then(|f| self.journal.record(f, task_id)) {
            return found;
        }
        self.read_json(&Path::new(files::TASKS_DIR).join(task_id).join(files::TASK))
    }

    /// The size of a task's `events.ndjson` (where the next attempt's stdout starts).
    pub fn events_len(&self, task_id: &str) -> u64 {
        file_len(&self.task_dir(task_id).join(files::EVENTS))
    }

    /// The size of a task's `aicli-events.ndjson`.
    pub fn aicli_events_len(&self, task_id: &str) -> u64 {
        file_len(&self.task_dir(task_id).join(files::AICLI_EVENTS))
    }

    /// The size of a task's `stderr.log`.
    pub fn stderr_len(&self, task_id: &str) -> u64 {
        file_len(&self.task_dir(task_id).join(files::STDERR))
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
        // In spec order, each prompt moved from the spec into its record.
        let journal = self.open_journal();
        spec.tasks
            .into_iter()
            .map(|t| {
                let mut rec = self.task_in(journal.as_ref(), &t.id)?;
                rec.task.prompt = t.prompt;
                Ok(rec)
            })
            .collect()
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
            n_interrupted: count(TaskState::Interrupted),
            n_parked: count(TaskState::Parked),
            n_unfinished: spec.tasks.len()
                - count(TaskState::Succeeded)
                - count(TaskState::Failed)
                - count(TaskState::Blocked),
            cost_usd: tasks.iter().map(|t| t.spent().0).sum(),
            tasks: spec
                .tasks
                .iter()
                .take(batch::SUMMARY_TASKS)
                .map(|t| batch::TaskGist::of(&t.id, &t.prompt))
                .collect(),
        })
    }
}
