//! The lines of `codex exec --json`, as typed serde enums.
//!
//! Mirrors `ThreadEvent` and `ThreadItem` of openai/codex, pinned:
//! <https://github.com/openai/codex/blob/08a1f30ca23f51922d1a4a4965b5ab999b64bead/codex-rs/exec/src/exec_events.rs>.
//! Checked against codex 0.171.0's recorded lines in `fixtures/codex/`.
//!
//! Older versions (0.4x) tag items with `item_type` instead of `type`, call the
//! agent's message `assistant_message`, print `mcp_tool_call` items without
//! `arguments` / `result` / `error`, and report `turn.completed.usage` without
//! `reasoning_output_tokens` and `cache_write_input_tokens`; all of that reads here (the
//! missing counts as 0). Read through [`crate::wire`]; absent and `null` fields read as
//! their defaults.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::shared::text::ToolOutput;
use crate::tagged_enum;
use crate::wire::{Count, Str, null_default};

/// One line.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum Line<'a> {
    /// The thread (session) starts or resumes: its id.
    #[serde(rename = "thread.started")]
    ThreadStarted(#[serde(borrow)] ThreadStarted<'a>),
    /// A turn starts (the prompt goes to the model).
    #[serde(rename = "turn.started")]
    TurnStarted(serde::de::IgnoredAny),
    /// The turn ends: its usage (cumulative over the thread).
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnCompleted),
    /// The turn failed.
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnFailed),
    /// An item starts.
    #[serde(rename = "item.started")]
    ItemStarted(#[serde(borrow)] ItemEvent<'a>),
    /// An item changes.
    #[serde(rename = "item.updated")]
    ItemUpdated(#[serde(borrow)] ItemEvent<'a>),
    /// An item ends.
    #[serde(rename = "item.completed")]
    ItemCompleted(#[serde(borrow)] ItemEvent<'a>),
    /// A plan item's text streams in.
    #[serde(rename = "item.plan.delta")]
    PlanDelta(serde::de::IgnoredAny),
    /// The model asks for input.
    #[serde(rename = "request_user_input")]
    RequestUserInput(serde::de::IgnoredAny),
    /// A stream error: a retry notice ("Reconnecting... 2/5 (why)") or a fatal error.
    #[serde(rename = "error")]
    Error(ErrorBody),
    /// A type codex does not print: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(Line, "type");

/// `thread.started`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ThreadStarted<'a> {
    /// The thread id (the session id; the same on resume).
    #[serde(borrow)]
    pub thread_id: Option<Str<'a>>,
}

/// `turn.completed`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TurnCompleted {
    /// Cumulative over the thread.
    #[serde(deserialize_with = "null_default")]
    pub usage: Usage,
}

/// `turn.completed.usage` (signed on the wire; a negative count reads as 0).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct Usage {
    /// All input, cached included.
    pub input_tokens: Count,
    /// The cached part of `input_tokens`.
    pub cached_input_tokens: Count,
    /// The part written to cache (0.1xx).
    pub cache_write_input_tokens: Count,
    /// All output, reasoning included.
    pub output_tokens: Count,
    /// The reasoning part of `output_tokens` (0.1xx).
    pub reasoning_output_tokens: Count,
}

/// `turn.failed`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TurnFailed {
    /// Why.
    pub error: ErrorBody,
}

/// `{message}`: the top-level `error` line, `turn.failed.error`, an `error` item.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    /// The words.
    pub message: String,
}

/// `item.started` / `item.updated` / `item.completed`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ItemEvent<'a> {
    /// The item (boxed: a large value, moved through the layers of the read).
    #[serde(borrow)]
    pub item: Option<Box<Item<'a>>>,
}

/// A thread item, by `type` (`item_type` before 0.5x).
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum Item<'a> {
    /// The agent's answer.
    #[serde(rename = "agent_message")]
    AgentMessage(#[serde(borrow)] Text<'a>),
    /// The agent's answer, as 0.4x called it.
    #[serde(rename = "assistant_message")]
    AssistantMessage(#[serde(borrow)] Text<'a>),
    /// A reasoning summary.
    #[serde(rename = "reasoning")]
    Reasoning(#[serde(borrow)] Text<'a>),
    /// A plan (plan mode).
    #[serde(rename = "plan")]
    Plan(#[serde(borrow)] Text<'a>),
    /// A shell command.
    #[serde(rename = "command_execution")]
    CommandExecution(#[serde(borrow)] Command<'a>),
    /// A patch.
    #[serde(rename = "file_change")]
    FileChange(#[serde(borrow)] FileChange<'a>),
    /// An MCP tool call.
    #[serde(rename = "mcp_tool_call")]
    McpToolCall(#[serde(borrow)] McpToolCall<'a>),
    /// A web search.
    #[serde(rename = "web_search")]
    WebSearch(#[serde(borrow)] WebSearch<'a>),
    /// The agent's to-do list.
    #[serde(rename = "todo_list")]
    TodoList(#[serde(borrow)] TodoList<'a>),
    /// A call of a collaboration tool (spawn agent, send input, wait).
    #[serde(rename = "collab_tool_call")]
    CollabToolCall(#[serde(borrow)] Bare<'a>),
    /// A non-fatal error (WebSocket fallback, missing model metadata).
    #[serde(rename = "error")]
    Error(#[serde(borrow)] ErrorItem<'a>),
    /// An item type codex did not document: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(Item, "type", old = "item_type");

/// An item with just its id.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Bare<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
}

/// `agent_message`, `reasoning`, `plan`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Text<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The text.
    pub text: Option<String>,
}

/// `error` items.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorItem<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The words.
    pub message: Option<String>,
}

/// `command_execution`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Command<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The command line.
    pub command: Option<String>,
    /// stdout and stderr.
    pub aggregated_output: ToolOutput,
    /// Its exit code, when it ended.
    pub exit_code: Option<i64>,
    /// `in_progress`, `completed`, `failed`, `declined`.
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
}

/// `file_change`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct FileChange<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The files.
    #[serde(deserialize_with = "null_default")]
    pub changes: Vec<FileUpdate>,
    /// `in_progress`, `completed`, `failed`.
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
}

/// One file of a `file_change`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct FileUpdate {
    /// The file.
    pub path: String,
    /// `add`, `delete`, `update`.
    pub kind: String,
}

/// `mcp_tool_call`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct McpToolCall<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The MCP server.
    pub server: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// The arguments (0.5x+).
    pub arguments: Value,
    /// The result (0.5x+).
    pub result: Option<McpResult>,
    /// The failure (0.5x+).
    pub error: Option<ErrorBody>,
    /// `in_progress`, `completed`, `failed`.
    #[serde(borrow)]
    pub status: Option<Str<'a>>,
}

/// `mcp_tool_call.result`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct McpResult {
    /// MCP content blocks.
    pub content: Option<ToolOutput>,
    /// Structured content.
    pub structured_content: Option<Value>,
}

/// `web_search`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WebSearch<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The query.
    pub query: String,
    /// What the search did (0.1xx).
    pub action: Value,
}

/// `todo_list`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TodoList<'a> {
    /// The item's id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The steps.
    #[serde(deserialize_with = "null_default")]
    pub items: Vec<Todo>,
}

/// One step of a `todo_list`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Todo {
    /// What it is.
    pub text: String,
    /// Whether it is done.
    pub completed: bool,
}
