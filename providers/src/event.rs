//! The normalized, vendor-neutral event model.
//!
//! Every line a CLI prints becomes one or more [`AgentEvent`]s; each keeps the line it
//! came from in `raw`, so nothing a CLI said is lost even where the model has no field
//! for it. A line the adapter does not recognise becomes [`EventKind::Unknown`]: a new
//! vendor event never fails a run. Events aicli makes itself (a log line from the MCP
//! server, a question to a human, a protocol violation) have an empty `raw`.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorKind;
use crate::usage::CanonicalUsage;

/// One normalized event and the vendor line it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentEvent {
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// The vendor's line, verbatim; empty for events aicli made itself.
    #[serde(default, skip_serializing_if = "raw_is_empty")]
    #[schemars(with = "String")]
    pub raw: Arc<str>,
}

fn raw_is_empty(raw: &Arc<str>) -> bool {
    raw.is_empty()
}

impl AgentEvent {
    /// An event parsed from `raw`.
    pub fn new(kind: EventKind, raw: Arc<str>) -> AgentEvent {
        AgentEvent { kind, raw }
    }

    /// An event aicli made itself (no vendor line).
    pub fn synthetic(kind: EventKind) -> AgentEvent {
        AgentEvent {
            kind,
            raw: Arc::from(""),
        }
    }

    /// A protocol violation found in `raw` (kept whole, unless over-long).
    pub fn protocol(message: impl Into<String>, raw: Arc<str>) -> AgentEvent {
        let line_bytes = raw.len() as u64;
        AgentEvent {
            kind: EventKind::Protocol {
                message: message.into(),
                line_bytes,
            },
            raw,
        }
    }

    /// A protocol violation of a line of `line_bytes` bytes, of which `raw` was kept.
    pub fn protocol_with(message: impl Into<String>, line_bytes: u64, raw: Arc<str>) -> AgentEvent {
        AgentEvent {
            kind: EventKind::Protocol {
                message: message.into(),
                line_bytes,
            },
            raw,
        }
    }

    /// The short name of the event's type (`assistant_text`, ...).
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

/// Severity of a [`EventKind::Log`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Diagnostic detail.
    Debug,
    /// Progress.
    Info,
    /// Something odd that did not stop the work.
    Warning,
    /// Something failed.
    Error,
}

impl LogLevel {
    /// Parses `debug`, `info`, `warning` (or `warn`) and `error`.
    pub fn parse(s: &str) -> Option<LogLevel> {
        Some(match s {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warning" | "warn" => LogLevel::Warning,
            "error" => LogLevel::Error,
            _ => return None,
        })
    }
}

/// What an event says, vendor-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The CLI started (or resumed) a session.
    SessionStarted {
        /// The CLI's session id (Claude `session_id`, Codex `thread_id`, Gemini `session_id`).
        session_id: String,
        /// The model the CLI says it uses, when it says.
        #[serde(default)]
        model: Option<String>,
        /// The CLI's working directory, when it says.
        #[serde(default)]
        cwd: Option<String>,
        /// Tools the CLI offers the model, when it says.
        #[serde(default)]
        tools: Vec<String>,
        /// MCP servers the CLI connected, when it says.
        #[serde(default)]
        mcp_servers: Vec<McpServerStatus>,
        /// The CLI's own version, when it says.
        #[serde(default)]
        cli_version: Option<String>,
    },
    /// The prompt as the CLI echoed it, or a user message it injected.
    UserMessage {
        /// The text.
        text: String,
    },
    /// Text from the model.
    AssistantText {
        /// The text (a whole block, or a chunk when `delta`).
        text: String,
        /// Whether this is a chunk to be concatenated with its neighbours.
        #[serde(default)]
        delta: bool,
    },
    /// The model's reasoning, where the CLI shows it.
    Thinking {
        /// The reasoning text.
        text: String,
    },
    /// The agent invoked a tool.
    ToolCall {
        /// The call's id, used to match its result.
        id: String,
        /// The tool's name (for MCP tools, the tool's own name).
        name: String,
        /// The arguments.
        #[serde(default)]
        input: Value,
        /// The MCP server, for MCP tools.
        #[serde(default)]
        mcp_server: Option<String>,
    },
    /// A tool call finished.
    ToolResult {
        /// The id of the call.
        id: String,
        /// The tool's name, where the line says it.
        #[serde(default)]
        name: Option<String>,
        /// The output as text.
        #[serde(default)]
        output: String,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
        /// The exit code of a shell command, where the CLI reports it.
        #[serde(default)]
        exit_code: Option<i64>,
    },
    /// Tokens the run used since the previous `Usage` event of the same run, as the CLI
    /// reports them while it runs. The events are increments: their sum over a run, per
    /// model, is the run's usage so far, and after the last line it equals the result's
    /// `canonical_usage` (and, per model, its `usage_by_model`). For live spend and
    /// token displays; see the crate docs ("Live usage").
    Usage {
        /// The increment, in the canonical meaning.
        usage: CanonicalUsage,
        /// The model that used the tokens, where known.
        #[serde(default)]
        model: Option<String>,
    },
    /// What the CLI says it is doing: a turn or an API request started (Codex
    /// `turn.started`, Claude `system/status`), or the framing of a streamed message
    /// (Claude `stream_event` `message_start`, `content_block_start`, ...).
    Status {
        /// The CLI's word for it (`turn_started`, `requesting`, `message_start`, ...).
        status: String,
    },
    /// The agent's plan or to-do list, as it stands now (Codex `todo_list` items).
    Plan {
        /// The steps, in order.
        items: Vec<PlanItem>,
    },
    /// A background task or subagent of the CLI (Claude `system/task_*`) started,
    /// progressed or ended.
    Subtask {
        /// The CLI's id of the task.
        task_id: String,
        /// `started`, `running`, `completed`, `failed`, `stopped`, ... (the CLI's word).
        status: String,
        /// What the task does, where the line says.
        #[serde(default)]
        description: Option<String>,
        /// The tool call that started it, where the line says.
        #[serde(default)]
        tool_call_id: Option<String>,
        /// Tokens the task used so far, where the line says.
        #[serde(default)]
        total_tokens: Option<u64>,
    },
    /// A hook of the CLI (Claude `system/hook_started`, `hook_response`) ran.
    Hook {
        /// The hook event (`PreToolUse`, `Stop`, ...).
        hook: String,
        /// `started` or `response`.
        phase: String,
        /// How it ended (`success`, `error`, ...), for a response.
        #[serde(default)]
        outcome: Option<String>,
        /// The hook command's exit code, for a response.
        #[serde(default)]
        exit_code: Option<i64>,
    },
    /// The CLI is retrying a failed API request.
    Retry {
        /// Attempt number, where given.
        #[serde(default)]
        attempt: Option<u32>,
        /// The CLI's retry limit, where given.
        #[serde(default)]
        max_retries: Option<u32>,
        /// Delay before the next attempt, where given.
        #[serde(default)]
        delay_ms: Option<u64>,
        /// HTTP status of the failure, where given.
        #[serde(default)]
        http_status: Option<u16>,
        /// What kind of failure is being retried.
        error_kind: ErrorKind,
        /// The CLI's words.
        message: String,
    },
    /// The vendor's rate-limit state.
    RateLimit {
        /// The vendor's status word (`allowed`, `allowed_warning`, `rejected`).
        status: String,
        /// When the limit resets, Unix seconds, when known.
        #[serde(default)]
        resets_at: Option<i64>,
        /// Which limit (`five_hour`, ...), when known.
        #[serde(default)]
        limit_type: Option<String>,
    },
    /// The CLI refused a tool call for lack of permission.
    PermissionDenied {
        /// The tool's name.
        tool: String,
        /// The refused call's id, where given.
        #[serde(default)]
        tool_call_id: Option<String>,
        /// The CLI's words.
        message: String,
    },
    /// An error the CLI reported.
    Error {
        /// Its classification.
        error_kind: ErrorKind,
        /// The CLI's words.
        message: String,
        /// Whether the CLI gives up because of it (false for warnings and retries).
        fatal: bool,
        /// HTTP status, where given.
        #[serde(default)]
        http_status: Option<u16>,
    },
    /// The CLI's last word on the run, or on one turn of it (Claude prints a `result`
    /// line per turn; with background agents there may be several in one run).
    Final {
        /// Whether the run succeeded, by the structured signals (never by `subtype`).
        success: bool,
        /// The final answer, where the line carries it.
        #[serde(default)]
        text: Option<String>,
        /// The failure's classification, when not a success.
        #[serde(default)]
        error_kind: Option<ErrorKind>,
        /// The failure's message, when not a success.
        #[serde(default)]
        error: Option<String>,
        /// The usage this line reports, where it carries any (for a run's totals add up
        /// the [`EventKind::Usage`] events, or read the result).
        #[serde(default)]
        usage: Option<CanonicalUsage>,
        /// The cost in USD this line reports for its turn, where it does.
        #[serde(default)]
        cost_usd: Option<f64>,
        /// Turns the CLI counted, where it does.
        #[serde(default)]
        num_turns: Option<u32>,
        /// Duration the CLI measured, where it does.
        #[serde(default)]
        duration_ms: Option<u64>,
    },
    /// A log line published by the agent through aicli's MCP server.
    Log {
        /// Severity.
        level: LogLevel,
        /// The message (at most 5,000 characters).
        message: String,
        /// Who logged it, free text.
        #[serde(default)]
        source: String,
    },
    /// The agent asked a human a question through aicli's MCP server.
    Question {
        /// The question.
        question: String,
        /// Suggested answers, possibly none.
        #[serde(default)]
        options: Vec<String>,
    },
    /// A line broke the protocol: not JSON, not UTF-8, over the length cap, or the wrong
    /// vendor's shape. The line is kept in `raw` (unless over the cap).
    Protocol {
        /// What was wrong.
        message: String,
        /// The line's size in bytes.
        line_bytes: u64,
    },
    /// A well-formed line of a type this adapter does not know.
    Unknown {
        /// The vendor's type name, where the line has one.
        #[serde(default)]
        vendor_type: Option<String>,
    },
}

impl EventKind {
    /// The short name of the type, as serialized.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::SessionStarted { .. } => "session_started",
            EventKind::UserMessage { .. } => "user_message",
            EventKind::AssistantText { .. } => "assistant_text",
            EventKind::Thinking { .. } => "thinking",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ToolResult { .. } => "tool_result",
            EventKind::Usage { .. } => "usage",
            EventKind::Status { .. } => "status",
            EventKind::Plan { .. } => "plan",
            EventKind::Subtask { .. } => "subtask",
            EventKind::Hook { .. } => "hook",
            EventKind::Retry { .. } => "retry",
            EventKind::RateLimit { .. } => "rate_limit",
            EventKind::PermissionDenied { .. } => "permission_denied",
            EventKind::Error { .. } => "error",
            EventKind::Final { .. } => "final",
            EventKind::Log { .. } => "log",
            EventKind::Question { .. } => "question",
            EventKind::Protocol { .. } => "protocol",
            EventKind::Unknown { .. } => "unknown",
        }
    }
}

/// One step of a [`EventKind::Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlanItem {
    /// What the step is.
    pub text: String,
    /// Whether it is done.
    #[serde(default)]
    pub completed: bool,
}

/// An MCP server as the CLI reported it at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerStatus {
    /// The server's name in the CLI's config.
    pub name: String,
    /// The CLI's status word (`connected`, `failed`, ...).
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn events_round_trip_with_type_tag_and_raw() {
        let ev = AgentEvent::new(
            EventKind::AssistantText {
                text: "hi".into(),
                delta: true,
            },
            Arc::from("{\"x\":1}"),
        );
        let json = serde_json::to_value(&ev).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"type":"assistant_text","text":"hi","delta":true,"raw":"{\"x\":1}"})
        );
        let back: AgentEvent = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, ev);
    }

    #[test]
    fn synthetic_events_omit_raw() {
        let ev = AgentEvent::synthetic(EventKind::Log {
            level: LogLevel::Info,
            message: "m".into(),
            source: String::new(),
        });
        let json = serde_json::to_string(&ev).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"type":"log","level":"info","message":"m","source":""}"#
        );
        assert_eq!(ev.type_name(), "log");
    }

    #[test]
    fn log_levels_parse() {
        assert_eq!(LogLevel::parse("warn"), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("error"), Some(LogLevel::Error));
        assert_eq!(LogLevel::parse("loud"), None);
    }
}
