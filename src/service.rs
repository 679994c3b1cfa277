//! The batch service: `run_batch(provider, tasks, options) -> BatchResult`.
//!
//! Resolves providers, checks the repository, records the batch, mints an MCP token
//! per task run (when an agent server is attached), runs the tasks through the
//! [`pool`](crate::pool) (each in its own worktree), enforces the batch budget
//! ([`budget`](crate::budget)), cleans up worktrees that hold no work, and aggregates the
//! result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aicli_providers::{
    AgentEvent, AiCliConfig, AnsweredQuestion, Continuation, ContinuationMode, ErrorKind,
    EventKind, Feature, McpEndpoint, ParseContext, PendingQuestion, ProviderRegistry, RunnerKind,
    SessionResult, SessionStatus, SessionTotals, SharedProvider, TaskSpec,
};
use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::events::BatchEvent;
use crate::live::LiveSender;
use crate::pool::{self, Backoff, Control, PoolOwner};
use crate::runner::{AgentReach, LocalRunner, PlaceRequest, Placement, Runner};
use crate::session::{SessionIo, SessionLimits, SessionOutcome, SessionSpec, run_session};
use crate::store::{
    AnswerRecord, AttemptBudget, AttemptKind, AttemptRecord, BatchRecord, BatchResult, BatchSpec,
    RunStore, SessionRun, TaskLock, TaskRecord, TaskState, read_range,
};
use crate::util::now_rfc3339;
use crate::worktree::{Cleanup, Repo, Worktree, WorktreeError};

/// What a task run may reach through aicli's agent server.
#[derive(Debug, Clone)]
pub struct TaskScope {
    /// The batch.
    pub batch_id: String,
    /// The task.
    pub task_id: String,
    /// The task's workspace (its worktree).
    pub workspace: PathBuf,
    /// Skills connected to the task.
    pub skills: Vec<String>,
    /// Credential names the task may read.
    pub credentials: Vec<String>,
    /// MCP tools and upstreams the task may use (`engine.mcp_tools` and its own).
    pub tools: Vec<String>,
    /// The task's record directory (the server logs tool calls there).
    pub record_dir: Option<PathBuf>,
    /// The attempt (1-based).
    pub attempt: u32,
}

/// A token granted to one run.
#[derive(Debug)]
pub struct AgentGrant {
    /// How the CLI reaches the server (URL and token).
    pub endpoint: McpEndpoint,
    /// The server's port.
    pub port: u16,
    /// Events the server makes for this run (logs, questions).
    pub events: mpsc::UnboundedReceiver<AgentEvent>,
}

/// The agent server as the engine sees it: grants a token per run, revokes it after,
/// and hears when a batch ends (what it started for the batch stops then).
#[async_trait]
pub trait AgentServer: Send + Sync + std::fmt::Debug {
    /// A token bound to `scope`, for a CLI that reaches the server as `reach` says (over
    /// loopback when `None`; else the server listens on `reach.bind` too, and the URL
    /// names `reach.url_host`). Errors say why the server cannot be reached that way.
    async fn grant(
        &self,
        scope: TaskScope,
        reach: Option<&AgentReach>,
    ) -> Result<AgentGrant, String>;
    /// Revokes a token: the next request with it is refused.
    fn revoke(&self, token: &str);
    /// From now on only requests from `peer` may use `token`.
    fn restrict(&self, token: &str, peer: std::net::IpAddr);
    /// Every task of `batch_id` is done (in this process): stop what serves only it.
    async fn end_batch(&self, _batch_id: &str) {}
}

/// Errors that stop a batch before any task runs.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A config or provider problem.
    #[error(transparent)]
    Config(#[from] aicli_providers::ConfigError),
    /// A repository problem.
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    /// A task spec is invalid.
    #[error("task {index} ({id}): {message}")]
    InvalidTask {
        /// Its position in the batch (1-based).
        index: usize,
        /// Its id.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// Nothing to run.
    #[error("the batch has no tasks")]
    NoTasks,
    /// A batch option is invalid ([`BatchOptions::validate`]).
    #[error("{option}: {message}")]
    InvalidOption {
        /// The option's field in [`BatchOptions`] (`budget_usd`, `timeout`, ...).
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The run records could not be written.
    #[error("cannot write the run record in {path}: {source}")]
    Record {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be read (resume, answer).
    #[error("{0}")]
    NotFound(String),
    /// The operation does not apply (e.g. answering a task that is not blocked).
    #[error("{0}")]
    Refused(String),
}

/// How a batch runs. `None` fields take the config's engine defaults.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    /// The repository (or, without worktrees, the directory) tasks run against.
    pub repo: PathBuf,
    /// The provider for tasks that name none (the config's default when `None`).
    pub provider: Option<String>,
    /// Sessions at once.
    pub max_parallel: Option<usize>,
    /// Batch budget in USD.
    pub budget_usd: Option<f64>,
    /// Wall-clock limit per run.
    pub timeout: Option<Duration>,
    /// Idle limit per run.
    pub idle_timeout: Option<Duration>,
    /// Where run records go.
    pub runs_dir: Option<PathBuf>,
    /// Base of the worktrees.
    pub base_ref: String,
    /// Run each task in its own worktree (else in `repo` itself).
    pub worktrees: bool,
    /// Use this batch id instead of a new one.
    pub batch_id: Option<String>,
    /// Where tasks that name no runner run (before the provider's and the config's).
    pub runner: Option<RunnerKind>,
}

impl BatchOptions {
    /// Defaults for `repo`.
    pub fn new(repo: impl Into<PathBuf>) -> BatchOptions {
        BatchOptions {
            repo: repo.into(),
            provider: None,
            max_parallel: None,
            budget_usd: None,
            timeout: None,
            idle_timeout: None,
            runs_dir: None,
            base_ref: "HEAD".to_owned(),
            worktrees: true,
            batch_id: None,
            runner: None,
        }
    }
}

impl BatchOptions {
    /// Checks the options before anything is written or run: a budget must be a finite
    /// number above 0, time limits at least a second, parallelism at least 1.
    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |option, message: String| EngineError::InvalidOption { option, message };
        if let Some(b) = self.budget_usd {
            aicli_providers::check_budget(b).map_err(|m| invalid("budget_usd", m))?;
        }
        for (option, limit) in [
            ("timeout", self.timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if limit.is_some_and(|d| d < Duration::from_secs(1)) {
                return Err(invalid(
                    option,
                    "must be at least 1 second (less would stop every run at once)".to_owned(),
                ));
            }
        }
        if self.max_parallel == Some(0) {
            return Err(invalid(
                "max_parallel",
                "must be at least 1 (0 would run nothing)".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The runners an engine starts CLIs with: local processes, and containers (connected to
/// their engines on first use).
#[derive(Debug, Clone)]
struct Runners {
    local: Arc<dyn Runner>,
    docker: Arc<tokio::sync::OnceCell<Result<Arc<dyn Runner>, String>>>,
}

/// The engine: config, providers, runners, and optionally an agent server.
#[derive(Debug, Clone)]
pub struct Engine {
    config: Arc<AiCliConfig>,
    registry: Arc<ProviderRegistry>,
    runners: Runners,
    agent_server: Option<Arc<dyn AgentServer>>,
    search_path: Option<String>,
    /// The environment a CLI's variables are taken from (aicli's own by default); a CLI
    /// gets only what [`crate::env::cli_env`] picks from it.
    source_env: BTreeMap<String, String>,
    auth_precheck: bool,
}

impl Engine {
    /// An engine over `config` and `registry`, running CLIs as local processes.
    pub fn new(config: AiCliConfig, registry: ProviderRegistry) -> Engine {
        let auth_precheck = config.engine.auth_precheck;
        let cgroups = config.engine.cgroups;
        Engine {
            config: Arc::new(config),
            registry: Arc::new(registry),
            runners: Runners {
                local: Arc::new(LocalRunner::new(cgroups)),
                docker: Arc::new(tokio::sync::OnceCell::new()),
            },
            agent_server: None,
            search_path: None,
            source_env: crate::env::process_env(),
            auth_precheck,
        }
    }

    /// Uses `runner` for the tasks that run on `kind` (instead of the built-in one).
    pub fn with_runner(mut self, kind: RunnerKind, runner: Arc<dyn Runner>) -> Engine {
        match kind {
            RunnerKind::Local => self.runners.local = runner,
            RunnerKind::Docker => {
                self.runners.docker = Arc::new(tokio::sync::OnceCell::new_with(Some(Ok(runner))))
            }
        }
        self
    }

    /// Where a task runs: its own runner, else its provider's, else the config's.
    pub fn runner_kind(&self, task: &TaskSpec, provider: &SharedProvider) -> RunnerKind {
        task.runner
            .or(provider.config().runner)
            .unwrap_or(self.config.engine.runner)
    }

    /// The runner of `kind` (the Docker runner connects to its engines on first use).
    pub async fn runner(&self, kind: RunnerKind) -> Result<Arc<dyn Runner>, String> {
        match kind {
            RunnerKind::Local => Ok(self.runners.local.clone()),
            RunnerKind::Docker => self
                .runners
                .docker
                .get_or_init(|| async {
                    crate::runner::DockerRunner::connect(
                        &self.config.engine.docker,
                        &self.source_env,
                    )
                    .await
                    .map(|r| Arc::new(r) as Arc<dyn Runner>)
                    .map_err(|e| e.to_string())
                })
                .await
                .clone(),
        }
    }

    /// Attaches an agent (MCP) server: each run gets a token and the wiring.
    pub fn with_agent_server(mut self, server: Arc<dyn AgentServer>) -> Engine {
        self.agent_server = Some(server);
        self
    }

    /// Looks for CLIs on `path` instead of the process PATH.
    pub fn with_search_path(mut self, path: impl Into<String>) -> Engine {
        self.search_path = Some(path.into());
        self
    }

    /// The environment the CLIs' variables come from (the process's by default). A CLI
    /// never inherits it whole: it gets the base set (`engine.env_passthrough`), its
    /// provider's own variables and the configured `env` ([`crate::env::cli_env`]).
    /// Tests pass their own instead of changing the process environment.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Engine {
        self.source_env = env;
        self
    }

    /// The environment a probe of `provider` (auth status, version) runs with: what a
    /// run of it gets, without a task's own variables.
    pub fn probe_env(&self, provider: &SharedProvider) -> BTreeMap<String, String> {
        crate::env::cli_env(
            &self.source_env,
            &self.config.engine.env_passthrough,
            provider.config(),
            None,
        )
    }

    /// Turns the quick pre-flight credentials check on or off.
    pub fn with_auth_precheck(mut self, on: bool) -> Engine {
        self.auth_precheck = on;
        self
    }

    /// The config.
    pub fn config(&self) -> &AiCliConfig {
        &self.config
    }

    /// The providers.
    pub fn registry(&self) -> &ProviderRegistry {
        &self.registry
    }

    /// The run-records directory for `repo` under `options`.
    pub fn runs_dir(&self, repo: &Path, explicit: Option<&Path>) -> PathBuf {
        explicit
            .map(Path::to_path_buf)
            .or_else(|| self.config.engine.runs_dir.clone())
            .unwrap_or_else(|| repo.join(".aicli").join("runs"))
    }

    fn limits(&self, opts: &BatchOptions, task: &TaskSpec) -> SessionLimits {
        let e = &self.config.engine;
        SessionLimits {
            timeout: task
                .timeout_secs
                .map(Duration::from_secs)
                .or(opts.timeout)
                .unwrap_or(Duration::from_secs(e.timeout_secs)),
            idle_timeout: task
                .idle_timeout_secs
                .map(Duration::from_secs)
                .or(opts.idle_timeout)
                .unwrap_or(Duration::from_secs(e.idle_timeout_secs)),
            kill_grace: Duration::from_millis(e.kill_grace_ms),
            final_grace: Duration::from_secs(2),
            line_cap: e.line_cap_bytes,
            stderr_tail: e.stderr_tail_bytes,
        }
    }

    /// Runs `tasks` as a new batch; live events go to `live`.
    pub async fn run_batch(
        &self,
        mut tasks: Vec<TaskSpec>,
        opts: BatchOptions,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<BatchResult, EngineError> {
        opts.validate()?;
        if tasks.is_empty() {
            return Err(EngineError::NoTasks);
        }
        assign_ids(&mut tasks)?;
        // The batch's runner goes into each task that names none: answers and resumes
        // run where the task ran.
        for t in &mut tasks {
            t.runner = t.runner.or(opts.runner);
        }
        for (i, t) in tasks.iter().enumerate() {
            if let Some((j, message)) = self.config.unknown_mcp_grant(&t.mcp_tools) {
                return Err(EngineError::InvalidTask {
                    index: i + 1,
                    id: t.id.clone(),
                    message: format!("mcp_tools[{j}]: {message}"),
                });
            }
        }
        let default_provider = opts
            .provider
            .clone()
            .unwrap_or_else(|| self.config.default_provider.clone());
        for t in &tasks {
            self.registry
                .get(t.provider.as_deref().unwrap_or(&default_provider))?;
        }
        let (workdir_root, base) = if opts.worktrees {
            let repo = Repo::open(&opts.repo).await?;
            let base = repo.resolve(&opts.base_ref).await?;
            repo.ensure_state_dir()
                .map_err(|source| EngineError::Record {
                    path: repo.state_dir(),
                    source,
                })?;
            (repo.root().to_path_buf(), base)
        } else {
            if !opts.repo.is_dir() {
                return Err(EngineError::NotFound(format!(
                    "{} is not a directory",
                    opts.repo.display()
                )));
            }
            (opts.repo.clone(), String::new())
        };
        let runs_dir = self.runs_dir(&workdir_root, opts.runs_dir.as_deref());
        let batch_id = opts
            .batch_id
            .clone()
            .unwrap_or_else(crate::util::new_batch_id);
        let spec = BatchSpec {
            batch_id: batch_id.clone(),
            created_at: now_rfc3339(),
            repo: workdir_root.clone(),
            provider: default_provider.clone(),
            base_ref: base,
            tasks: tasks.clone(),
            max_parallel: opts
                .max_parallel
                .unwrap_or(self.config.engine.max_parallel)
                .max(1),
            budget_usd: opts.budget_usd,
            timeout_secs: opts.timeout.map(|d| d.as_secs()),
            idle_timeout_secs: opts.idle_timeout.map(|d| d.as_secs()),
            worktrees: opts.worktrees,
            aicli_version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let store = RunStore::new(&runs_dir);
        let record = store
            .create_batch(&spec)
            .map_err(|source| EngineError::Record {
                path: runs_dir.join(&batch_id),
                source,
            })?;
        let records: Vec<TaskRecord> = tasks
            .iter()
            .map(|t| {
                TaskRecord::queued(
                    t.clone(),
                    t.provider.as_deref().unwrap_or(&default_provider),
                )
            })
            .collect();
        for r in &records {
            record
                .write_task(r, false)
                .map_err(|source| EngineError::Record {
                    path: record.task_dir(&r.task.id),
                    source,
                })?;
        }
        let plan: Vec<Planned> = records
            .into_iter()
            .map(|rec| Planned::run(&store, rec))
            .collect();
        self.execute(spec, record, plan, opts, live, cancel).await
    }

    /// The run records under `repo` (or `explicit`).
    pub fn store(&self, repo: &Path, explicit: Option<&Path>) -> RunStore {
        RunStore::new(self.runs_dir(repo, explicit))
    }

    /// Every blocked task in `store`, oldest question first.
    pub fn blocked(&self, store: &RunStore) -> Vec<BlockedTask> {
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

    /// Answers a blocked task and continues it: the same CLI session resumed with a
    /// prompt carrying the question and the answer (or, for a provider that cannot
    /// resume, a new run carrying the task, the question and the answer), in the same
    /// worktree, with a fresh MCP token. `task_ref` is `TASK` or `BATCH/TASK`.
    pub async fn answer(
        &self,
        store: &RunStore,
        task_ref: &str,
        answer: &str,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<SessionResult, EngineError> {
        let (record, task_id) = find_blocked(store, task_ref)?;
        // Held from the state check on: a second answer (or a resume) of the same task
        // in another process is refused instead of resuming the session twice.
        let lock = record
            .lock_task_within(&task_id, Duration::from_secs(5))
            .await
            .map_err(EngineError::Refused)?;
        let rec = record.task(&task_id).map_err(EngineError::NotFound)?;
        if rec.state != TaskState::Blocked {
            return Err(EngineError::Refused(format!(
                "task {}/{task_id} is not blocked (it is {}); only a blocked task can be answered",
                record.batch_id(),
                serde_json::to_value(rec.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            )));
        }
        let last = rec.latest_result().cloned().ok_or_else(|| {
            EngineError::Refused(format!("task {task_ref} is blocked but has no result"))
        })?;
        let question = last.question.clone().ok_or_else(|| {
            EngineError::Refused(format!("task {task_ref} is blocked but has no question"))
        })?;
        let provider = self.registry.get(&rec.provider)?;
        let spec = record.spec().map_err(EngineError::NotFound)?;
        if let Some(budget) = spec.budget_usd {
            let spent = record.charged_usd();
            if spent >= budget {
                return Err(EngineError::Refused(format!(
                    "batch {} has spent ${spent:.4} of its ${budget:.4} budget: the answer would start a new run",
                    record.batch_id()
                )));
            }
        }
        let (resume, prompt, continuation) = match (&last.session_id, provider.resumable(&last)) {
            (Some(sid), true) => (
                Some((sid.clone(), last.session_totals)),
                format!(
                    "You asked the user: {}\n\nThe user answered: {answer}\n\nContinue the task with this answer.",
                    question.question
                ),
                Continuation {
                    mode: ContinuationMode::Resume,
                    session_id: Some(sid.clone()),
                    reason: "answer to a question".to_owned(),
                },
            ),
            (sid, supports) => (
                None,
                format!(
                    "{}\n\n---\nWhile working on this task you asked the user: {}\nThe user answered: {answer}\n\nContinue the task with this answer.",
                    rec.task.prompt, question.question
                ),
                Continuation {
                    mode: ContinuationMode::NewRun,
                    session_id: None,
                    reason: if !supports {
                        format!(
                            "answer to a question; provider {} cannot resume a session, so a new run carries the task, the question and the answer",
                            provider.name()
                        )
                    } else if sid.is_none() {
                        "answer to a question; no session id was recorded, so a new run carries the task, the question and the answer".to_owned()
                    } else {
                        "answer to a question".to_owned()
                    },
                },
            ),
        };
        let plan = vec![Planned {
            rec,
            kind: AttemptKind::Answer,
            resume,
            prompt: Some(prompt),
            continuation: Some(continuation),
            origin: None,
            lock: Some(Arc::new(lock)),
            answer: Some(AnswerRecord {
                question: question.question.clone(),
                answer: answer.to_owned(),
                answered_at: now_rfc3339(),
            }),
            worktree_lock: None,
            recorded: None,
        }];
        let opts = self.options_for(&spec, store);
        let batch = self.execute(spec, record, plan, opts, live, cancel).await?;
        batch
            .tasks
            .into_iter()
            .find(|t| t.task_id == task_id)
            .ok_or_else(|| EngineError::NotFound(format!("task {task_id} vanished from its batch")))
    }

    /// Finishes a batch whose aicli process died (or was cancelled): tasks with a final
    /// result stay as they are; tasks found running are marked `interrupted` (their
    /// partial output parsed and kept) and run again — resuming the CLI session when one
    /// was recorded, else fresh in the same worktree; queued tasks run.
    pub async fn resume_batch(
        &self,
        store: &RunStore,
        batch_id: &str,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<BatchResult, EngineError> {
        let record = store.open_batch(batch_id).map_err(EngineError::NotFound)?;
        let spec = record.spec().map_err(EngineError::NotFound)?;
        let tasks = record.tasks().map_err(EngineError::NotFound)?;
        // Every unfinished task must be free: a task held by a live aicli (the batch is
        // still running, or being answered) is not interrupted, and is left alone.
        let mut locks = std::collections::BTreeMap::new();
        let mut busy = Vec::new();
        for rec in &tasks {
            if rec.state.is_final() {
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
                "batch {batch_id} is still running: {}",
                busy.join("; ")
            )));
        }
        // The batch's MCP upstreams the dead aicli had started.
        for f in pid_files(record.dir(), "pid.upstream-") {
            let killed = crate::proctree::kill_leftovers(&f).await;
            if !killed.is_empty() {
                tracing::warn!(pids = ?killed, "killed an MCP upstream left by an interrupted batch");
            }
        }
        let mut plan = Vec::new();
        for mut rec in tasks {
            let lock = locks.remove(&rec.task.id).map(Arc::new);
            match rec.state {
                TaskState::Succeeded | TaskState::Failed | TaskState::Blocked => continue,
                TaskState::Queued => plan.push(Planned {
                    lock,
                    ..Planned::run(store, rec)
                }),
                TaskState::Running | TaskState::Interrupted => {
                    self.kill_leftovers(&record, &rec.task.id).await;
                    let provider = self.registry.get(&rec.provider)?;
                    self.remove_containers(&record, &rec.task, &provider).await;
                    let partial = match self.settle_unfinished(&record, &mut rec, &provider) {
                        Found::Finished(result) => {
                            // The CLI had printed its last word: the run is over and was
                            // paid for. Close it from its stream; no new run.
                            record.write_task(&rec, true).map_err(|source| {
                                EngineError::Record {
                                    path: record.task_dir(&rec.task.id),
                                    source,
                                }
                            })?;
                            plan.push(Planned {
                                lock,
                                recorded: Some(result),
                                ..Planned::run(store, rec)
                            });
                            continue;
                        }
                        Found::Interrupted(partial) => partial,
                    };
                    let resumable = partial.as_ref().map_or_else(
                        || provider.supports(Feature::Resume),
                        |p| provider.resumable(p),
                    );
                    let (resume, prompt, continuation) = match (
                        partial.and_then(|p| p.session_id.map(|s| (s, p.session_totals))),
                        resumable,
                    ) {
                        (Some((sid, totals)), true) => (
                            Some((sid.clone(), totals)),
                            Some(format!(
                                "Your previous run was interrupted before it finished (the tool running you stopped). Continue the task where you left off. The task was:\n\n{}",
                                rec.task.prompt
                            )),
                            Continuation {
                                mode: ContinuationMode::Resume,
                                session_id: Some(sid),
                                reason: "recovery after aicli was interrupted".to_owned(),
                            },
                        ),
                        (_, supports) => (
                            None,
                            None,
                            Continuation {
                                mode: ContinuationMode::NewRun,
                                session_id: None,
                                reason: if supports {
                                    "recovery after aicli was interrupted; no session id had been recorded".to_owned()
                                } else {
                                    format!(
                                        "recovery after aicli was interrupted; provider {} cannot resume",
                                        provider.name()
                                    )
                                },
                            },
                        ),
                    };
                    record
                        .write_task(&rec, true)
                        .map_err(|source| EngineError::Record {
                            path: record.task_dir(&rec.task.id),
                            source,
                        })?;
                    plan.push(Planned {
                        rec,
                        kind: AttemptKind::Recover,
                        resume,
                        prompt,
                        continuation: Some(continuation),
                        origin: None,
                        lock,
                        answer: None,
                        worktree_lock: None,
                        recorded: None,
                    });
                }
            }
        }
        // An empty plan still rewrites the batch result from the records.
        let opts = self.options_for(&spec, store);
        self.execute(spec, record, plan, opts, live, cancel).await
    }

    /// Kills what is left of an interrupted run of task `task_id`: its CLI's process
    /// tree, as recorded in the task's `pid` file, and those of the MCP tool calls it
    /// had running (`pid.tool-*`).
    async fn kill_leftovers(&self, record: &BatchRecord, task_id: &str) {
        let dir = record.task_dir(task_id);
        let mut killed = crate::proctree::kill_leftovers(&dir.join("pid")).await;
        for f in pid_files(&dir, "pid.tool-") {
            killed.extend(crate::proctree::kill_leftovers(&f).await);
        }
        if !killed.is_empty() {
            tracing::warn!(task = %task_id, pids = ?killed, "killed processes left by an interrupted run");
        }
    }

    /// Removes the containers an interrupted run of `task` left (when it runs in
    /// containers), bringing a remote run's work back first.
    async fn remove_containers(
        &self,
        record: &BatchRecord,
        task: &TaskSpec,
        provider: &SharedProvider,
    ) {
        let kind = self.runner_kind(task, provider);
        if kind == RunnerKind::Local {
            return;
        }
        match self.runner(kind).await {
            Ok(r) => {
                for line in r.remove_leftovers(&record.batch_id(), &task.id).await {
                    tracing::warn!(task = %task.id, "{line}");
                }
            }
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "cannot look for the containers of the interrupted run")
            }
        }
    }

    /// Settles the unfinished attempt of `rec` from what it recorded. When its stream
    /// holds the CLI's final event, the run had finished (and was paid for) before aicli
    /// stopped: its result is built from the stream, with a question it asked through the
    /// MCP server, as at a normal end. Otherwise the attempt is marked interrupted,
    /// keeping what its partial output says (session id, usage, cost so far).
    fn settle_unfinished(
        &self,
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
            read_range(&dir.join("events.ndjson"), attempt.events_start, None).unwrap_or_default();
        let stderr =
            read_range(&dir.join("stderr.log"), attempt.stderr_start, None).unwrap_or_default();
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
            aicli_providers::ExitStatus::Unknown,
            |e| saw_final |= matches!(e.kind, EventKind::Final { .. }),
        )
        .unwrap_or_else(|e| {
            SessionResult::not_started(provider.name(), ErrorKind::Unknown, e.to_string())
        });
        result.task_id = rec.task.id.clone();
        result.prompt = rec.task.prompt.clone();
        attempt.finished_at = Some(now_rfc3339());
        attempt.events_end = Some(attempt.events_start + stdout.len() as u64);
        attempt.stderr_end = Some(attempt.stderr_start + stderr.len() as u64);
        // (A final "slow down" error is not an end: the pool would have retried it.)
        let retryable = result.error_kind.is_some_and(|k| k.is_backoff());
        if saw_final && !retryable {
            if let Some(q) =
                questions_since(&dir.join("aicli-events.ndjson"), attempt.aicli_events_start).pop()
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

    fn options_for(&self, spec: &BatchSpec, store: &RunStore) -> BatchOptions {
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
        o
    }

    /// Runs `plan` (tasks with their records) of batch `spec` to the batch result.
    pub(crate) async fn execute(
        &self,
        spec: BatchSpec,
        record: BatchRecord,
        plan: Vec<Planned>,
        opts: BatchOptions,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<BatchResult, EngineError> {
        let started = Instant::now();
        let repo = if spec.worktrees {
            Some(Repo::open(&spec.repo).await?)
        } else {
            None
        };
        let charged_before = record.charged_usd();
        // Only this process runs these tasks until each is settled.
        let mut plan = plan;
        let mut busy = Vec::new();
        for p in plan.iter_mut().filter(|p| p.lock.is_none()) {
            match record.lock_task(&p.rec.task.id) {
                Ok(l) => p.lock = Some(Arc::new(l)),
                Err(e) => busy.push(e),
            }
        }
        if !busy.is_empty() {
            return Err(EngineError::Refused(busy.join("; ")));
        }
        // Tasks whose last run had already finished are closed from their records; the
        // pool runs the others (its indices map to `to_run`).
        let (closed, to_run): (Vec<(usize, SessionResult)>, Vec<usize>) = {
            let mut closed = Vec::new();
            let mut to_run = Vec::new();
            for (i, p) in plan.iter().enumerate() {
                match &p.recorded {
                    Some(r) => closed.push((i, r.clone())),
                    None => to_run.push(i),
                }
            }
            (closed, to_run)
        };
        // A task without a limit of its own asks for an equal share of what is left, so
        // that the runs in flight together fit in it.
        let share = spec.budget_usd.map_or(f64::INFINITY, |b| {
            let at_once = spec.max_parallel.clamp(1, to_run.len().max(1));
            (b - charged_before).max(0.0) / at_once as f64
        });
        let shared = Arc::new(Shared {
            engine: self.clone(),
            spec: spec.clone(),
            record: record.clone(),
            repo,
            opts: opts.clone(),
            live: live.clone(),
            persist_locks: (0..plan.len())
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            budget: spec
                .budget_usd
                .map(|b| crate::budget::BudgetPool::new(b, charged_before)),
            share,
            budget_announced: std::sync::atomic::AtomicBool::new(false),
            tasks: Mutex::new(plan),
        });
        let mut owner = Owner {
            shared: shared.clone(),
            finalizers: tokio::task::JoinSet::new(),
            indices: to_run.clone(),
        };
        for (index, result) in closed {
            let s = shared.clone();
            owner
                .finalizers
                .spawn(async move { s.finalize(index, result).await });
        }
        let s2 = shared.clone();
        let n = to_run.len();
        if shared.budget.as_ref().is_some_and(|b| b.is_spent()) {
            // Nothing new starts once the budget is spent (a resume, an answer).
            for i in 0..n {
                owner.on_never_started(i, Control::StopStarting);
            }
        } else {
            let map = Arc::new(to_run);
            pool::run(
                n,
                spec.max_parallel,
                &self.config.engine.retry,
                move |i, attempt, cancel| {
                    let s = s2.clone();
                    let index = map[i];
                    async move { s.run_attempt(index, attempt, cancel).await }
                },
                &mut owner,
                cancel,
            )
            .await;
        }
        owner.wait_finalizers().await;
        if let Some(s) = &self.agent_server {
            s.end_batch(&spec.batch_id).await;
        }
        let result = shared.batch_result(started.elapsed());
        record
            .write_result(&result)
            .map_err(|source| EngineError::Record {
                path: record.dir().to_path_buf(),
                source,
            })?;
        Ok(result)
    }
}

/// The files in `dir` whose names start with `prefix`.
fn pid_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
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

/// The questions aicli's MCP server recorded in `aicli-events.ndjson` from byte
/// `start` on (one attempt's), oldest first.
fn questions_since(path: &Path, start: u64) -> Vec<PendingQuestion> {
    let bytes = read_range(path, start, None).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<AgentEvent>(l).ok())
        .filter_map(|e| {
            let aicli_providers::EventKind::Question { question, options } = e.kind else {
                return None;
            };
            Some(PendingQuestion {
                question,
                options,
                asked_at: now_rfc3339(),
            })
        })
        .collect()
}

/// A blocked task, for `aicli blocked`.
#[derive(Debug, Clone, serde::Serialize)]
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

/// A task as the pool will run it.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    /// Its record.
    pub rec: TaskRecord,
    /// What the first attempt of this invocation is.
    pub kind: AttemptKind,
    /// Resume this CLI session.
    pub resume: Option<(String, Option<SessionTotals>)>,
    /// Use this prompt instead of the task's (answers carry the question and answer).
    pub prompt: Option<String>,
    /// How the first attempt continues an earlier run, if it does.
    pub continuation: Option<Continuation>,
    /// For a task that resumes a CLI session (`resume_session_id`): that session's last
    /// run, found in the run records. The task runs where the session ran (its worktree,
    /// or a new one at the same path) and its per-run figures subtract the session's
    /// totals at the end of that run.
    pub origin: Option<SessionRun>,
    /// This invocation's hold on the task's record (taken before it runs).
    pub lock: Option<Arc<TaskLock>>,
    /// A human's answer, recorded when the first attempt starts (an answer that never
    /// ran leaves the task blocked, with its question).
    pub answer: Option<AnswerRecord>,
    /// This invocation's hold on the task's worktree (`aicli worktrees prune` skips it).
    pub worktree_lock: Option<Arc<crate::worktree::WorktreeLock>>,
    /// The task's last attempt had finished before aicli stopped (its stream holds the
    /// CLI's final event): this is its result, and the task is closed with it, as at the
    /// end of a run, without running anything.
    pub recorded: Option<SessionResult>,
}

impl Planned {
    /// A first run of `rec`. When its task resumes a CLI session that an earlier run in
    /// `store` reported, that run is its origin: the session's totals become the parse
    /// context's prior (Claude's cost and Codex's usage are cumulative over a session),
    /// and the task runs in that run's directory (Gemini finds a session only from the
    /// directory it ran in; the history of every CLI names its files by path).
    fn run(store: &RunStore, rec: TaskRecord) -> Planned {
        let origin = rec
            .task
            .resume_session_id
            .as_deref()
            .and_then(|sid| store.last_run_of_session(&rec.provider, sid));
        let (resume, continuation) = match (&origin, &rec.task.resume_session_id) {
            (Some(o), Some(sid)) => (
                Some((sid.clone(), o.result.session_totals)),
                Some(Continuation {
                    mode: ContinuationMode::Resume,
                    session_id: Some(sid.clone()),
                    reason: format!(
                        "the task resumes session {sid}, last run by task {}/{}",
                        o.batch_id, o.task.task.id
                    ),
                }),
            ),
            _ => (None, None),
        };
        Planned {
            rec,
            kind: AttemptKind::Run,
            resume,
            prompt: None,
            continuation,
            origin,
            lock: None,
            answer: None,
            worktree_lock: None,
            recorded: None,
        }
    }
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

fn assign_ids(tasks: &mut [TaskSpec]) -> Result<(), EngineError> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, t) in tasks.iter_mut().enumerate() {
        if t.id.is_empty() {
            t.id = format!("task-{}", i + 1);
        }
        if let Err(message) = t.validate() {
            return Err(EngineError::InvalidTask {
                index: i + 1,
                id: t.id.clone(),
                message,
            });
        }
        if !seen.insert(t.id.clone()) {
            return Err(EngineError::InvalidTask {
                index: i + 1,
                id: t.id.clone(),
                message: "id: another task has the same id".to_owned(),
            });
        }
    }
    Ok(())
}

struct Shared {
    engine: Engine,
    spec: BatchSpec,
    record: BatchRecord,
    repo: Option<Repo>,
    opts: BatchOptions,
    live: LiveSender,
    tasks: Mutex<Vec<Planned>>,
    /// One lock per task: record writes of a task happen one at a time, each writing the
    /// task's state as it is when the write starts, so the last write is the newest.
    persist_locks: Vec<tokio::sync::Mutex<()>>,
    /// The batch budget, when the batch has one: runs reserve their share of it before
    /// they start and report what they stream (see [`crate::budget`]).
    budget: Option<Arc<crate::budget::BudgetPool>>,
    /// What a task without a limit of its own reserves, USD.
    share: f64,
    /// `BudgetSpent` was sent.
    budget_announced: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn provider(&self, rec: &TaskRecord) -> Result<SharedProvider, aicli_providers::ConfigError> {
        self.engine.registry.get(&rec.provider)
    }

    fn planned(&self, index: usize) -> Option<Planned> {
        self.tasks.lock().ok().and_then(|t| t.get(index).cloned())
    }

    /// Changes the task's in-memory state.
    fn update(&self, index: usize, f: impl FnOnce(&mut Planned)) {
        if let Ok(mut t) = self.tasks.lock()
            && let Some(slot) = t.get_mut(index)
        {
            f(slot);
        }
    }

    /// Writes the task's record as it is now (off the async workers).
    async fn persist(&self, index: usize, durable: bool) {
        let Some(lock) = self.persist_locks.get(index) else {
            return;
        };
        let _guard = lock.lock().await;
        let Some(planned) = self.planned(index) else {
            return;
        };
        let record = self.record.clone();
        let id = planned.rec.task.id.clone();
        let res =
            tokio::task::spawn_blocking(move || record.write_task(&planned.rec, durable)).await;
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(task = %id, error = %e, "cannot write the task record"),
            Err(e) => tracing::warn!(task = %id, error = %e, "the record writer failed"),
        }
    }

    /// The task's working directory: its worktree, made on its first attempt. A task that
    /// resumes a session gets the directory that session ran in: the same worktree while
    /// it is kept (its branch and work included), else a new worktree at the same path.
    async fn ensure_worktree(
        &self,
        rec: &mut TaskRecord,
        origin: Option<&SessionRun>,
    ) -> Result<PathBuf, String> {
        let Some(repo) = &self.repo else {
            return Ok(self.spec.repo.clone());
        };
        if let (Some(path), Some(_)) = (&rec.worktree, &rec.branch)
            && path.is_dir()
        {
            return Ok(path.clone());
        }
        // Where a task's worktree goes: <repo>/.aicli/worktrees/<batch>/<task>.
        let place =
            |batch: &str, task: &str| repo.state_dir().join("worktrees").join(batch).join(task);
        let mut path = place(&self.spec.batch_id, &rec.task.id);
        if let Some(o) = origin.filter(|o| o.worktrees) {
            let theirs = o
                .task
                .worktree
                .clone()
                .unwrap_or_else(|| place(&o.batch_id, &o.task.task.id));
            match (&o.task.worktree, &o.task.branch, &o.task.base_commit) {
                (Some(kept), Some(branch), Some(base)) if kept.is_dir() => {
                    rec.branch = Some(branch.clone());
                    rec.worktree = Some(kept.clone());
                    rec.base_commit = Some(base.clone());
                    return Ok(kept.clone());
                }
                _ if !theirs.exists() => path = theirs,
                _ => tracing::warn!(
                    task = %rec.task.id,
                    path = %theirs.display(),
                    "the resumed session's directory is in use by something aicli did not record; the task runs in a new worktree"
                ),
            }
        }
        let branch = format!(
            "{}{}/{}",
            crate::worktree::BRANCH_PREFIX,
            self.spec.batch_id,
            rec.task.id
        );
        let wt = repo
            .add_worktree(&branch, &path, &self.spec.base_ref)
            .await
            .map_err(|e| e.to_string())?;
        rec.branch = Some(wt.branch);
        rec.worktree = Some(wt.path.clone());
        rec.base_commit = Some(wt.base);
        Ok(wt.path)
    }

    fn never_ran(provider: &str, kind: ErrorKind, message: String) -> SessionOutcome {
        SessionOutcome {
            result: SessionResult::not_started(provider, kind, message),
            reset_at: None,
            argv: Vec::new(),
            streamed: aicli_providers::LiveSpend::default(),
            place: None,
        }
    }

    /// Records an attempt of task `index` that never started, with its result.
    fn record_not_started(&self, index: usize, result: &SessionResult) {
        let now = now_rfc3339();
        let offset = self.record.events_len(&result.task_id);
        let result = result.clone();
        self.update(index, |p| {
            p.rec.attempts.push(AttemptRecord {
                attempt: p.rec.attempts.len() as u32 + 1,
                kind: p.kind,
                started_at: now.clone(),
                finished_at: Some(now),
                events_start: offset,
                events_end: Some(offset),
                stderr_start: 0,
                stderr_end: Some(0),
                aicli_events_start: 0,
                model: None,
                prior: None,
                resumed_session: None,
                argv: Vec::new(),
                place: None,
                result: Some(result),
                budget: None,
            });
        });
    }

    /// Waits as long as the provider needs between a session's last run and its
    /// continuation ([`aicli_providers::AiCliProvider::resume_not_before`]; gemini's
    /// `session/load` in a new minute), saying so on the live stream; a cancel ends the
    /// wait (the session then ends at once, cancelled).
    async fn pause_before_resume(
        &self,
        planned: &Planned,
        provider: &SharedProvider,
        task_id: &Arc<str>,
        cancel: &CancellationToken,
    ) {
        let Some((sid, _)) = &planned.resume else {
            return;
        };
        // The run being continued: this task's last attempt, else the origin's.
        let last = planned
            .rec
            .attempts
            .last()
            .and_then(|a| a.result.clone())
            .or_else(|| planned.origin.as_ref().map(|o| o.result.clone()));
        let Some(last) = last else { return };
        // The latest run in the session: the last attempt that ran in it (of this task,
        // else of the origin's); by its end every earlier run of the session had started
        // (gemini names a recording after the minute a run starts it, and a second
        // recording of the session in the same minute loses the first).
        let last_in = |attempts: &[AttemptRecord]| {
            attempts
                .iter()
                .rev()
                .find(|a| a.result.as_ref().and_then(|r| r.session_id.as_deref()) == Some(sid))
                .map(|a| a.finished_at.clone())
        };
        let last_used = last_in(&planned.rec.attempts)
            .or_else(|| {
                planned
                    .origin
                    .as_ref()
                    .and_then(|o| last_in(&o.task.attempts))
            })
            .flatten()
            .and_then(|t| humantime::parse_rfc3339_weak(&t).ok())
            .unwrap_or_else(std::time::SystemTime::now);
        let Some(until) = provider.resume_not_before(&last, last_used) else {
            return;
        };
        let Ok(wait) = until.duration_since(std::time::SystemTime::now()) else {
            return;
        };
        let message = format!(
            "waiting {:.0}s before continuing the session: {} must not load a session in a wall-clock minute it was last used in (providers.{}.acp.load_in_a_new_minute)",
            wait.as_secs_f64(),
            provider.name(),
            provider.name()
        );
        tracing::info!(task = %task_id, "{message}");
        self.live.send(BatchEvent::Agent {
            task_id: task_id.clone(),
            event: AgentEvent::synthetic(EventKind::Status { status: message }),
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => {}
        }
    }

    /// One attempt: worktree, record, token, session, record again.
    async fn run_attempt(
        &self,
        index: usize,
        attempt_in_run: u32,
        cancel: CancellationToken,
    ) -> SessionOutcome {
        let Some(mut planned) = self.planned(index) else {
            return Self::never_ran("", ErrorKind::Unknown, "no such task".into());
        };
        let provider = match self.provider(&planned.rec) {
            Ok(p) => p,
            Err(e) => {
                return Self::never_ran(
                    &planned.rec.provider,
                    ErrorKind::BadRequest,
                    e.to_string(),
                );
            }
        };
        // Its share of the batch budget first: it starts only when that fits in what is
        // left beside the runs in flight.
        let reservation = match &self.budget {
            None => None,
            Some(pool) => {
                let want = planned
                    .rec
                    .task
                    .max_budget_usd
                    .or(provider.config().max_budget_usd)
                    .unwrap_or(self.share);
                match pool.reserve(want, &cancel).await {
                    Ok(r) => Some(Arc::new(r)),
                    Err(refusal) => {
                        let mut r = match refusal {
                            crate::budget::Refusal::Spent { .. } => SessionResult::not_started(
                                provider.name(),
                                ErrorKind::Budget,
                                BUDGET_SPENT_BEFORE_START,
                            ),
                            crate::budget::Refusal::Cancelled => {
                                let mut r = SessionResult::not_started(
                                    provider.name(),
                                    ErrorKind::Cancelled,
                                    "the batch was cancelled while this task waited for its share of the budget",
                                );
                                // Not an outcome of the task: `aicli resume` runs it.
                                r.status = SessionStatus::Interrupted;
                                r
                            }
                        };
                        r.task_id = planned.rec.task.id.clone();
                        r.prompt = planned.rec.task.prompt.clone();
                        self.record_not_started(index, &r);
                        self.persist(index, true).await;
                        return SessionOutcome {
                            result: r,
                            reset_at: None,
                            argv: Vec::new(),
                            streamed: aicli_providers::LiveSpend::default(),
                            place: None,
                        };
                    }
                }
            }
        };
        let task_id: Arc<str> = Arc::from(planned.rec.task.id.as_str());
        let workdir = self
            .ensure_worktree(&mut planned.rec, planned.origin.as_ref())
            .await;
        if let (Ok(w), None, true) = (&workdir, &planned.worktree_lock, self.repo.is_some()) {
            planned.worktree_lock = crate::worktree::lock_worktree(w).await.map(Arc::new);
        }
        let mut task = planned.rec.task.clone();
        if let Some(p) = &planned.prompt {
            task.prompt = p.clone();
        }
        let mut prior = None;
        if let Some((sid, totals)) = &planned.resume {
            task.resume_session_id = Some(sid.clone());
            prior = *totals;
        }
        if planned.resume.is_some() {
            self.pause_before_resume(&planned, &provider, &task_id, &cancel)
                .await;
        }
        let attempt_no = planned.rec.attempts.len() as u32 + 1;
        let kind = if attempt_in_run > 1 {
            AttemptKind::Retry
        } else {
            planned.kind
        };
        planned.rec.attempts.push(AttemptRecord {
            attempt: attempt_no,
            kind,
            started_at: now_rfc3339(),
            finished_at: None,
            events_start: self.record.events_len(&task.id),
            events_end: None,
            stderr_start: self.record.stderr_len(&task.id),
            stderr_end: None,
            aicli_events_start: self.record.aicli_events_len(&task.id),
            model: provider.model_for(&task),
            prior,
            resumed_session: task.resume_session_id.clone(),
            argv: Vec::new(),
            place: None,
            result: None,
            budget: reservation.as_ref().map(|r| AttemptBudget {
                reserved_usd: r.amount(),
                charged_usd: None,
            }),
        });
        planned.rec.state = TaskState::Running;
        if attempt_in_run == 1
            && let Some(a) = planned.answer.take()
        {
            planned.rec.answers.push(a);
        }
        let (rec_snapshot, prompt_for_result) =
            (planned.rec.clone(), planned.rec.task.prompt.clone());
        let wt_lock = planned.worktree_lock.clone();
        self.update(index, |p| {
            p.rec = rec_snapshot;
            p.worktree_lock = wt_lock;
        });
        self.persist(index, false).await;
        self.live.send(BatchEvent::TaskStarted {
            task_id: task_id.clone(),
            provider: Arc::from(provider.name()),
            attempt: attempt_no,
        });

        let outcome = match workdir {
            Err(e) => Self::never_ran(
                provider.name(),
                ErrorKind::Unknown,
                format!("cannot create the worktree: {e}"),
            ),
            Ok(workdir) => {
                let branch = planned.rec.branch.clone();
                // The human's latest answer to this task: a decoder that asked the
                // question itself (an ACP permission request) answers it the same way.
                let answered = planned.rec.answers.last().map(|a| AnsweredQuestion {
                    question: a.question.clone(),
                    answer: a.answer.clone(),
                });
                self.session(
                    &task,
                    provider.clone(),
                    workdir,
                    branch,
                    (prior, answered),
                    attempt_no,
                    RunControl {
                        cancel,
                        budget: reservation.clone(),
                    },
                )
                .await
            }
        };

        // The attempt's end goes into the record now, from this task (not the pool loop).
        let mut result = outcome.result.clone();
        result.task_id = task.id.clone();
        result.prompt = prompt_for_result;
        if attempt_in_run == 1 {
            result.continuation = planned.continuation.clone();
        }
        if result.error_kind == Some(ErrorKind::Cancelled) {
            // Cancelled by the user (Ctrl-C): not an outcome of the task; `aicli resume`
            // runs it again (resuming its session when it has one). (A run the budget
            // stopped says `budget`.)
            result.status = SessionStatus::Interrupted;
        }
        // What the budget counts for the run: its cost (for a run cut off, at least its
        // streamed estimate), or, when that is unknown, its whole reservation (or what
        // it streamed, if more). The rest of the reservation goes back to the pool.
        let charge = reservation.as_ref().map(|r| {
            let charge = result
                .cost_usd
                .unwrap_or_else(|| r.amount().max(outcome.streamed.priced_usd()));
            r.settle(charge);
            AttemptBudget {
                reserved_usd: r.amount(),
                charged_usd: Some(charge),
            }
        });
        let events_end = self.record.events_len(&task.id);
        let stderr_end = self.record.stderr_len(&task.id);
        let provisional = if result.error_kind.is_some_and(|k| k.is_backoff()) {
            TaskState::Queued
        } else {
            TaskState::of(&result)
        };
        self.update(index, |p| {
            if let Some(a) = p.rec.attempts.last_mut() {
                a.finished_at = Some(now_rfc3339());
                a.events_end = Some(events_end);
                a.stderr_end = Some(stderr_end);
                a.result = Some(result.clone());
                a.argv = outcome.argv.clone();
                a.budget = charge;
                a.place = outcome.place.clone();
            }
            p.rec.state = provisional;
            // Later attempts of this invocation are plain retries of the same run.
            p.kind = AttemptKind::Retry;
        });
        self.persist(index, true).await;
        SessionOutcome {
            result,
            reset_at: outcome.reset_at,
            argv: outcome.argv,
            streamed: outcome.streamed,
            place: outcome.place,
        }
    }

    /// The directory of task `task_id` kept across its attempts (a container run's
    /// home: the CLI's sessions and login copies).
    fn task_home(&self, task_id: &str) -> PathBuf {
        self.record
            .dir()
            .join("private")
            .join(format!("{task_id}-home"))
    }

    #[allow(clippy::too_many_arguments)]
    async fn session(
        &self,
        task: &TaskSpec,
        provider: SharedProvider,
        workspace: PathBuf,
        branch: Option<String>,
        (prior, answered): (Option<SessionTotals>, Option<AnsweredQuestion>),
        attempt_no: u32,
        control: RunControl,
    ) -> SessionOutcome {
        let RunControl { cancel, budget } = control;
        let workdir = match &task.cwd {
            Some(sub) => workspace.join(sub),
            None => workspace.clone(),
        };
        let private_dir = self
            .record
            .dir()
            .join("private")
            .join(format!("{}-{attempt_no}", task.id));
        let task_home = self.task_home(&task.id);
        let base_env = crate::env::cli_env(
            &self.engine.source_env,
            &self.engine.config.engine.env_passthrough,
            provider.config(),
            Some(task),
        );
        let kind = self.engine.runner_kind(task, &provider);
        if provider.two_way() && kind != RunnerKind::Local {
            return Self::never_ran(
                provider.name(),
                ErrorKind::BadRequest,
                format!(
                    "provider {} speaks to its agent on stdin (ACP), which the {kind} runner cannot keep open: run it with the local runner (`--runner local`, or the provider's `runner`)",
                    provider.name()
                ),
            );
        }
        let runner = match self.engine.runner(kind).await {
            Ok(r) => r,
            Err(e) => {
                return Self::never_ran(
                    provider.name(),
                    ErrorKind::Crashed,
                    format!("the {kind} runner is not available: {e}"),
                );
            }
        };
        let request = PlaceRequest {
            batch_id: &self.spec.batch_id,
            task_id: &task.id,
            attempt: attempt_no,
            provider: &provider,
            workspace: &workspace,
            workdir: &workdir,
            private_dir: &private_dir,
            task_home: &task_home,
            branch: branch.as_deref(),
            inherited_env: &base_env,
        };
        let placed = tokio::select! {
            p = runner.place(&request) => p,
            _ = cancel.cancelled() => {
                return Self::never_ran(provider.name(), ErrorKind::Cancelled, "the run was cancelled before it started".into());
            }
        };
        let mut placement: Box<dyn Placement> = match placed {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&private_dir);
                return Self::never_ran(provider.name(), e.kind(), e.to_string());
            }
        };
        let mut skills = self.engine.config.engine.skills.clone();
        skills.extend(task.skills.iter().cloned());
        let mut tools = self.engine.config.engine.mcp_tools.clone();
        tools.extend(task.mcp_tools.iter().cloned());
        let grant = match &self.engine.agent_server {
            Some(s) => {
                let scope = TaskScope {
                    batch_id: self.spec.batch_id.clone(),
                    task_id: task.id.clone(),
                    workspace: workspace.clone(),
                    skills,
                    credentials: task.credentials.clone(),
                    tools,
                    record_dir: Some(self.record.task_dir(&task.id)),
                    attempt: attempt_no,
                };
                match s.grant(scope, placement.agent_reach()).await {
                    Ok(g) => Some(g),
                    Err(e) => {
                        let _ = placement.finish().await;
                        let _ = std::fs::remove_dir_all(&private_dir);
                        return Self::never_ran(
                            provider.name(),
                            ErrorKind::Crashed,
                            format!(
                                "aicli's MCP server cannot be reached from {}: {e}",
                                placement.describe()
                            ),
                        );
                    }
                }
            }
            None => None,
        };
        let (mcp, injected, token) = match grant {
            Some(g) => {
                let token = g.endpoint.token.clone();
                (Some((g.endpoint, g.port)), Some(g.events), Some(token))
            }
            None => (None, None, None),
        };
        let restrict_token = match (
            &self.engine.agent_server,
            &token,
            placement.agent_reach().map(|r| r.restrict_to_peer),
        ) {
            (Some(server), Some(t), Some(true)) => {
                let server = server.clone();
                let t = t.clone();
                Some(crate::session::TokenRestriction(Arc::new(
                    move |ip: std::net::IpAddr| server.restrict(&t, ip),
                )))
            }
            _ => None,
        };
        let spec = SessionSpec {
            limits: self.engine.limits(&self.opts, task),
            parse_ctx: ParseContext {
                model: provider.model_for(task),
                prior,
                answered,
            },
            task: task.clone(),
            provider,
            workdir,
            private_dir: private_dir.clone(),
            record_dir: Some(self.record.task_dir(&task.id)),
            mcp,
            budget_remaining_usd: budget.as_ref().map(|r| r.amount()),
            search_path: self.engine.search_path.clone(),
            base_env,
            auth_precheck: self.engine.auth_precheck,
            restrict_token,
        };
        let io = SessionIo {
            live: self.live.clone(),
            injected,
            cancel,
            budget,
        };
        let mut outcome = run_session(spec, io, placement.as_mut()).await;
        outcome.place = Some(placement.describe());
        // However the run ended: its work comes back (a remote engine), its place is
        // released, its container removed.
        if let Err(e) = placement.finish().await {
            tracing::warn!(task = %task.id, error = %e, "the run's work was not brought back");
            outcome.result.fail(ErrorKind::Crashed, e.to_string());
        }
        drop(placement);
        if let (Some(s), Some(t)) = (&self.engine.agent_server, &token) {
            s.revoke(t);
        }
        let _ = std::fs::remove_dir_all(&private_dir);
        outcome
    }

    /// After the last attempt of a task in this invocation: clean up its worktree (or
    /// keep it), settle its record, tell subscribers.
    async fn finalize(&self, index: usize, mut result: SessionResult) {
        let Some(planned) = self.planned(index) else {
            return;
        };
        let rec = &planned.rec;
        let mut drop_worktree = false;
        if let (Some(repo), Some(path), Some(branch), Some(base)) = (
            &self.repo,
            rec.worktree.clone(),
            rec.branch.clone(),
            rec.base_commit.clone(),
        ) {
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
                Ok(Cleanup::Removed) => drop_worktree = true,
                Ok(Cleanup::Kept { reason }) => {
                    tracing::info!(task = %result.task_id, %reason, "worktree kept");
                    result.branch = Some(branch);
                    result.worktree = Some(path);
                }
                Err(e) => {
                    tracing::warn!(task = %result.task_id, error = %e, "worktree cleanup failed; kept");
                    result.branch = Some(branch);
                    result.worktree = Some(path);
                }
            }
        }
        let state = TaskState::of(&result);
        if matches!(state, TaskState::Succeeded | TaskState::Failed) {
            // Nothing will resume this task's CLI session: its home (login copies) goes.
            let _ = std::fs::remove_dir_all(self.task_home(&result.task_id));
        }
        let final_result = result.clone();
        self.update(index, |p| {
            if drop_worktree {
                p.rec.worktree = None;
                p.rec.branch = None;
            }
            if let Some(a) = p.rec.attempts.last_mut() {
                a.result = Some(final_result);
            }
            p.rec.state = state;
        });
        self.persist(index, true).await;
        // Settled: another process may now answer or resume it, or prune its worktree.
        self.update(index, |p| {
            p.lock = None;
            p.worktree_lock = None;
        });
        let task_id: Arc<str> = Arc::from(result.task_id.as_str());
        if let (SessionStatus::Blocked, Some(q)) = (result.status, &result.question) {
            self.live.send(BatchEvent::TaskBlocked {
                task_id: task_id.clone(),
                question: q.clone(),
            });
            self.notify_blocked(&result, q).await;
        }
        self.live.send(BatchEvent::TaskFinished {
            task_id,
            result: Arc::new(result),
        });
    }

    /// Runs the config's notify hook with the question as JSON on stdin.
    async fn notify_blocked(&self, result: &SessionResult, q: &PendingQuestion) {
        let hook = &self.engine.config.engine.notify_hook;
        let Some((program, args)) = hook.split_first() else {
            return;
        };
        let payload = serde_json::json!({
            "event": "blocked",
            "batch_id": self.spec.batch_id,
            "task_id": result.task_id,
            "provider": result.provider,
            "session_id": result.session_id,
            "question": q.question,
            "options": q.options,
            "asked_at": q.asked_at,
            "answer_with": format!("aicli answer {}/{} \"...\"", self.spec.batch_id, result.task_id),
        });
        let mut cmd = aicli_providers::CommandSpec::new(
            &aicli_providers::BinaryLocation::Path(PathBuf::from(program)),
            &self.spec.repo,
        );
        cmd.args(args.iter().cloned());
        cmd.stdin = Some(payload.to_string());
        match crate::process::run_capture(&cmd, Duration::from_secs(30)).await {
            Ok(c) if c.exit_code == Some(0) => {}
            Ok(c) => tracing::warn!(
                hook = %program,
                exit = ?c.exit_code,
                timed_out = c.timed_out,
                stderr = %c.stderr.trim(),
                "the notify hook failed"
            ),
            Err(e) => tracing::warn!(hook = %program, error = %e, "cannot run the notify hook"),
        }
    }

    fn batch_result(&self, wall: Duration) -> BatchResult {
        // From the records on disk: every write of this invocation is done by now, and a
        // task settled here may since have been answered by another process.
        let all = self.record.tasks().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the task records; using memory");
            self.tasks
                .lock()
                .map(|t| t.iter().map(|p| p.rec.clone()).collect())
                .unwrap_or_default()
        });
        let mut results = Vec::new();
        let mut total = 0.0;
        let mut estimated = 0.0;
        let mut charged = 0.0;
        let mut unknown = 0;
        for mut rec in all {
            let (spent, unk) = rec.spent();
            total += spent;
            estimated += rec.estimated();
            charged += rec.charged();
            if unk {
                unknown += 1;
            }
            // Moved out of the record, not copied: a batch holds one copy of each answer.
            let latest = rec.attempts.iter_mut().rev().find_map(|a| a.result.take());
            let mut r = latest.unwrap_or_else(|| {
                SessionResult::not_started(&rec.provider, ErrorKind::Cancelled, "never started")
            });
            r.task_id = rec.task.id;
            r.prompt = rec.task.prompt;
            results.push(r);
        }
        let count = |s: SessionStatus| results.iter().filter(|r| r.status == s).count();
        BatchResult {
            batch_id: self.spec.batch_id.clone(),
            provider: self.spec.provider.clone(),
            timestamp: self.spec.created_at.clone(),
            n_tasks: results.len(),
            n_succeeded: count(SessionStatus::Succeeded),
            n_failed: count(SessionStatus::Failed) + count(SessionStatus::Interrupted),
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
        }
    }
}

/// The pool's owner: quick decisions in the pool loop; slow work (git, records) in
/// tasks of its own, awaited before the batch result is built.
struct Owner {
    shared: Arc<Shared>,
    finalizers: tokio::task::JoinSet<()>,
    /// The pool's task `i` is the batch's task `indices[i]`.
    indices: Vec<usize>,
}

impl Owner {
    async fn wait_finalizers(&mut self) {
        while let Some(r) = self.finalizers.join_next().await {
            if let Err(e) = r {
                tracing::error!(error = %e, "finalizing a task failed");
            }
        }
    }
}

#[async_trait]
impl PoolOwner for Owner {
    async fn on_attempt_end(
        &mut self,
        i: usize,
        _attempt: u32,
        outcome: &SessionOutcome,
        will_retry: bool,
    ) -> Control {
        let index = self.indices[i];
        let s = self.shared.clone();
        let result = outcome.result.clone();
        if will_retry {
            let totals = result.session_totals;
            s.update(index, |p| {
                p.rec.state = TaskState::Queued;
                // A retry that resumes a session starts from what the failed attempt
                // left: its per-run figures must not count that attempt's usage again.
                if let (Some((_, prior)), Some(t)) = (p.resume.as_mut(), totals) {
                    *prior = Some(t);
                }
            });
        } else {
            let s2 = s.clone();
            self.finalizers
                .spawn(async move { s2.finalize(index, result).await });
        }
        match &s.budget {
            // Settled runs were charged the whole budget: nothing new starts (the runs
            // in flight were stopped when the spend reached it).
            Some(pool) if pool.is_spent() => {
                if !s
                    .budget_announced
                    .swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    s.live.send(BatchEvent::BudgetSpent {
                        spent_usd: pool.figures().charged,
                        budget_usd: pool.budget(),
                    });
                }
                Control::StopStarting
            }
            Some(_) | None => Control::Continue,
        }
    }

    fn on_backoff(&mut self, b: &Backoff) {
        let task_id = self
            .shared
            .planned(self.indices[b.index])
            .map(|p| p.rec.task.id)
            .unwrap_or_default();
        tracing::info!(task = %task_id, delay_ms = b.delay.as_millis() as u64, parallelism = b.parallelism, reason = %b.reason, "backing off");
        self.shared.live.send(BatchEvent::Backoff {
            task_id: Arc::from(task_id.as_str()),
            attempt: b.attempt,
            delay_ms: b.delay.as_millis() as u64,
            parallelism: b.parallelism,
            reason: b.reason.clone(),
        });
    }

    fn on_never_started(&mut self, i: usize, _why: Control) {
        let index = self.indices[i];
        let s = self.shared.clone();
        if !s.budget.as_ref().is_some_and(|b| b.is_spent()) {
            // Cancelled: the task stays queued in its record, so a resume runs it.
            return;
        }
        let Some(planned) = s.planned(index) else {
            return;
        };
        let mut r = SessionResult::not_started(
            &planned.rec.provider,
            ErrorKind::Budget,
            BUDGET_SPENT_BEFORE_START,
        );
        r.task_id = planned.rec.task.id.clone();
        r.prompt = planned.rec.task.prompt.clone();
        s.record_not_started(index, &r);
        self.finalizers
            .spawn(async move { s.finalize(index, r).await });
    }
}

/// What stops a run: the batch's cancellation and the run's share of the budget.
struct RunControl {
    cancel: CancellationToken,
    budget: Option<Arc<crate::budget::Reservation>>,
}

/// Why a task never started once the budget was spent.
const BUDGET_SPENT_BEFORE_START: &str = "the batch budget was spent before this task started";

/// `run_batch(provider, tasks, options)`: runs `tasks` with `provider` as the default
/// provider, without a live subscriber.
pub async fn run_batch(
    engine: &Engine,
    provider: &str,
    tasks: Vec<TaskSpec>,
    mut options: BatchOptions,
) -> Result<BatchResult, EngineError> {
    options.provider = Some(provider.to_owned());
    let tx = LiveSender::new(crate::live::DEFAULT_QUEUE_BYTES);
    engine
        .run_batch(tasks, options, tx, CancellationToken::new())
        .await
}
