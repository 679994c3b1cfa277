//! The live stream of a batch: what subscribers (progress display, `--json` output, the
//! MCP log) receive while tasks run, through the bounded [`crate::live`] channel.

use std::sync::Arc;

use aicli_providers::{AgentEvent, CanonicalUsage, CostSource, PendingQuestion, SessionResult};
use serde::Serialize;

/// One thing that happened in a batch.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BatchEvent {
    /// A task's CLI run started.
    TaskStarted {
        /// The task.
        task_id: Arc<str>,
        /// Its provider.
        provider: Arc<str>,
        /// 1 for the first run, more for retries and resumes.
        attempt: u32,
    },
    /// A normalized event of a running task.
    Agent {
        /// The task.
        task_id: Arc<str>,
        /// The event.
        event: AgentEvent,
    },
    /// What a running task has spent so far, by its stream: the sum of its usage
    /// increments, priced at the config's prices for each model (see
    /// [`aicli_providers::LiveSpend`]). Sent after each increment; a slow subscriber gets
    /// the latest figure only.
    TaskSpend {
        /// The task.
        task_id: Arc<str>,
        /// The run's tokens so far.
        usage: CanonicalUsage,
        /// Their cost so far, USD, when every model used has a price.
        cost_usd: Option<f64>,
        /// `estimated` (from prices), or `unknown` when a model has no price.
        cost_source: CostSource,
    },
    /// A task will be retried after a back-off.
    Backoff {
        /// The task.
        task_id: Arc<str>,
        /// The attempt that failed.
        attempt: u32,
        /// How long the pool waits before starting anything.
        delay_ms: u64,
        /// The pool's parallelism from now on.
        parallelism: usize,
        /// Why.
        reason: String,
    },
    /// A task met its provider's usage limit: it waits until the reset (with the
    /// provider's other queued tasks), then its session resumes.
    Parked {
        /// The task.
        task_id: Arc<str>,
        /// Its provider.
        provider: Arc<str>,
        /// When the limit resets, Unix seconds.
        until_unix: i64,
        /// "parked until 14:00 (claude five_hour limit)".
        status: String,
    },
    /// An account's parallelism changed: lowered by a back-off (transient 429/529), or
    /// grown back by one after as many successes.
    Parallelism {
        /// The account (the providers' `account`, else the provider's name).
        account: Arc<str>,
        /// Its tasks that may run at once from now on.
        limit: usize,
        /// The batch's parallelism, which it grows back to.
        max: usize,
    },
    /// A task ended blocked on a question to a human.
    TaskBlocked {
        /// The task.
        task_id: Arc<str>,
        /// The question.
        question: PendingQuestion,
    },
    /// A task ended (any way).
    TaskFinished {
        /// The task.
        task_id: Arc<str>,
        /// Its result.
        result: Arc<SessionResult>,
    },
    /// The batch budget is spent: settled runs were charged all of it, so nothing new
    /// starts (runs still in flight were stopped when the spend reached it).
    BudgetSpent {
        /// USD spent so far.
        spent_usd: f64,
        /// The budget.
        budget_usd: f64,
    },
}

impl BatchEvent {
    /// The task the event is about, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            BatchEvent::TaskStarted { task_id, .. }
            | BatchEvent::Agent { task_id, .. }
            | BatchEvent::TaskSpend { task_id, .. }
            | BatchEvent::Backoff { task_id, .. }
            | BatchEvent::Parked { task_id, .. }
            | BatchEvent::TaskBlocked { task_id, .. }
            | BatchEvent::TaskFinished { task_id, .. } => Some(task_id),
            BatchEvent::BudgetSpent { .. } | BatchEvent::Parallelism { .. } => None,
        }
    }
}
