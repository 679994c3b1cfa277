//! A batch's spec and result, and its line in `aicli runs`.

use std::path::PathBuf;

use aicli_providers::{SessionResult, TaskSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// The fake model API script the CLIs were pointed at (`--fake-api=SCRIPT`): an
    /// answer or a resume of the batch's tasks points them at the same fakes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fake_api: Option<String>,
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
    /// Tasks interrupted (Ctrl-C, a cancel, aicli's death): cut off while they ran, or
    /// never started. `aicli resume` finishes them.
    #[serde(default)]
    pub n_interrupted: usize,
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
    /// Tasks whose work touches the same files as another task's, or as what the
    /// target branch changed since they started, each checked by a trial merge (empty
    /// when none, or without worktrees).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<Overlap>,
    /// What each task cost over all its runs (a question's run and its answer's, a run
    /// cut off and its resume), in the order of `tasks`: the figures that add up to
    /// `total_cost_usd`, `estimated_cost_usd` and `n_cost_unknown`.
    #[serde(default)]
    pub task_costs: Vec<TaskCost>,
}

/// What one task cost over all its runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TaskCost {
    /// The task.
    pub task_id: String,
    /// USD over its runs whose cost is known.
    pub cost_usd: f64,
    /// The part of it estimated from the config's prices.
    pub estimated_usd: f64,
    /// Whether a run's cost is unknown (`cost_usd` is then a lower bound).
    pub unknown: bool,
}

/// A task's work and another's (or the target branch's) change the same files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Overlap {
    /// The task.
    pub task: String,
    /// What its work overlaps with.
    pub with: OverlapWith,
    /// The files both change.
    pub files: Vec<String>,
    /// The files a merge of the two conflicts on (a trial merge, `git merge-tree`):
    /// empty when they merge cleanly.
    pub conflicts: Vec<String>,
}

/// The other side of an [`Overlap`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OverlapWith {
    /// Another task of the batch (later in its order).
    Task {
        /// Its id.
        id: String,
    },
    /// The branch checked out in the repository, as it was when the batch settled.
    Target {
        /// Its name (none when HEAD was detached).
        branch: Option<String>,
        /// Its head then.
        head: String,
    },
}

impl Overlap {
    /// `a and b both change a.txt: they conflict on a.txt`, in words.
    pub fn describe(&self) -> String {
        let other = match &self.with {
            OverlapWith::Task { id } => id.clone(),
            OverlapWith::Target { branch: Some(b), .. } => format!("{b} (as it is now)"),
            OverlapWith::Target { branch: None, head } => {
                format!("HEAD {} (as it is now)", &head[..head.len().min(10)])
            }
        };
        let files = |v: &[String]| {
            let mut s = v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            if v.len() > 5 {
                s.push_str(&format!(" and {} more", v.len() - 5));
            }
            s
        };
        if self.conflicts.is_empty() {
            format!("{} and {other} both change {}: they merge cleanly", self.task, files(&self.files))
        } else {
            format!("{} and {other} conflict on {}", self.task, files(&self.conflicts))
        }
    }
}

/// A line of `aicli runs`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
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
    /// Interrupted: what `aicli resume` finishes.
    pub n_interrupted: usize,
    /// Parked at a usage limit, waiting for its reset (`aicli resume` goes on with them
    /// when the batch stopped meanwhile).
    #[serde(default)]
    pub n_parked: usize,
    /// Not finished (queued, running, interrupted, parked).
    pub n_unfinished: usize,
    /// Known cost.
    pub cost_usd: f64,
    /// Its first tasks ([`SUMMARY_TASKS`] at most, in order; `n_tasks` counts them all):
    /// what the batch is about.
    pub tasks: Vec<TaskGist>,
}

/// The most tasks a [`BatchSummary`] names.
pub const SUMMARY_TASKS: usize = 5;

/// A task in a few words: its id and the start of its prompt.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TaskGist {
    /// The task's id.
    pub id: String,
    /// Its prompt's first line, cut at [`GIST_CHARS`] characters (`…` marks a cut).
    pub prompt: String,
}

/// The most characters of a prompt a [`TaskGist`] keeps.
pub const GIST_CHARS: usize = 80;

impl TaskGist {
    /// `id` with the first line of `prompt`, cut at [`GIST_CHARS`].
    pub fn of(id: &str, prompt: &str) -> TaskGist {
        let mut lines = prompt.trim().lines();
        let line = lines.next().unwrap_or("").trim();
        let mut cut: String = line.chars().take(GIST_CHARS).collect();
        if cut.len() < line.len() || lines.next().is_some() {
            cut.push('…');
        }
        TaskGist {
            id: id.to_owned(),
            prompt: cut,
        }
    }
}
