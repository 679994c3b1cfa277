//! What the page does besides cancel: answer a blocked task, resume a batch, start a
//! task or a batch. Each is the `aicli` command a user would type (`aicli answer`,
//! `aicli resume`, `aicli batch`), run as a child of this server, so it writes the run
//! record exactly as the command does, and the page follows it through the record like
//! any other run.
//!
//! The children run in their own process group. An answer's text goes in on stdin and
//! a new batch's tasks in a private file, never in argv. When the server stops, each
//! child gets SIGTERM, which aicli takes as Ctrl-C (the run is stopped and its record
//! kept, resumable), then SIGKILL after a grace period; dropping the server without
//! stopping it kills them at once (their CLIs die with them by their parent-death
//! signal).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli_providers::{CommandSpec, TaskSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::proc::cgroup::CgroupMode;
use crate::proc::lines::StdoutLine;
use crate::proc::spawn::{LocalProcess, OutputOptions};
use crate::util::now_rfc3339;

/// Actions running at once, at most; more get 429.
const MAX_RUNNING: usize = 8;
/// Finished actions kept for `GET /api/actions`.
const KEEP_FINISHED: usize = 100;
/// Bytes of an action's output (stdout, then stderr) kept.
const OUTPUT_TAIL: usize = 8 * 1024;
/// How long a child has to stop after SIGTERM when the server stops.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// How the server runs `aicli` commands: the binary and the flags every command gets
/// (`--config`, `--repo`, `--runs-dir`).
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The `aicli` executable (this one).
    pub exe: PathBuf,
    /// The flags every command gets, before its own.
    pub args: Vec<String>,
    /// The directory the commands run in (the repository).
    pub cwd: PathBuf,
    /// `--fake-api=SCRIPT` for the batches the page starts (`aicli web --fake-api`).
    pub fake_api: Option<String>,
}

impl Launcher {
    /// The launcher for this process's own binary, for repository `repo`, with
    /// `--config` and `--runs-dir` as given.
    pub fn current(
        config: Option<&Path>,
        repo: &Path,
        runs_dir: Option<&Path>,
        fake_api: Option<String>,
    ) -> std::io::Result<Launcher> {
        let mut args = Vec::new();
        if let Some(c) = config {
            args.push("--config".to_owned());
            args.push(absolute(c).display().to_string());
        }
        args.push("--repo".to_owned());
        args.push(absolute(repo).display().to_string());
        if let Some(d) = runs_dir {
            args.push("--runs-dir".to_owned());
            args.push(absolute(d).display().to_string());
        }
        Ok(Launcher {
            exe: std::env::current_exe()?,
            args,
            cwd: absolute(repo),
            fake_api,
        })
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// What an action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// `aicli answer BATCH/TASK`.
    Answer,
    /// `aicli resume BATCH`.
    Resume,
    /// `aicli batch` of one task from the page's form.
    StartTask,
    /// `aicli batch` of a tasks file sent to the API.
    StartBatch,
    /// `aicli land BATCH/TASK` or `aicli land BATCH`.
    Land,
    /// `aicli discard BATCH/TASK --yes`.
    Discard,
}

/// Where an action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    /// Its command runs.
    Running,
    /// It exited 0: every task it ran succeeded.
    Succeeded,
    /// It exited 3: a task it ran asks a question again.
    Blocked,
    /// It exited otherwise, or could not start (`output` says why).
    Failed,
}

/// An action, as `GET /api/actions/ID` gives it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ActionView {
    /// Its id, unique in this server's lifetime.
    pub id: u64,
    /// What it is.
    pub kind: ActionKind,
    /// The batch it acts on or started.
    pub batch_id: String,
    /// The task it acts on, if one.
    pub task_id: Option<String>,
    /// Where it is.
    pub state: ActionState,
    /// Its command's exit code, once exited.
    pub exit_code: Option<i32>,
    /// The last lines its command printed (stdout, then stderr; at most 8 KiB).
    pub output: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
}

/// `POST /api/batches/B/tasks/T/answer`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// The answer: an option's text, or free text. Not empty.
    pub text: String,
}

/// The body of `POST /api/batches/B/land` and `POST /api/batches/B/tasks/T/land` (it
/// may be empty: a merge into the branch checked out in the repository).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LandRequest {
    /// `merge` (default), `squash` or `rebase`.
    pub how: crate::record::LandHow,
    /// The branch to land into (default: the one checked out in the repository).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
}

/// The body of `POST /api/batches/B/tasks/T/discard`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscardRequest {
    /// Must be `true`: the caller was told what is lost (without it, the answer is 400
    /// saying what).
    pub confirm: bool,
}

/// `POST /api/tasks`: one task, as the page's form starts it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartTaskRequest {
    /// The prompt. Not empty.
    pub prompt: String,
    /// The provider (default: the config's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `local` or `docker` (default: the provider's, then the config's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<aicli_providers::RunnerKind>,
    /// The model (default: the provider's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The task's id (default: `task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// The answer to a request that started an action: 202 with where to follow it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ActionStarted {
    /// The action (`GET /api/actions/ID`).
    pub action: ActionView,
    /// The page of the batch it acts on or started.
    pub batch_url: String,
}

/// Why an action was not started.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The page cannot start commands (no launcher).
    Disabled,
    /// Too many run already.
    Busy,
    /// The command could not start.
    Spawn(String),
}

/// The actions of one server.
#[derive(Debug)]
pub(crate) struct Actions {
    launcher: Option<Launcher>,
    next: AtomicU64,
    all: Mutex<BTreeMap<u64, Arc<Mutex<ActionView>>>>,
    stop: CancellationToken,
    tracker: TaskTracker,
}

/// One command to run.
pub(crate) struct Command {
    pub kind: ActionKind,
    pub batch_id: String,
    pub task_id: Option<String>,
    /// Its own arguments (after the launcher's).
    pub args: Vec<String>,
    /// Its stdin.
    pub stdin: Option<String>,
    /// A file the command reads, removed when it ends.
    pub temp_file: Option<PathBuf>,
}

impl Actions {
    pub(crate) fn new(launcher: Option<Launcher>) -> Actions {
        Actions {
            launcher,
            next: AtomicU64::new(1),
            all: Mutex::new(BTreeMap::new()),
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    /// The launcher, when the page may start commands.
    pub(crate) fn launcher(&self) -> Option<&Launcher> {
        self.launcher.as_ref()
    }

    /// Every action this server has (the last 100 finished ones and the running ones),
    /// newest first.
    pub(crate) fn list(&self) -> Vec<ActionView> {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.values()
            .rev()
            .map(|a| a.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }

    pub(crate) fn get(&self, id: u64) -> Option<ActionView> {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.get(&id)
            .map(|a| a.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Starts `cmd`: its view (state `running`), or why not.
    pub(crate) fn start(&self, cmd: Command) -> Result<ActionView, Refused> {
        let remove_temp = |c: &Command| {
            if let Some(f) = &c.temp_file {
                let _ = std::fs::remove_file(f);
            }
        };
        let Some(l) = &self.launcher else {
            remove_temp(&cmd);
            return Err(Refused::Disabled);
        };
        let view = {
            let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
            let running = all
                .values()
                .filter(|a| a.lock().is_ok_and(|v| v.state == ActionState::Running))
                .count();
            if running >= MAX_RUNNING {
                drop(all);
                remove_temp(&cmd);
                return Err(Refused::Busy);
            }
            let finished: Vec<u64> = all
                .iter()
                .filter(|(_, a)| a.lock().is_ok_and(|v| v.state != ActionState::Running))
                .map(|(id, _)| *id)
                .collect();
            for id in finished.iter().take(finished.len().saturating_sub(KEEP_FINISHED)) {
                all.remove(id);
            }
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            let view = Arc::new(Mutex::new(ActionView {
                id,
                kind: cmd.kind,
                batch_id: cmd.batch_id.clone(),
                task_id: cmd.task_id.clone(),
                state: ActionState::Running,
                exit_code: None,
                output: String::new(),
                started_at: now_rfc3339(),
                finished_at: None,
            }));
            all.insert(id, view.clone());
            view
        };
        let mut spec = CommandSpec::new(
            &aicli_providers::BinaryLocation::Path(l.exe.clone()),
            &l.cwd,
        );
        spec.args(l.args.iter().cloned().chain(cmd.args.iter().cloned()));
        spec.stdin = cmd.stdin.clone();
        let out = OutputOptions {
            stderr_tail: OUTPUT_TAIL,
            ..OutputOptions::default()
        };
        // No cgroup of its own: the child is aicli, which puts each CLI in a cgroup of
        // its own; SIGTERM then reaches aicli alone, which stops its runs itself.
        let child = match LocalProcess::spawn_in(&spec, out, CgroupMode::Off) {
            Ok(c) => c,
            Err(e) => {
                remove_temp(&cmd);
                let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
                v.state = ActionState::Failed;
                v.output = e.to_string();
                v.finished_at = Some(now_rfc3339());
                return Err(Refused::Spawn(e.to_string()));
            }
        };
        tracing::info!(kind = ?cmd.kind, batch = %cmd.batch_id, task = ?cmd.task_id, pid = child.pid(), "web action started");
        let first = view.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let stop = self.stop.clone();
        self.tracker
            .spawn(supervise(child, view, stop, cmd.temp_file));
        Ok(first)
    }

    /// Stops every running action (SIGTERM, then SIGKILL after the grace period) and
    /// waits for them.
    pub(crate) async fn stop(&self) {
        self.stop.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

impl Drop for Actions {
    fn drop(&mut self) {
        // The supervisors' children are killed by their own drop when the runtime drops
        // the tasks; cancelling first makes a live runtime shut them down with grace.
        self.stop.cancel();
    }
}

async fn supervise(
    mut child: LocalProcess,
    view: Arc<Mutex<ActionView>>,
    stop: CancellationToken,
    temp_file: Option<PathBuf>,
) {
    let mut out = Tail::default();
    let code = loop {
        tokio::select! {
            line = child.lines.recv() => match line {
                Some(StdoutLine::Line(b)) => out.push(&b),
                Some(StdoutLine::Overlong { prefix, .. }) => out.push(&prefix),
                None => break child.wait().await,
            },
            () = stop.cancelled() => break child.shutdown(STOP_GRACE).await,
        }
    };
    child.drain().await;
    if let Some(f) = temp_file {
        let _ = std::fs::remove_file(f);
    }
    let stderr = child.stderr.text();
    let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
    v.exit_code = code;
    v.state = match code {
        Some(0) => ActionState::Succeeded,
        Some(3) => ActionState::Blocked,
        _ => ActionState::Failed,
    };
    let mut text = out.0;
    if !stderr.trim().is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(stderr.trim_end());
    }
    v.output = tail(&text, OUTPUT_TAIL).to_owned();
    v.finished_at = Some(now_rfc3339());
    tracing::info!(id = v.id, kind = ?v.kind, code = ?code, "web action ended");
}

/// The last [`OUTPUT_TAIL`] bytes of the lines pushed.
#[derive(Default)]
struct Tail(String);

impl Tail {
    fn push(&mut self, line: &[u8]) {
        self.0.push_str(&String::from_utf8_lossy(line));
        self.0.push('\n');
        if self.0.len() > 2 * OUTPUT_TAIL {
            self.0 = tail(&self.0, OUTPUT_TAIL).to_owned();
        }
    }
}

/// The last `max` bytes of `s`, cut at a character boundary.
fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// The command for an answer: `aicli answer BATCH/TASK - --json`, the text on stdin.
pub(crate) fn answer(batch: &str, task: &str, text: &str) -> Command {
    Command {
        kind: ActionKind::Answer,
        batch_id: batch.to_owned(),
        task_id: Some(task.to_owned()),
        args: vec![
            "answer".to_owned(),
            format!("{batch}/{task}"),
            "-".to_owned(),
            "--json".to_owned(),
        ],
        stdin: Some(text.to_owned()),
        temp_file: None,
    }
}

/// The command for a land: `aicli land TARGET --json --HOW [--into BRANCH]` (TARGET a
/// batch, or `BATCH/TASK`).
pub(crate) fn land(batch: &str, task: Option<&str>, req: &LandRequest) -> Command {
    let target = match task {
        Some(t) => format!("{batch}/{t}"),
        None => batch.to_owned(),
    };
    let mut args = vec![
        "land".to_owned(),
        target,
        "--json".to_owned(),
        format!("--{}", req.how.as_str()),
    ];
    if let Some(into) = &req.into {
        args.extend(["--into".to_owned(), into.clone()]);
    }
    Command {
        kind: ActionKind::Land,
        batch_id: batch.to_owned(),
        task_id: task.map(str::to_owned),
        args,
        stdin: None,
        temp_file: None,
    }
}

/// The command for a discard: `aicli discard BATCH/TASK --yes --json`.
pub(crate) fn discard(batch: &str, task: &str) -> Command {
    Command {
        kind: ActionKind::Discard,
        batch_id: batch.to_owned(),
        task_id: Some(task.to_owned()),
        args: vec![
            "discard".to_owned(),
            format!("{batch}/{task}"),
            "--yes".to_owned(),
            "--json".to_owned(),
        ],
        stdin: None,
        temp_file: None,
    }
}

/// The command for a resume: `aicli resume BATCH --json`.
pub(crate) fn resume(batch: &str) -> Command {
    Command {
        kind: ActionKind::Resume,
        batch_id: batch.to_owned(),
        task_id: None,
        args: vec!["resume".to_owned(), batch.to_owned(), "--json".to_owned()],
        stdin: None,
        temp_file: None,
    }
}

/// The command for a new batch of `tasks` (a tasks file's JSON), written to a private
/// file in `dir`: `aicli batch FILE --batch-id ID --json`.
pub(crate) fn new_batch(
    kind: ActionKind,
    launcher: &Launcher,
    dir: &Path,
    tasks: &serde_json::Value,
) -> std::io::Result<Command> {
    let batch_id = crate::util::new_batch_id();
    let file = dir.join(format!(".web-{batch_id}.tasks.json"));
    crate::util::write_private_file(&file, &tasks.to_string(), 0o600)?;
    let mut args = vec![
        "batch".to_owned(),
        file.display().to_string(),
        "--batch-id".to_owned(),
        batch_id.clone(),
        "--json".to_owned(),
    ];
    if let Some(s) = &launcher.fake_api {
        args.push(format!("--fake-api={s}"));
    }
    Ok(Command {
        kind,
        batch_id,
        task_id: None,
        args,
        stdin: None,
        temp_file: Some(file),
    })
}

impl StartTaskRequest {
    /// The task it asks for, checked as a tasks file's task would be; the error says
    /// which field is wrong.
    pub(crate) fn task(&self) -> Result<TaskSpec, String> {
        if self.prompt.trim().is_empty() {
            return Err("the prompt is empty: say what the agent should do".to_owned());
        }
        fn blank(s: &Option<String>) -> Option<&str> {
            s.as_deref().filter(|s| !s.trim().is_empty())
        }
        let v = serde_json::json!({
            "id": blank(&self.id).unwrap_or("task"),
            "prompt": self.prompt,
            "provider": blank(&self.provider),
            "model": blank(&self.model),
            "runner": self.runner,
        });
        let t: TaskSpec = serde_json::from_value(v).map_err(|e| e.to_string())?;
        t.validate().map_err(|e| e.to_string())?;
        Ok(t)
    }
}
