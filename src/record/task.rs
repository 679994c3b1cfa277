//! A task's record: its state, attempts, answers, and what it spent.

use std::path::PathBuf;

use aicli_providers::{SessionResult, SessionStatus, TaskSpec};

use super::park::ParkRecord;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Waiting for its provider's usage limit to reset (see [`TaskRecord::parked`]); its
    /// session then resumes.
    Parked,
}

impl TaskState {
    /// Whether the task has a final result.
    pub fn is_final(self) -> bool {
        match self {
            TaskState::Succeeded | TaskState::Failed | TaskState::Blocked => true,
            TaskState::Queued
            | TaskState::Running
            | TaskState::Interrupted
            | TaskState::Parked => false,
        }
    }

    /// Its name in records (`queued`, `running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Blocked => "blocked",
            TaskState::Interrupted => "interrupted",
            TaskState::Parked => "parked",
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
    /// A resume to resolve the conflict between the task's work and the branch it lands
    /// into (`aicli land --resolve`).
    Resolve,
    /// A resume of the session a usage limit stopped, once the limit reset.
    Unpark,
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
    /// What the runner did to place, start and remove it, each step timed (a
    /// container's Engine API calls), in order; empty for a local process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<SetupStep>,
    /// The connections its container was refused by the egress proxy, per host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_denied: Vec<super::EgressDenial>,
}

impl AttemptRecord {
    /// An attempt that never started (refused by the budget, no worktree, ...): it
    /// began and ended now, with no output at `events_offset`, and its `result`.
    pub fn not_started(
        attempt: u32,
        kind: AttemptKind,
        events_offset: u64,
        result: aicli_providers::SessionResult,
    ) -> AttemptRecord {
        let now = crate::util::now_rfc3339();
        AttemptRecord {
            attempt,
            kind,
            started_at: now.clone(),
            finished_at: Some(now),
            events_start: events_offset,
            events_end: Some(events_offset),
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
            setup: Vec::new(),
            egress_denied: Vec::new(),
        }
    }
}

/// One timed step of a runner (see [`AttemptRecord::setup`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetupStep {
    /// What was done (`create container`, `attach`, `start`, …).
    pub step: String,
    /// When it began, milliseconds after the placement began.
    pub at_ms: f64,
    /// How long it took, milliseconds.
    pub ms: f64,
}

/// An attempt's share of the batch budget (see `budget`).
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
    /// The task. Its prompt is stored once, in `batch.json`: `task.json` leaves it out
    /// and [`super::BatchRecord::task`] puts it back.
    #[serde(serialize_with = "without_prompt")]
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
    /// When its work was last landed into a branch (`aicli land`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<LandRecord>,
    /// Until when it waits for a usage limit (state `parked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<ParkRecord>,
}

/// A task's work landed into a branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LandRecord {
    /// The branch it landed into.
    pub into: String,
    /// How.
    pub how: LandHow,
    /// The task branch's head that landed: the branch holds no unlanded work while it
    /// is still there.
    pub head: String,
    /// The target's head once it had landed.
    pub commit: String,
    /// When (RFC 3339).
    pub at: String,
}

/// How a task's commits reach the target branch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LandHow {
    /// A merge commit whose second parent is the task's branch (its commits kept).
    #[default]
    Merge,
    /// One new commit with the task's whole change.
    Squash,
    /// The task's commits replayed one by one on the target.
    Rebase,
}

impl LandHow {
    /// `merge`, `squash`, `rebase`.
    pub fn as_str(self) -> &'static str {
        match self {
            LandHow::Merge => "merge",
            LandHow::Squash => "squash",
            LandHow::Rebase => "rebase",
        }
    }
}

/// Serializes a task spec without its prompt (a prompt can be megabytes; the record
/// keeps one copy of it, in the batch's spec).
fn without_prompt<S: serde::Serializer>(task: &TaskSpec, s: S) -> Result<S::Ok, S::Error> {
    let mut v = serde_json::to_value(task).map_err(serde::ser::Error::custom)?;
    if let Some(m) = v.as_object_mut() {
        m.remove("prompt");
    }
    v.serialize(s)
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
            landed: None,
            parked: None,
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
            setup: Vec::new(),
            egress_denied: Vec::new(),
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
