//! The lines of `claude -p --output-format stream-json --verbose`, as typed serde enums.
//!
//! Mirrors the Claude Agent SDK's message types and its parser, pinned:
//! <https://github.com/anthropics/claude-agent-sdk-python/blob/008e361d0cd8b29b269f63b898892ec6efde37f3/src/claude_agent_sdk/_internal/message_parser.py>
//! and `types.py` at
//! <https://github.com/anthropics/claude-agent-sdk-python/blob/005d7596d27f42c14a444aa2fb1258dd795abb16/src/claude_agent_sdk/types.py>
//! (`stream_event.event` is the Anthropic Messages streaming event). Checked against
//! claude 2.1.332's recorded lines in `fixtures/claude/`.
//!
//! Only the fields a decoder uses are named; the rest of each line is skipped unread.
//! Absent and `null` fields read as their defaults. Read through [`crate::wire`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

pub use super::message::*;
use crate::tagged_enum;
use crate::wire::{Count, Kept, Str, null_default};
use serde_json::value::RawValue;

/// One line.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum Line<'a> {
    /// `system`, by `subtype`.
    #[serde(rename = "system")]
    System(#[serde(borrow)] System<'a>),
    /// `assistant`: one content block of a model message (a message of several blocks
    /// is several lines with the same `message.id`).
    #[serde(rename = "assistant")]
    Assistant(#[serde(borrow)] Assistant<'a>),
    /// `user`: tool results, or text the CLI injected.
    #[serde(rename = "user")]
    User(#[serde(borrow)] User<'a>),
    /// `stream_event` (with `--include-partial-messages`): a raw API streaming event.
    #[serde(rename = "stream_event")]
    StreamEvent(#[serde(borrow)] StreamEvent<'a>),
    /// `rate_limit_event`.
    #[serde(rename = "rate_limit_event")]
    RateLimit(#[serde(borrow)] RateLimitEvent<'a>),
    /// `result`: the end of a turn.
    #[serde(rename = "result")]
    Result(#[serde(borrow)] Box<ResultLine<'a>>),
    /// `subagent_token_usage`: tokens a subagent used.
    #[serde(rename = "subagent_token_usage")]
    SubagentTokenUsage(#[serde(borrow)] SubagentTokenUsage<'a>),
    /// A type claude does not print (or a line without one): its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(Line, "type");

/// The `system` lines, by `subtype`.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum System<'a> {
    /// `init`: the session starts.
    #[serde(rename = "init")]
    Init(#[serde(borrow)] Box<Init<'a>>),
    /// `api_retry`: a failed API request is retried.
    #[serde(rename = "api_retry")]
    ApiRetry(#[serde(borrow)] ApiRetry<'a>),
    /// `permission_denied`: a tool call was refused.
    #[serde(rename = "permission_denied")]
    PermissionDenied(#[serde(borrow)] PermissionDenied<'a>),
    /// `status`: what the CLI is doing (`requesting`, `compacting`, or null).
    #[serde(rename = "status")]
    Status(#[serde(borrow)] Status<'a>),
    /// `hook_started`.
    #[serde(rename = "hook_started")]
    HookStarted(#[serde(borrow)] Hook<'a>),
    /// `hook_response`.
    #[serde(rename = "hook_response")]
    HookResponse(#[serde(borrow)] Hook<'a>),
    /// `task_started`: a background task or subagent started.
    #[serde(rename = "task_started")]
    TaskStarted(#[serde(borrow)] Task<'a>),
    /// `task_progress`.
    #[serde(rename = "task_progress")]
    TaskProgress(#[serde(borrow)] Task<'a>),
    /// `task_updated`: a patch of the task's state (`patch.status`).
    #[serde(rename = "task_updated")]
    TaskUpdated(#[serde(borrow)] Task<'a>),
    /// `task_notification`: the task ended (`completed`, `failed`, `stopped`).
    #[serde(rename = "task_notification")]
    TaskNotification(#[serde(borrow)] Task<'a>),
    /// A subtype this decoder does not read: its `subtype`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(System, "subtype");

/// `system/init`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Init<'a> {
    /// The session id.
    #[serde(borrow)]
    pub session_id: Option<Str<'a>>,
    /// The main model.
    #[serde(borrow)]
    pub model: Option<Str<'a>>,
    /// The working directory.
    #[serde(borrow)]
    pub cwd: Option<Str<'a>>,
    /// Tools offered to the model.
    #[serde(deserialize_with = "null_default")]
    pub tools: Vec<String>,
    /// MCP servers and their status (kept verbatim for `provider_data`).
    #[serde(borrow)]
    pub mcp_servers: Option<Kept<'a, Vec<McpServer>>>,
    /// The CLI's version (2.0.x prints none).
    #[serde(borrow)]
    pub claude_code_version: Option<Str<'a>>,
    /// `default`, `acceptEdits`, ... (verbatim for `provider_data`).
    #[serde(borrow, rename = "permissionMode")]
    pub permission_mode: Option<&'a RawValue>,
    /// Where the key came from (verbatim for `provider_data`).
    #[serde(borrow, rename = "apiKeySource")]
    pub api_key_source: Option<&'a RawValue>,
}

/// One of `system/init.mcp_servers`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct McpServer {
    /// Its name.
    pub name: String,
    /// `connected`, `failed`, ...
    pub status: String,
}

/// `system/api_retry`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ApiRetry<'a> {
    /// This attempt.
    pub attempt: Option<u32>,
    /// The CLI's limit.
    pub max_retries: Option<u32>,
    /// The delay before the next attempt.
    pub retry_delay_ms: Option<f64>,
    /// The failed request's HTTP status (null: no HTTP answer).
    pub error_status: Option<u16>,
    /// `rate_limit`, `server_error`, `unknown`, ...
    #[serde(borrow)]
    pub error: Option<Str<'a>>,
}

/// `system/permission_denied`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PermissionDenied<'a> {
    /// The refused tool.
    #[serde(borrow)]
    pub tool_name: Option<Str<'a>>,
    /// The refused call.
    #[serde(borrow)]
    pub tool_use_id: Option<Str<'a>>,
    /// The CLI's words.
    #[serde(borrow)]
    pub message: Option<Str<'a>>,
}

/// `system/status`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Status<'a> {
    /// `requesting`, `compacting`, or null (done).
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
}

/// `system/hook_started` and `hook_response`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Hook<'a> {
    /// The hook event (`PreToolUse`, ...); the SDK reads any of the three names.
    #[serde(borrow)]
    pub hook_event: Option<Str<'a>>,
    /// See `hook_event`.
    #[serde(borrow)]
    pub hook_name: Option<Str<'a>>,
    /// See `hook_event`.
    #[serde(borrow)]
    pub hook_event_name: Option<Str<'a>>,
    /// How the hook ended (responses).
    #[serde(borrow)]
    pub outcome: Option<Str<'a>>,
    /// The hook command's exit code (responses).
    pub exit_code: Option<i64>,
}

/// `system/task_*`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Task<'a> {
    /// The task.
    #[serde(borrow)]
    pub task_id: Option<Str<'a>>,
    /// What it does.
    #[serde(borrow)]
    pub description: Option<Str<'a>>,
    /// `task_notification`: `completed`, `failed`, `stopped`.
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
    /// The tool call that started it.
    #[serde(borrow)]
    pub tool_use_id: Option<Str<'a>>,
    /// `task_progress` / `task_notification`: tokens, tool uses, duration so far.
    pub usage: Option<TaskUsage>,
    /// `task_updated`: the changed fields.
    #[serde(borrow)]
    pub patch: Option<TaskPatch<'a>>,
}

/// `usage` of a task line.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskUsage {
    /// Tokens so far.
    pub total_tokens: Count,
}

/// `patch` of a `task_updated` line.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskPatch<'a> {
    /// `pending`, `running`, `paused`, `completed`, `failed`, `killed`.
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
}

/// `rate_limit_event`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RateLimitEvent<'a> {
    /// The state.
    #[serde(borrow)]
    pub rate_limit_info: Option<RateLimitInfo<'a>>,
}

/// `rate_limit_event.rate_limit_info`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RateLimitInfo<'a> {
    /// `allowed`, `allowed_warning`, `rejected`.
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
    /// Unix seconds.
    #[serde(rename = "resetsAt")]
    pub resets_at: Option<f64>,
    /// `five_hour`, ...
    #[serde(borrow, rename = "rateLimitType")]
    pub rate_limit_type: Option<Str<'a>>,
}

/// `subagent_token_usage`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SubagentTokenUsage<'a> {
    /// The subagent.
    #[serde(borrow)]
    pub agent_id: Option<Str<'a>>,
    /// Its tokens.
    pub usage: Option<MessageUsage>,
}

/// `result`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResultLine<'a> {
    /// `success` (also on API errors), `error_max_turns`, `error_max_budget_usd`,
    /// `error_during_execution`.
    #[serde(borrow)]
    pub subtype: Option<Str<'a>>,
    /// Whether the turn failed.
    pub is_error: Option<bool>,
    /// `completed`, `api_error`, `max_turns`, `budget_exhausted`, ... (2.1.x).
    #[serde(borrow)]
    pub terminal_reason: Option<Str<'a>>,
    /// The final answer (or the API error's text).
    pub result: Option<String>,
    /// Error messages (`Reached maximum number of turns (1)`).
    #[serde(borrow)]
    pub errors: Option<Kept<'a, Value>>,
    /// The failed request's HTTP status (2.1.110+).
    pub api_error_status: Option<u16>,
    /// The API's error type.
    #[serde(borrow)]
    pub api_error_type: Option<Str<'a>>,
    /// `connection_failed`.
    #[serde(borrow)]
    pub api_error: Option<Str<'a>>,
    /// Turns of this turn's query.
    pub num_turns: Option<u32>,
    /// Its duration.
    pub duration_ms: Option<u64>,
    /// Session-cumulative cost (after `--resume` too).
    #[serde(borrow)]
    pub total_cost_usd: Option<Kept<'a, f64>>,
    /// This turn's main-model usage (not side models, not subagents).
    pub usage: Option<ResultUsage>,
    /// Session-cumulative usage and cost by model, side models and subagents included.
    #[serde(borrow, rename = "modelUsage")]
    pub model_usage: Option<Kept<'a, BTreeMap<String, ModelUsage>>>,
    /// The same since the previous `result` line of the process (2.1.3xx).
    #[serde(borrow)]
    pub model_usage_since_last_result: Option<Kept<'a, BTreeMap<String, ModelUsage>>>,
    /// The session id.
    #[serde(borrow)]
    pub session_id: Option<Str<'a>>,
    /// Verbatim for `provider_data`.
    #[serde(borrow)]
    pub stop_reason: Option<&'a RawValue>,
    /// Verbatim for `provider_data`.
    #[serde(borrow)]
    pub permission_denials: Option<&'a RawValue>,
    /// Verbatim for `provider_data`.
    #[serde(borrow)]
    pub duration_api_ms: Option<&'a RawValue>,
}

/// `result.usage`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct ResultUsage {
    /// Uncached input.
    pub input_tokens: Count,
    /// Output.
    pub output_tokens: Count,
    /// Cache reads.
    pub cache_read_input_tokens: Count,
    /// Cache writes.
    pub cache_creation_input_tokens: Count,
    /// `{thinking_tokens}`.
    #[serde(deserialize_with = "null_default")]
    pub output_tokens_details: OutputDetails,
}

/// `result.usage.output_tokens_details`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct OutputDetails {
    /// Reasoning.
    pub thinking_tokens: Count,
}

/// One model's entry of `modelUsage`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ModelUsage {
    /// Uncached input.
    pub input_tokens: Count,
    /// Output.
    pub output_tokens: Count,
    /// Cache reads.
    pub cache_read_input_tokens: Count,
    /// Cache writes.
    pub cache_creation_input_tokens: Count,
    /// Reasoning (2.1.x).
    pub thinking_tokens: Count,
    /// What the CLI priced it at.
    #[serde(rename = "costUSD")]
    pub cost_usd: Option<f64>,
}
