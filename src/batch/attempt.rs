//! One attempt of a task: its share of the budget, its worktree, its record, the run,
//! and what came back — written where it is known, once. A panic in the run is caught
//! here: the run's guards released what it held as it unwound, and the attempt is
//! recorded as crashed.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use aicli_providers::{
    AgentEvent, CommitMode, ErrorKind, EventKind, ParseContext, SessionStatus, SharedProvider,
    TaskSpec,
};
use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use super::{Batch, TaskRun};
use crate::budget::{Refusal, Reservation};
use crate::engine::TaskScope;
use crate::live::BatchEvent;
use crate::record::files;
use crate::run::{RunAgent, RunIo, RunOutcome, RunPlace, RunSpec};

/// Why a task never started once the budget was spent.
pub(super) const BUDGET_SPENT_BEFORE_START: &str =
    "the batch budget was spent before this task started";

impl Batch {
    /// Attempt `n` (of this invocation) of `task`; hands the task back with the outcome.
    pub(super) async fn attempt(
        self: Arc<Self>,
        mut task: TaskRun,
        n: u32,
        cancel: CancellationToken,
    ) -> (TaskRun, RunOutcome) {
        let mut fell_back = false;
        loop {
            let caught = AssertUnwindSafe(self.attempt_in(&mut task, n, cancel.clone()))
                .catch_unwind()
                .await;
            let mut outcome = match caught {
                Ok(o) => o,
                Err(panic) => self.crashed(&mut task, panic).await,
            };
            self.task_cancels.final_if_cancelled(task.id(), &mut outcome.result);
            // A continuation whose session could not be resumed goes on as a new run, once.
            if !fell_back
                && n == 1
                && outcome.result.error_kind == Some(ErrorKind::InvalidResume)
                && let Some(next) = task
                    .next
                    .without_the_session(&task.rec, outcome.result.error.as_deref().unwrap_or(""))
            {
                tracing::warn!(task = %task.id(), error = ?outcome.result.error, "the session could not be resumed; a new run carries the task");
                fell_back = true;
                task.next = next;
                continue;
            }
            return (task, outcome);
        }
    }

    async fn attempt_in(
        &self,
        task: &mut TaskRun,
        n: u32,
        cancel: CancellationToken,
    ) -> RunOutcome {
        if !self.task_cancels.starting(task.id(), &cancel) {
            return self
                .not_started(
                    task,
                    ErrorKind::Cancelled,
                    "cancelled by a request (aicli cancel) before it started".to_owned(),
                )
                .await;
        }
        let provider = match self.engine.registry.get(&task.rec.provider) {
            Ok(p) => p,
            Err(e) => {
                return self
                    .not_started(task, ErrorKind::BadRequest, e.to_string())
                    .await;
            }
        };
        // Its share of the batch budget first: it starts only when that fits in what is
        // left beside the runs in flight.
        let reservation = match self.reserve(task, &provider, &cancel).await {
            Ok(r) => r,
            Err(refused) => return refused,
        };
        task.reservation = reservation.clone();
        let workdir = self.place_worktree(task).await;
        if task.next.resume.is_some() {
            self.pause_before_resume(task, &provider, &cancel).await;
        }
        self.record_start(task, n, &provider, reservation.as_deref())
            .await;
        let kind = self.engine.runner_kind(&task.rec.task, &provider);
        let runner = self.engine.runner(kind).await;
        let outcome = match (workdir, runner) {
            (Err(e), _) => RunOutcome::not_run(
                &task.rec,
                ErrorKind::Unknown,
                format!("cannot create the worktree: {e}"),
                reservation,
            ),
            (_, Err(e)) => RunOutcome::not_run(
                &task.rec,
                ErrorKind::Crashed,
                format!("the {kind} runner is not available: {e}"),
                reservation,
            ),
            (Ok(workspace), Ok(runner)) => {
                let spec =
                    self.run_spec(task, &provider, workspace.clone(), runner, reservation.as_deref());
                let io = RunIo {
                    live: self.live.clone(),
                    cancel,
                    budget: reservation,
                };
                let mut outcome = crate::run::run(spec, io).await;
                self.commit_work(task, &workspace, &mut outcome).await;
                outcome
            }
        };
        self.record_end(task, n, outcome).await
    }

    /// Commits what the run changed in the task's worktree on its branch, however the
    /// run ended ([`crate::deliver::commit`]); the work goes into the result. Nothing
    /// for a run that did not start, a task without a worktree, or `engine.commit: off`.
    async fn commit_work(
        &self,
        task: &TaskRun,
        workspace: &std::path::Path,
        outcome: &mut RunOutcome,
    ) {
        let cfg = &self.engine.config.engine.commit;
        if self.repo.is_none() || !outcome.started || cfg.mode == CommitMode::Off {
            return;
        }
        // The commit says how the task ended: a task cancelled alone failed.
        self.task_cancels.final_if_cancelled(task.id(), &mut outcome.result);
        let author = self
            .author
            .get_or_init(|| crate::deliver::commit::author(workspace, cfg))
            .await;
        let attempt = crate::deliver::commit::Attempt {
            worktree: workspace,
            batch_id: &self.spec.batch_id,
            task_id: task.id(),
            prompt: &task.rec.task.prompt,
            attempt: task.rec.attempts.len() as u32,
            base: task.rec.base_commit.as_deref(),
            result: &outcome.result,
            scaffold: &outcome.scaffold,
        };
        let work = crate::deliver::commit::commit_attempt(&attempt, cfg, author).await;
        outcome.result.work = Some(work);
    }

    /// Reserves the run's share of the budget (the task's limit, its provider's, else
    /// the batch's share), waiting for room; a refusal is the attempt's outcome,
    /// recorded.
    async fn reserve(
        &self,
        task: &mut TaskRun,
        provider: &SharedProvider,
        cancel: &CancellationToken,
    ) -> Result<Option<Arc<Reservation>>, RunOutcome> {
        let limit = task
            .rec
            .task
            .max_budget_usd
            .or(provider.config().max_budget_usd);
        // A run with a limit of its own is held to it by its stream, with or without a
        // batch budget (a CLI may ignore the cap it is given).
        let pool = match (&self.budget, limit) {
            (Some(pool), _) => pool.clone(),
            (None, Some(_)) => crate::budget::BudgetPool::new(f64::INFINITY, 0.0),
            (None, None) => return Ok(None),
        };
        match pool.reserve(limit.unwrap_or(self.share), cancel).await {
            Ok(r) => {
                if let Some(l) = limit {
                    r.limit_to(l);
                }
                Ok(Some(Arc::new(r)))
            }
            Err(Refusal::Spent { .. }) => Err(self
                .not_started(
                    task,
                    ErrorKind::Budget,
                    BUDGET_SPENT_BEFORE_START.to_owned(),
                )
                .await),
            Err(Refusal::Cancelled) => {
                let mut o = self
                    .not_started(
                        task,
                        ErrorKind::Cancelled,
                        "the batch was cancelled while this task waited for its share of the budget"
                            .to_owned(),
                    )
                    .await;
                // Not an outcome of the task: `aicli resume` runs it.
                o.result.status = SessionStatus::Interrupted;
                Err(o)
            }
        }
    }

    /// The task's working directory (its worktree, made on its first attempt), with the
    /// hold on it that keeps `aicli worktrees prune` away.
    async fn place_worktree(&self, task: &mut TaskRun) -> Result<std::path::PathBuf, String> {
        self.take_prepared(task).await;
        let dir = match &self.repo {
            None => return Ok(self.spec.repo.clone()),
            Some(repo) => {
                crate::worktree::place_task(repo, &self.spec, &mut task.rec, task.origin.as_ref())
                    .await?
            }
        };
        if task.worktree_lock.is_none() {
            task.worktree_lock = crate::worktree::lock_worktree(&dir).await;
        }
        Ok(dir)
    }

    /// Everything the run needs: the task as it runs, where, its environment, limits,
    /// its MCP scope.
    fn run_spec(
        &self,
        task: &TaskRun,
        provider: &SharedProvider,
        workspace: std::path::PathBuf,
        runner: Arc<dyn crate::runner::Runner>,
        reservation: Option<&Reservation>,
    ) -> RunSpec {
        let (run_task, prior) = task.task_for_run();
        let attempt = task.rec.attempts.len() as u32;
        let engine = &self.engine;
        let base_env = self.cli_env(provider, &run_task);
        let place = RunPlace {
            batch_id: self.spec.batch_id.clone(),
            attempt,
            workdir: workdir(&workspace, &run_task),
            private_dir: self.private_dir(&run_task.id, attempt),
            task_home: self.task_home(&run_task.id),
            session_home: task.origin.as_ref().map(|o| {
                self.record
                    .dir()
                    .with_file_name(&o.batch_id)
                    .join(files::PRIVATE_DIR)
                    .join(format!("{}-home", o.task.task.id))
            }),
            branch: task.rec.branch.clone(),
            record_dir: Some(self.record.task_dir(&run_task.id)),
            pids: Some(self.record.pid_record(&run_task.id)),
            workspace,
        };
        let agent = engine.agent_server.as_ref().map(|server| RunAgent {
            server: server.clone(),
            scope: self.scope(&run_task, &place),
        });
        let mut limits = engine.limits(&self.opts, &run_task);
        if let Some(deadline) = task.deadline {
            // A parked task's timeout went on while it waited.
            let left = deadline
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            limits.timeout = limits.timeout.min(left.max(std::time::Duration::from_secs(1)));
        }
        RunSpec {
            limits,
            parse_ctx: ParseContext {
                model: provider.model_for(&run_task),
                prior,
                answered: task.answered(),
            },
            runner,
            provider: provider.clone(),
            place,
            base_env,
            search_path: engine.search_path.clone(),
            auth_precheck: engine.auth_precheck,
            budget_cap: reservation.map(Reservation::amount),
            agent,
            task: run_task,
            #[cfg(feature = "test-helpers")]
            fault: engine.fault.clone(),
        }
    }

    fn scope(&self, task: &TaskSpec, place: &RunPlace) -> TaskScope {
        let e = &self.engine.config.engine;
        TaskScope {
            batch_id: self.spec.batch_id.clone(),
            task_id: task.id.clone(),
            workspace: place.workspace.clone(),
            skills: e.skills.iter().chain(&task.skills).cloned().collect(),
            credentials: task.credentials.clone(),
            tools: e.mcp_tools.iter().chain(&task.mcp_tools).cloned().collect(),
            record_dir: place.record_dir.clone(),
            attempt: place.attempt,
        }
    }

    /// The environment a run of `task` by `provider` starts from (before its placement's
    /// changes).
    pub(super) fn cli_env(
        &self,
        provider: &SharedProvider,
        task: &TaskSpec,
    ) -> std::collections::BTreeMap<String, String> {
        let engine = &self.engine;
        crate::env::cli_env(
            &engine.source_env,
            &engine.config.engine.env_passthrough,
            provider.config(),
            Some(task),
        )
    }

    /// The run's private directory: `<batch>/private/<task>-<attempt>`.
    pub(super) fn private_dir(&self, task_id: &str, attempt: u32) -> std::path::PathBuf {
        self.record
            .dir()
            .join(files::PRIVATE_DIR)
            .join(format!("{task_id}-{attempt}"))
    }

    /// The directory of a task kept across its attempts (a container run's home: the
    /// CLI's sessions and login copies).
    pub(super) fn task_home(&self, task_id: &str) -> std::path::PathBuf {
        self.record
            .dir()
            .join(files::PRIVATE_DIR)
            .join(format!("{task_id}-home"))
    }

    /// Waits as long as the provider needs between a session's last run and its
    /// continuation ([`aicli_providers::AiCliProvider::resume_not_before`]; gemini's
    /// `session/load` in a new minute), saying so on the live stream with the time it
    /// waits; a cancel ends the wait (the run then ends at once, cancelled).
    async fn pause_before_resume(
        &self,
        task: &TaskRun,
        provider: &SharedProvider,
        cancel: &CancellationToken,
    ) {
        let Some(resume) = &task.next.resume else {
            return;
        };
        let Some((last, last_used)) = task.last_run_of(&resume.session_id) else {
            return;
        };
        let Some(until) = provider.resume_not_before(&last, last_used) else {
            return;
        };
        let Ok(wait) = until.duration_since(std::time::SystemTime::now()) else {
            return;
        };
        let name = provider.name();
        let message = format!(
            "waiting {:.0}s before continuing the session: {name} must not load a session in a wall-clock minute it was last used in (providers.{name}.acp.load_in_a_new_minute)",
            wait.as_secs_f64(),
        );
        tracing::info!(task = %task.id(), "{message}");
        self.live.send(BatchEvent::Agent {
            task_id: Arc::from(task.id()),
            event: AgentEvent::synthetic(EventKind::Status { status: message }),
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => {}
        }
    }
}

/// Where a run of `task` in `workspace` starts: the workspace or its `cwd` subdirectory.
pub(super) fn workdir(workspace: &std::path::Path, task: &TaskSpec) -> std::path::PathBuf {
    match &task.cwd {
        Some(sub) => workspace.join(sub),
        None => workspace.to_path_buf(),
    }
}
