//! The normalized outcome of one CLI run ([`SessionResult`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorKind;
use crate::usage::{CanonicalUsage, Cost, CostSource};

/// How a run ended, at the level a person cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// The CLI finished and reported success.
    Succeeded,
    /// The run failed; `error_kind` says why.
    Failed,
    /// The agent asked a human a question and ended its turn; answering resumes it.
    Blocked,
    /// aicli itself stopped before the run ended (found on restart).
    Interrupted,
}

/// A question the agent asked and is waiting on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PendingQuestion {
    /// The question.
    pub question: String,
    /// Suggested answers, possibly none.
    #[serde(default)]
    pub options: Vec<String>,
    /// When it was asked (RFC 3339).
    #[serde(default)]
    pub asked_at: String,
}

/// How a run continued an earlier run of the same task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Continuation {
    /// `resume`: the CLI resumed the earlier session; `new_run`: a new session whose
    /// prompt carries the earlier context (the provider cannot resume, or no session id
    /// was recorded).
    pub mode: ContinuationMode,
    /// The session resumed, for `resume`.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Why this run happened (`answer`, `recover`), in words.
    pub reason: String,
}

/// See [`Continuation::mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContinuationMode {
    /// The same CLI session, resumed.
    Resume,
    /// A new CLI session carrying the context in its prompt.
    NewRun,
}

/// Figures the CLI reported as cumulative over the whole session at the end of a run.
/// The next run that resumes the session subtracts them to get its own figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionTotals {
    /// Session-cumulative usage as the CLI reported it (canonical meaning).
    pub usage: CanonicalUsage,
    /// Session-cumulative cost as the CLI reported it, where it does.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// What the parser needs to know beyond the lines themselves.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ParseContext {
    /// The model the run asked for (Codex never names it in its stream).
    pub model: Option<String>,
    /// The session totals of the run this one resumed, if it resumed one.
    pub prior: Option<SessionTotals>,
    /// The question the previous run ended on and the human's answer, when this run
    /// continues it with that answer (a two-way decoder that asked the question itself,
    /// such as an ACP permission request, answers the same request the same way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<AnsweredQuestion>,
}

/// A question a run ended on, and the answer it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AnsweredQuestion {
    /// The question, as the run asked it.
    pub question: String,
    /// The answer.
    pub answer: String,
}

/// The normalized outcome of one CLI run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SessionResult {
    /// The task's id in its batch (empty when parsed outside a batch).
    pub task_id: String,
    /// The provider that ran it.
    pub provider: String,
    /// The CLI's session id, when the CLI reported one.
    pub session_id: Option<String>,
    /// The model, as the CLI reported it or as requested.
    pub model: Option<String>,
    /// How it ended.
    pub status: SessionStatus,
    /// `status == succeeded`.
    pub success: bool,
    /// The agent's final answer (empty when there was none).
    pub response: String,
    /// Why it failed (null on success and when blocked).
    pub error_kind: Option<ErrorKind>,
    /// The failure in words.
    pub error: Option<String>,
    /// USD this run cost, when known.
    pub cost_usd: Option<f64>,
    /// Where `cost_usd` came from.
    pub cost_source: CostSource,
    /// Wall-clock duration of the run (the CLI's figure when parsed offline).
    pub duration_ms: u64,
    /// Turns the CLI counted, where it counts them.
    pub num_turns: Option<u32>,
    /// Tool invocations the agent made.
    pub tool_calls: u32,
    /// Of those, the calls the CLI refused: denied by its permission mode, or a tool the
    /// mode leaves out. A run with refusals did less than it was asked, whatever its
    /// status says; `aicli` shows the count beside the status.
    pub tool_calls_refused: u32,
    /// Of those, the calls that ran and failed (an error result, a command's non-zero
    /// exit where the CLI marks it an error).
    pub tool_calls_failed: u32,
    /// Per-run token usage.
    pub canonical_usage: CanonicalUsage,
    /// `canonical_usage` split by model (side models and subagents included), where the
    /// CLI says which model used what; empty when it does not.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub usage_by_model: BTreeMap<String, CanonicalUsage>,
    /// Session-cumulative figures the CLI reported, kept for a later resume.
    pub session_totals: Option<SessionTotals>,
    /// The CLI's exit code (null when killed by a signal or never started).
    pub exit_code: Option<i32>,
    /// The git branch the task ran on.
    pub branch: Option<String>,
    /// The worktree the task ran in (kept when it holds work).
    pub worktree: Option<PathBuf>,
    /// The pending question, when blocked.
    pub question: Option<PendingQuestion>,
    /// How this run continued an earlier one (an answer, a recovery), when it did.
    pub continuation: Option<Continuation>,
    /// The CLI's version, when it reported it.
    pub cli_version: Option<String>,
    /// Lines that broke the protocol (malformed, over-long, wrong vendor).
    pub protocol_errors: u32,
    /// The subscription's usage limit the run met, with its reset, when `error_kind` is
    /// `usage_limit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_limit: Option<UsageLimit>,
    /// Vendor facts with no neutral field (Claude `terminal_reason`, denials, ...).
    pub provider_data: Value,
    /// What aicli committed of this run's work on the task's branch (absent when the
    /// task has no worktree, or commits are off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<AttemptWork>,
}

/// A subscription's usage limit a run met.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct UsageLimit {
    /// When it resets, Unix seconds, when known (clamped to the next 8 days).
    pub resets_at: Option<i64>,
    /// Which window, when known: Claude's `five_hour`, `seven_day`, ...; Gemini's `daily`.
    pub window: Option<String>,
    /// Where the reset came from.
    pub source: ResetSource,
}

/// Where a usage limit's reset came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResetSource {
    /// A structured field the CLI printed (Claude's `rate_limit_event`).
    Field,
    /// The CLI's words ("try again at 10:36 PM", "Please retry in 12s"), or the rule the
    /// words point to (Gemini's daily quota resets at midnight Pacific time).
    Text,
    /// Nothing says when.
    #[default]
    Unknown,
}

/// An attempt's work, committed on the task's branch when the run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct AttemptWork {
    /// The commit aicli made, when the run changed something (commits the CLI made
    /// itself are on the branch before it, as they were).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Files in that commit.
    pub files: u32,
    /// Changes left uncommitted in the worktree, and why: never dropped silently.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// The size limit files were held to (`engine.commit.max_file_bytes`), when one was
    /// over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_file_bytes: Option<u64>,
    /// Why the work could not be committed, when it could not (it is then uncommitted
    /// in the worktree, as the run left it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The task's branch after this attempt: its head commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// What the task's branch holds over its base commit after this attempt (every
    /// attempt's commits and the CLI's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<DiffStat>,
}

/// What a branch holds over its base.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffStat {
    /// Commits on it that the base does not have.
    pub commits: u32,
    /// Files they change.
    pub files: u32,
    /// Lines added.
    pub insertions: u64,
    /// Lines removed.
    pub deletions: u64,
}

impl DiffStat {
    /// `+12 −3 in 4 files`, or `no change`.
    pub fn short(&self) -> String {
        if self.files == 0 {
            return "no change".to_owned();
        }
        format!(
            "+{} −{} in {} file{}",
            self.insertions,
            self.deletions,
            self.files,
            if self.files == 1 { "" } else { "s" }
        )
    }
}

/// A change left uncommitted in the worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LeftOut {
    /// Its path in the worktree.
    pub path: String,
    /// Its size, bytes.
    pub bytes: u64,
    /// Why.
    pub reason: LeftOutReason,
}

/// Why a change was left uncommitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeftOutReason {
    /// Larger than `engine.commit.max_file_bytes`.
    TooLarge,
    /// aicli put it there for the CLI (an MCP config, a link, a lockfile).
    Scaffold,
}

impl AttemptWork {
    /// What the summary says of it besides the commit: `2 files over 10 MiB left
    /// uncommitted in the worktree`, or why nothing was committed.
    pub fn note(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(format!("the work was not committed: {e}"));
        }
        let large = self
            .left_out
            .iter()
            .filter(|l| l.reason == LeftOutReason::TooLarge)
            .count();
        (large > 0).then(|| {
            format!(
                "{large} file{} over {} left uncommitted in the worktree",
                if large == 1 { "" } else { "s" },
                self.max_file_bytes
                    .map_or("the size limit".to_owned(), human_bytes)
            )
        })
    }
}

/// `10 MiB`, `512 KiB`, `300 bytes`.
fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} bytes")
    }
}

impl Default for SessionResult {
    fn default() -> SessionResult {
        SessionResult {
            task_id: String::new(),
            provider: String::new(),
            session_id: None,
            model: None,
            status: SessionStatus::Failed,
            success: false,
            response: String::new(),
            error_kind: Some(ErrorKind::Unknown),
            error: None,
            cost_usd: None,
            cost_source: CostSource::Unknown,
            duration_ms: 0,
            num_turns: None,
            tool_calls: 0,
            tool_calls_refused: 0,
            tool_calls_failed: 0,
            canonical_usage: CanonicalUsage::default(),
            usage_by_model: BTreeMap::new(),
            session_totals: None,
            exit_code: None,
            branch: None,
            worktree: None,
            question: None,
            continuation: None,
            cli_version: None,
            protocol_errors: 0,
            usage_limit: None,
            provider_data: Value::Null,
            work: None,
        }
    }
}

impl SessionResult {
    /// `2 tool calls refused, 1 failed`: what the run's tools did not do; `None` when every
    /// call ran and none failed.
    pub fn tool_trouble(&self) -> Option<String> {
        let calls = |n: u32| if n == 1 { "tool call" } else { "tool calls" };
        match (self.tool_calls_refused, self.tool_calls_failed) {
            (0, 0) => None,
            (n, 0) => Some(format!("{n} {} refused", calls(n))),
            (0, f) => Some(format!("{f} {} failed", calls(f))),
            (n, f) => Some(format!("{n} {} refused, {f} failed", calls(n))),
        }
    }

    /// Marks the result failed with `kind` and `message` (keeping everything else).
    pub fn fail(&mut self, kind: ErrorKind, message: impl Into<String>) {
        self.status = SessionStatus::Failed;
        self.success = false;
        self.error_kind = Some(kind);
        self.error = Some(message.into());
    }

    /// Marks the result succeeded.
    pub fn succeed(&mut self) {
        self.status = SessionStatus::Succeeded;
        self.success = true;
        self.error_kind = None;
        self.error = None;
    }

    /// Marks the result blocked on `question` (not a failure).
    pub fn block(&mut self, question: PendingQuestion) {
        self.status = SessionStatus::Blocked;
        self.success = false;
        self.error_kind = None;
        self.error = None;
        self.question = Some(question);
    }

    /// Sets the cost and its source.
    pub fn set_cost(&mut self, cost: Cost) {
        self.cost_usd = cost.cost_usd;
        self.cost_source = cost.cost_source;
    }

    /// A failed result for a run that never started (binary missing, bad task).
    pub fn not_started(provider: &str, kind: ErrorKind, message: impl Into<String>) -> Self {
        let mut r = SessionResult {
            provider: provider.to_owned(),
            ..SessionResult::default()
        };
        r.fail(kind, message);
        r
    }
}
