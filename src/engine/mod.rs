//! The engine's face: [`Engine`] (config, providers, runners, the agent server) and its
//! entry points — [`Engine::run_batch`], [`Engine::answer`], [`Engine::resume_batch`],
//! [`Engine::blocked`]. Each checks what it was given once, here, for every front (the
//! command, the web view, a library), and hands the work to [`crate::batch`].
//!
//! | module | owns |
//! |---|---|
//! | `options` | [`BatchOptions`] and their check |
//! | `error` | [`EngineError`] |
//! | `agent` | [`AgentServer`], the boundary the MCP server implements |

mod agent;
mod error;
mod options;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::{
    AiCliConfig, ProviderRegistry, RunnerKind, SessionResult, SharedProvider, TaskSpec,
};
use tokio_util::sync::CancellationToken;

pub use agent::{AgentGrant, AgentServer, TaskScope};
pub use error::EngineError;
pub(crate) use error::record_error;
pub use options::BatchOptions;

use crate::live::LiveSender;
use crate::record::{BatchResult, RunStore};
use crate::run::RunLimits;
use crate::runner::{LocalRunner, Runner};

/// The runners an engine starts CLIs with: local processes, and containers (connected to
/// their engines on first use).
#[derive(Debug, Clone)]
struct Runners {
    local: Arc<dyn Runner>,
    docker: Arc<tokio::sync::OnceCell<Result<Arc<dyn Runner>, String>>>,
    swarm: Arc<tokio::sync::OnceCell<Result<Arc<dyn Runner>, String>>>,
}

/// The engine: config, providers, runners, and optionally an agent server. Cheap to
/// clone (everything behind `Arc`s).
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) config: Arc<AiCliConfig>,
    pub(crate) registry: Arc<ProviderRegistry>,
    runners: Runners,
    pub(crate) agent_server: Option<Arc<dyn AgentServer>>,
    pub(crate) search_path: Option<String>,
    /// The environment a CLI's variables are taken from (aicli's own by default); a CLI
    /// gets only what [`crate::env::cli_env`] picks from it.
    pub(crate) source_env: BTreeMap<String, String>,
    /// aicli's own environment, where its own secrets are read (the notify webhook's
    /// token), whatever the CLIs' environment comes from (`--fake-api` replaces that).
    pub(crate) own_env: Arc<BTreeMap<String, String>>,
    pub(crate) auth_precheck: bool,
    /// A fault to inject, for the guard tests (`test-helpers` only).
    #[cfg(feature = "test-helpers")]
    #[cfg(feature = "test-helpers")]
    pub(crate) fault: Option<crate::testing::Fault>,
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
                swarm: Arc::new(tokio::sync::OnceCell::new()),
            },
            agent_server: None,
            search_path: None,
            source_env: crate::env::process_env(),
            own_env: Arc::new(crate::env::process_env()),
            auth_precheck,
            #[cfg(feature = "test-helpers")]
            #[cfg(feature = "test-helpers")]
            fault: None,
        }
    }

    /// Uses `runner` for the tasks that run on `kind` (instead of the built-in one).
    pub fn with_runner(mut self, kind: RunnerKind, runner: Arc<dyn Runner>) -> Engine {
        match kind {
            RunnerKind::Local => self.runners.local = runner,
            RunnerKind::Docker => {
                self.runners.docker = Arc::new(tokio::sync::OnceCell::new_with(Some(Ok(runner))))
            }
            RunnerKind::Swarm => {
                self.runners.swarm = Arc::new(tokio::sync::OnceCell::new_with(Some(Ok(runner))))
            }
        }
        self
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
    /// provider's own variables and the configured `env` (`env::cli_env`).
    /// Tests pass their own instead of changing the process environment.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Engine {
        self.source_env = env;
        self
    }

    /// aicli's own environment, where its own secrets are read (the process's by
    /// default): the variable `engine.notify.webhook_token_env` names. No CLI sees it.
    /// Tests pass their own instead of changing the process environment.
    pub fn with_own_env(mut self, env: BTreeMap<String, String>) -> Engine {
        self.own_env = Arc::new(env);
        self
    }

    /// Turns the quick pre-flight credentials check on or off.
    pub fn with_auth_precheck(mut self, on: bool) -> Engine {
        self.auth_precheck = on;
        self
    }

    /// Injects `fault` into runs (the guard tests).
    #[cfg(feature = "test-helpers")]
    #[cfg(feature = "test-helpers")]
    pub fn with_fault(mut self, fault: crate::testing::Fault) -> Engine {
        self.fault = Some(fault);
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

    /// Where a task runs: its own runner, else its provider's, else the config's.
    pub fn runner_kind(&self, task: &TaskSpec, provider: &SharedProvider) -> RunnerKind {
        task.runner
            .or(provider.config().runner)
            .unwrap_or(self.config.engine.runner)
    }

    /// The runner of `kind` (the Docker and swarm runners connect to their engines on
    /// first use).
    pub async fn runner(&self, kind: RunnerKind) -> Result<Arc<dyn Runner>, String> {
        use crate::runner::DockerRunner;
        let (cell, swarm) = match kind {
            RunnerKind::Local => return Ok(self.runners.local.clone()),
            RunnerKind::Docker => (&self.runners.docker, false),
            RunnerKind::Swarm => (&self.runners.swarm, true),
        };
        cell.get_or_init(|| async {
            let (docker, env) = (&self.config.engine.docker, &self.source_env);
            let connected = if swarm {
                DockerRunner::connect_swarm(docker, env).await
            } else {
                DockerRunner::connect(docker, env).await
            };
            connected
                .map(|r| Arc::new(r) as Arc<dyn Runner>)
                .map_err(|e| e.to_string())
        })
        .await
        .clone()
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

    /// The run-records directory for `repo` (or `explicit`).
    pub fn runs_dir(&self, repo: &Path, explicit: Option<&Path>) -> PathBuf {
        explicit
            .map(Path::to_path_buf)
            .or_else(|| self.config.engine.runs_dir.clone())
            .unwrap_or_else(|| repo.join(".aicli").join("runs"))
    }

    /// The run records under `repo` (or `explicit`).
    pub fn store(&self, repo: &Path, explicit: Option<&Path>) -> RunStore {
        RunStore::new(self.runs_dir(repo, explicit))
    }

    /// A run's limits: the task's own, else the batch's, else the config's.
    pub(crate) fn limits(&self, opts: &BatchOptions, task: &TaskSpec) -> RunLimits {
        let e = &self.config.engine;
        RunLimits {
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

    /// Runs `tasks` as a new batch; live events go to `live`. The options and every task
    /// are checked first: nothing is written or run when one is invalid.
    pub async fn run_batch(
        &self,
        tasks: Vec<TaskSpec>,
        opts: BatchOptions,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<BatchResult, EngineError> {
        opts.validate()?;
        let out = crate::batch::new_batch(self, tasks, opts, live, cancel).await;
        self.settle_runners().await;
        out
    }

    /// Checks `opts` and `tasks` as [`Engine::run_batch`] does first (nothing is written
    /// or run) and names the providers whose tasks would run in containers: what a
    /// caller prepares (their images) before the batch starts.
    pub fn container_providers(
        &self,
        tasks: &[TaskSpec],
        opts: &BatchOptions,
    ) -> Result<std::collections::BTreeSet<String>, EngineError> {
        crate::batch::container_providers(self, tasks, opts)
    }

    /// Removes what the runners made ahead for batch `batch_id` and no run took
    /// ([`Runner::cool`]).
    pub(crate) async fn cool_runners(&self, batch_id: &str) {
        if let Some(Ok(docker)) = self.runners.docker.get() {
            docker.cool(batch_id).await;
        }
    }

    /// Waits for the runners' clean-ups of dropped placements (see [`Runner::settle`]),
    /// so that nothing of a batch outlives the call that ran it.
    async fn settle_runners(&self) {
        self.runners.local.settle().await;
        if let Some(Ok(docker)) = self.runners.docker.get() {
            docker.settle().await;
        }
    }

    /// Asks the aicli process running `target` (`BATCH`, `BATCH/TASK` or `TASK`) to
    /// cancel it, through the batch's control file (`by` says who asked, for the
    /// record). The process stops the task's run (or every run, as Ctrl-C would) within
    /// a moment; a cancelled task ends `cancelled`, a queued one without running. Refused
    /// when no process runs it.
    pub fn request_cancel(
        &self,
        store: &RunStore,
        target: &str,
        by: &str,
    ) -> Result<crate::batch::CancelTarget, EngineError> {
        crate::batch::request_cancel(store, target, by)
    }

    /// Every blocked task in `store`, oldest question first.
    pub fn blocked(&self, store: &RunStore) -> Vec<crate::batch::BlockedTask> {
        crate::batch::blocked(store)
    }

    /// Answers a blocked task and continues it: the same CLI session resumed with a
    /// prompt carrying the question and the answer (or, for a provider that cannot
    /// resume, a new run carrying the task, the question and the answer), in the same
    /// worktree, with a fresh MCP token. `task_ref` is `TASK` or `BATCH/TASK`. An empty
    /// answer is refused; an answer whose run could not start leaves the task blocked,
    /// its question intact.
    pub async fn answer(
        &self,
        store: &RunStore,
        task_ref: &str,
        answer: &str,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<SessionResult, EngineError> {
        if answer.trim().is_empty() {
            return Err(EngineError::Refused(format!(
                "the answer to {task_ref} is empty: give the text the agent should continue with"
            )));
        }
        if is_placeholder(answer) {
            return Err(EngineError::Refused(format!(
                "the answer to {task_ref} is {:?}, the placeholder of the printed hint: write the answer itself, e.g. aicli answer {task_ref} \"Use Postgres\" (the question is still open)",
                answer.trim()
            )));
        }
        crate::batch::check_prompt_size(self, answer.len())
            .map_err(|m| EngineError::Refused(format!("the answer to {task_ref}: {m}")))?;
        let out = crate::batch::answer(self, store, task_ref, answer, live, cancel).await;
        self.settle_runners().await;
        out
    }

    /// Hands a conflict back to the agent that wrote the work: task `task_ref`'s CLI
    /// session resumes in its worktree with `prompt` (a land's conflicted files and their
    /// markers), as the task's next attempt (kind `resolve`), or a new run carrying the
    /// task and the prompt when the session cannot be resumed. The attempt's work is
    /// committed as every attempt's is.
    pub async fn resolve(
        &self,
        store: &RunStore,
        task_ref: &str,
        prompt: &str,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<SessionResult, EngineError> {
        crate::batch::check_prompt_size(self, prompt.len())
            .map_err(|m| EngineError::Refused(format!("the conflict's prompt for {task_ref}: {m}")))?;
        let out = crate::batch::resolve(self, store, task_ref, prompt, live, cancel).await;
        self.settle_runners().await;
        out
    }

    /// Finishes a batch whose aicli process died (or was cancelled): tasks with a final
    /// result stay as they are (a worktree they left is settled); tasks found running are
    /// marked `interrupted` (their partial output parsed and kept) and run again —
    /// resuming the CLI session when one was recorded, else fresh in the same worktree;
    /// queued ones run.
    pub async fn resume_batch(
        &self,
        store: &RunStore,
        batch_id: &str,
        live: LiveSender,
        cancel: CancellationToken,
    ) -> Result<BatchResult, EngineError> {
        let out = crate::batch::resume(self, store, batch_id, live, cancel).await;
        self.settle_runners().await;
        out
    }
}

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

/// Whether `answer` is a placeholder a printed hint shows (`"..."`, `<your answer>`), not
/// an answer: pasted as printed, it must not use the question up.
fn is_placeholder(answer: &str) -> bool {
    let a = answer.trim().trim_matches(['"', '\'', '`']).trim().to_lowercase();
    matches!(
        a.as_str(),
        "..." | "…" | "<your answer>" | "your answer" | "<answer>" | "answer" | "<text>"
    ) || a.chars().all(|c| c == '.' || c == '…') && !a.is_empty()
}
