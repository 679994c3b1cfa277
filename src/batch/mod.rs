//! A batch: which tasks run, in what order, under which budget, and how it settles.
//!
//! A task goes down `batch -> attempt -> run -> process` and its outcome comes back up
//! once: [`execute`] hands each task's [`TaskRun`] (its state, owned by whoever runs it)
//! to the [`pool`], which runs its attempts ([`attempt`]: reserve budget, place the
//! worktree, record the attempt, [`crate::run`], record what came back) and hands it
//! back for settling ([`settle`]: the worktree kept or removed, the record, notify).
//!
//! | module | owns |
//! |---|---|
//! | `new` | a new batch: ids, the spec, the records |
//! | `answer` | answering a blocked task |
//! | `resolve` | handing a land's conflict back to the task's session |
//! | `recover` | resuming a batch whose aicli stopped: leftovers, forensics of unfinished attempts |
//! | `continuation` | how an attempt continues what came before, and the prompts that say so |
//! | `task` | [`TaskRun`] |
//! | `attempt` | one attempt |
//! | `settle` | a task's end, the batch's totals, blocked tasks |
//! | `notify` | the notify hook |
//! | `pool` | the bounded, back-off-aware queue of attempts |

mod answer;
mod attempt;
mod attempt_record;
mod continuation;
mod control;
mod new;
mod notify;
mod park;
pub mod pool;
mod prepare;
mod recover;
mod resolve;
mod settle;
mod task;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

pub(crate) use answer::{answer, check_answerable};
pub(crate) use new::{check_prompt_size, container_providers, new_batch};
pub(crate) use recover::resume;
pub(crate) use resolve::resolve;
pub use control::CancelTarget;
pub(crate) use control::request_cancel;
pub use settle::BlockedTask;
pub(crate) use settle::blocked;
pub(crate) use task::TaskRun;

use crate::budget::BudgetPool;
use crate::engine::{BatchOptions, Engine, EngineError, record_error};
use crate::live::{BatchEvent, LiveSender};
use crate::record::{BatchRecord, BatchResult, BatchSpec, TaskState};
use crate::run::RunOutcome;
use crate::worktree::Repo;
use pool::{Backoff, Control, PoolOwner};

/// What every task of a batch shares while it runs: read-only but for the budget.
#[derive(Debug)]
pub(crate) struct Batch {
    pub engine: Engine,
    pub spec: BatchSpec,
    pub record: BatchRecord,
    /// The repository, when tasks run in worktrees.
    pub repo: Option<Repo>,
    pub opts: BatchOptions,
    pub live: LiveSender,
    /// The batch budget, when the batch has one: runs reserve their share of it before
    /// they start and report what they stream (see [`crate::budget`]).
    pub budget: Option<Arc<BudgetPool>>,
    /// What a task without a limit of its own reserves, USD.
    pub share: f64,
    /// `BudgetSpent` was sent.
    budget_announced: AtomicBool,
    /// The results of continuations that never started, by task: the record keeps the
    /// task as it was, and the caller (an answer) hears why.
    kept: std::sync::Mutex<std::collections::BTreeMap<String, aicli_providers::SessionResult>>,
    /// Tasks cancelled by a request in the control file, and each task's running attempt.
    task_cancels: control::TaskCancels,
    /// The author of the work's commits, read from the repository once.
    author: tokio::sync::OnceCell<aicli_providers::CommitAuthor>,
    /// Worktrees being made ahead of their tasks' first attempts.
    prepared: prepare::Prepared,
}

/// What [`execute`] gives back: the batch's result from its records, and the results of
/// continuations that never started (their tasks are unchanged in the records).
#[derive(Debug)]
pub(crate) struct Executed {
    pub result: BatchResult,
    pub kept: std::collections::BTreeMap<String, aicli_providers::SessionResult>,
}

/// Runs `tasks` (each held by this invocation) of batch `spec` to the batch result.
pub(crate) async fn execute(
    engine: &Engine,
    spec: BatchSpec,
    record: BatchRecord,
    tasks: Vec<TaskRun>,
    opts: BatchOptions,
    live: LiveSender,
    cancel: CancellationToken,
) -> Result<Executed, EngineError> {
    let started = Instant::now();
    let repo = match spec.worktrees {
        true => Some(Repo::open(&spec.repo).await?),
        false => None,
    };
    let charged_before = record.charged_usd();
    // Tasks whose last run had already finished are closed from their records.
    let (closed, to_run): (Vec<TaskRun>, Vec<TaskRun>) =
        tasks.into_iter().partition(|t| t.recorded.is_some());
    let share = crate::budget::share(
        spec.budget_usd,
        charged_before,
        spec.max_parallel,
        to_run.len(),
    );
    let batch = Arc::new(Batch {
        engine: engine.clone(),
        budget: spec.budget_usd.map(|b| BudgetPool::new(b, charged_before)),
        spec,
        record,
        repo,
        opts,
        live,
        share,
        budget_announced: AtomicBool::new(false),
        kept: Default::default(),
        task_cancels: Default::default(),
        author: tokio::sync::OnceCell::new(),
        prepared: Default::default(),
    });
    let watching = CancellationToken::new();
    let watcher = tokio::spawn(control::watch(
        batch.clone(),
        cancel.clone(),
        watching.clone(),
    ));
    let mut owner = Settler {
        batch: batch.clone(),
        settling: tokio::task::JoinSet::new(),
    };
    for mut t in closed {
        if let Some(r) = t.recorded.take() {
            let b = batch.clone();
            owner.settling.spawn(async move { b.settle(t, r).await });
        }
    }
    if batch.budget.as_ref().is_some_and(|b| b.is_spent()) {
        // Nothing new starts once the budget is spent (a resume, an answer).
        for t in to_run {
            owner.on_never_started(t, Control::StopStarting);
        }
    } else {
        let b = batch.clone();
        pool::run(
            to_run,
            batch.spec.max_parallel,
            &engine.config.engine.retry,
            move |t, attempt, cancel| b.clone().attempt(t, attempt, cancel),
            &mut owner,
            cancel,
        )
        .await;
    }
    owner.wait().await;
    engine.cool_runners(&batch.spec.batch_id).await;
    watching.cancel();
    let _ = watcher.await;
    if let Some(s) = &engine.agent_server {
        s.end_batch(&batch.spec.batch_id).await;
    }
    let mut result = batch.totals(started.elapsed());
    result.overlaps = batch.overlaps().await;
    batch
        .record
        .write_result(&result)
        .map_err(record_error(batch.record.dir()))?;
    notify::batch_ended(engine, &batch.spec, &result).await;
    let kept = std::mem::take(&mut *batch.kept.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Executed { result, kept })
}

/// The pool's owner: quick decisions in the pool loop; settling (git, records) in tasks
/// of its own, awaited before the batch result is built.
struct Settler {
    batch: Arc<Batch>,
    settling: tokio::task::JoinSet<()>,
}

impl Settler {
    async fn wait(&mut self) {
        while let Some(r) = self.settling.join_next().await {
            if let Err(e) = r {
                tracing::error!(error = %e, "settling a task failed");
            }
        }
    }
}

#[async_trait::async_trait]
impl PoolOwner<TaskRun> for Settler {
    fn on_retry(&mut self, task: &mut TaskRun, outcome: &RunOutcome, b: &Backoff) {
        // A retry that resumes a session starts from what the failed attempt left: its
        // per-run figures must not count that attempt's usage again.
        if let (Some(resume), Some(t)) = (task.next.resume.as_mut(), outcome.result.session_totals)
        {
            resume.prior = Some(t);
        }
        tracing::info!(task = %task.id(), delay_ms = b.delay.as_millis() as u64, parallelism = b.parallelism, reason = %b.reason, "backing off");
        self.batch.live.send(BatchEvent::Backoff {
            task_id: Arc::from(task.id()),
            attempt: b.attempt,
            delay_ms: b.delay.as_millis() as u64,
            parallelism: b.parallelism,
            reason: b.reason.clone(),
        });
    }

    fn account(&self, task: &TaskRun) -> String {
        let provider = &task.rec.provider;
        self.batch
            .engine
            .config
            .providers
            .get(provider)
            .and_then(|p| p.account.clone())
            .unwrap_or_else(|| provider.clone())
    }

    fn parked_until(&self, task: &TaskRun) -> Option<std::time::SystemTime> {
        let park = task.rec.parked.as_ref()?;
        (task.rec.state == TaskState::Parked).then(|| park.until())
    }

    async fn on_park(
        &mut self,
        task: &mut TaskRun,
        outcome: &mut RunOutcome,
        parks: u32,
    ) -> Option<std::time::SystemTime> {
        self.batch.park(task, outcome, parks).await
    }

    fn on_parallelism(&mut self, account: &str, limit: usize, max: usize) {
        tracing::info!(account, limit, max, "parallelism changed");
        self.batch.live.send(BatchEvent::Parallelism {
            account: Arc::from(account),
            limit,
            max,
        });
    }

    async fn on_done(&mut self, task: TaskRun, outcome: RunOutcome) -> Control {
        let b = self.batch.clone();
        self.settling
            .spawn(async move { b.settle(task, outcome.result).await });
        self.batch.after_a_run()
    }

    fn on_never_started(&mut self, task: TaskRun, _why: Control) {
        let b = self.batch.clone();
        self.settling.spawn(b.never_started(task));
    }

    fn upcoming(&mut self, task: &TaskRun) {
        self.batch.prepare(task);
    }

    fn withdrawn(&self, task: &TaskRun) -> bool {
        self.batch.task_cancels.is_cancelled(task.id())
    }
}

impl Batch {
    /// After a run settled: once the budget is spent (settled runs were charged all of
    /// it), nothing new starts; the runs in flight were stopped when the spend reached
    /// it.
    fn after_a_run(&self) -> Control {
        let Some(pool) = &self.budget else {
            return Control::Continue;
        };
        if !pool.is_spent() {
            return Control::Continue;
        }
        if !self
            .budget_announced
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.live.send(BatchEvent::BudgetSpent {
                spent_usd: pool.figures().charged,
                budget_usd: pool.budget(),
            });
        }
        Control::StopStarting
    }
}
